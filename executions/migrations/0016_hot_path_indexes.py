"""The stage path's tables keep only the indexes a query uses, and leave room for HOT updates.

Every stage transition updates an execution, a run and two stages and inserts two events. An
update that changes no indexed column, and finds room on its row's page, is HOT: it writes
no index at all; any other writes every index of the table. So:

- foreign keys that lead a unique constraint lose their own index, and the rest get a plain
  B-tree: Django gives a varchar key's index a ``varchar_pattern_ops`` twin (for LIKE
  'prefix%'), which no query here uses; the primary keys of executions and runs lose theirs;
- the outbox's key is unique by a constraint, not ``unique=True``, which would add the twin;
- the running runs' index no longer holds their lease's expiry, which every step, heartbeat
  and claim renews;
- executions, runs and stages are filled to 80% per page, so an update finds room on its
  row's page.
"""

import django.db.models.deletion
from django.db import migrations, models

_PRIMARY_KEYS = ("execution", "run")
_ROOMY = ("executions_execution", "executions_run", "executions_stage")


def _like_index(schema_editor, model):
    table = model._meta.db_table
    return schema_editor._create_index_name(table, ["id"], suffix="_like")


def primary_key_twins_drop(apps, schema_editor):
    for name in _PRIMARY_KEYS:
        model = apps.get_model("executions", name)
        schema_editor.execute(f"DROP INDEX IF EXISTS {_like_index(schema_editor, model)}")


def primary_key_twins_create(apps, schema_editor):
    for name in _PRIMARY_KEYS:
        model = apps.get_model("executions", name)
        schema_editor.execute(schema_editor._create_like_index_sql(model, model._meta.pk))


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0015_drift_watch"),
    ]

    operations = [
        migrations.AlterField(
            model_name="execution",
            name="current_run",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="executions.run",
            ),
        ),
        migrations.AlterField(
            model_name="execution",
            name="drift",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                help_text="The open drift the drift watch found (executions.drift); none: in place, or not watched.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="executions.drift",
            ),
        ),
        migrations.AlterField(
            model_name="execution",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="children",
                to="executions.execution",
            ),
        ),
        migrations.AlterField(
            model_name="execution",
            name="predecessor",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="successors",
                to="executions.execution",
            ),
        ),
        migrations.AlterField(
            model_name="outboxevent",
            name="execution",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="executions.execution",
            ),
        ),
        migrations.AlterField(
            model_name="outboxevent",
            name="key",
            field=models.CharField(help_text="Stable; a re-emit is a no-op.", max_length=200),
        ),
        migrations.AlterField(
            model_name="run",
            name="execution",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="runs",
                to="executions.execution",
            ),
        ),
        migrations.AlterField(
            model_name="stage",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="stages",
                to="executions.run",
            ),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="endpoint",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="executions.webhookendpoint",
            ),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["current_run"], name="execution_current_run"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["parent"], name="execution_parent"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["predecessor"], name="execution_predecessor"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["drift"], name="execution_drift"),
        ),
        migrations.AlterField(
            model_name="stepreceipt",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="receipts",
                to="executions.run",
            ),
        ),
        migrations.AddConstraint(
            model_name="outboxevent",
            constraint=models.UniqueConstraint(fields=("key",), name="uniq_event_key"),
        ),
        migrations.RemoveIndex(model_name="run", name="run_live_lease"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "running")), fields=["id"], name="run_running"
            ),
        ),
        migrations.RunPython(primary_key_twins_drop, primary_key_twins_create),
        *(
            migrations.RunSQL(
                f"ALTER TABLE {table} SET (fillfactor = 80)",
                f"ALTER TABLE {table} RESET (fillfactor)",
            )
            for table in _ROOMY
        ),
    ]
