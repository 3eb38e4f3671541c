"""The stage path's tables keep only the indexes a query uses, and leave room for HOT updates.

Every stage transition updates an execution, a run and two stages and inserts two events. An
update that changes no indexed column, and finds room on its row's page, is HOT: it writes
no index at all; any other writes every index of the table. So:

- foreign keys that lead a unique constraint lose their own index, and the rest get a plain
  B-tree: Django gives a varchar key's index a ``varchar_pattern_ops`` twin (for LIKE
  'prefix%'), which no query here uses; the primary keys of executions and runs lose theirs;
- the outbox's key is unique by a constraint, not ``unique=True``, which would add the twin;
- nothing large is rebuilt: an index kept under a new name is renamed, a twin or a covered
  index is dropped (a brief lock, no scan); only the running runs' partial index is built;
- the running runs' index no longer holds their lease's expiry, which every step, heartbeat
  and claim renews;
- executions, runs and stages are filled to 80% per page, so an update finds room on its
  row's page.
"""

import django.db.models.deletion
from django.db import migrations, models

# Foreign keys whose index is kept, under a plain name: (model, field, new name).
_RENAMED = (
    ("execution", "current_run", "execution_current_run"),
    ("execution", "parent", "execution_parent"),
    ("execution", "predecessor", "execution_predecessor"),
    ("execution", "drift", "execution_drift"),
)
# Foreign keys whose index goes: a unique constraint they lead serves their lookups.
_COVERED = (
    ("run", "execution"),
    ("stage", "run"),
    ("stepreceipt", "run"),
    ("outboxevent", "execution"),
    ("webhookdelivery", "endpoint"),
)
_PRIMARY_KEYS = ("execution", "run")
_ROOMY = ("executions_execution", "executions_run", "executions_stage")


def _index(schema_editor, model, field_name, suffix=""):
    column = model._meta.get_field(field_name).column
    return schema_editor._create_index_name(model._meta.db_table, [column], suffix=suffix)


def _key_constraint(schema_editor, table):
    """The name of the outbox key's unique constraint as ``unique=True`` made it."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.conname FROM pg_constraint c
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
            WHERE c.conrelid = %s::regclass AND c.contype = 'u' AND a.attname = 'key'
              AND array_length(c.conkey, 1) = 1
            """,
            [table],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def indexes_reshape(apps, schema_editor):
    quote = schema_editor.quote_name
    for name, field, new in _RENAMED:
        model = apps.get_model("executions", name)
        old = _index(schema_editor, model, field)
        schema_editor.execute(f"ALTER INDEX IF EXISTS {quote(old)} RENAME TO {quote(new)}")
        schema_editor.execute(
            f"DROP INDEX IF EXISTS {quote(_index(schema_editor, model, field, '_like'))}"
        )
    for name, field in _COVERED:
        model = apps.get_model("executions", name)
        for suffix in ("", "_like"):
            schema_editor.execute(
                f"DROP INDEX IF EXISTS {quote(_index(schema_editor, model, field, suffix))}"
            )
    outbox = apps.get_model("executions", "outboxevent")
    table = outbox._meta.db_table
    constraint = _key_constraint(schema_editor, table)
    if constraint is not None and constraint != "uniq_event_key":
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} RENAME CONSTRAINT {quote(constraint)} TO uniq_event_key"
        )
    schema_editor.execute(
        f"DROP INDEX IF EXISTS {quote(_index(schema_editor, outbox, 'key', '_like'))}"
    )
    for name in _PRIMARY_KEYS:
        model = apps.get_model("executions", name)
        schema_editor.execute(
            f"DROP INDEX IF EXISTS {quote(_index(schema_editor, model, 'id', '_like'))}"
        )


def _create(schema_editor, model, field_name, suffix=""):
    """0015's index of the field (``_like``: its varchar_pattern_ops twin)."""
    quote = schema_editor.quote_name
    column = quote(model._meta.get_field(field_name).column)
    name = quote(_index(schema_editor, model, field_name, suffix))
    table = quote(model._meta.db_table)
    pattern = " varchar_pattern_ops" if suffix else ""
    schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column}{pattern})")


def indexes_restore(apps, schema_editor):
    """Back to 0015's indexes."""
    quote = schema_editor.quote_name
    for name, field, new in _RENAMED:
        model = apps.get_model("executions", name)
        old = quote(_index(schema_editor, model, field))
        schema_editor.execute(f"ALTER INDEX IF EXISTS {quote(new)} RENAME TO {old}")
        _create(schema_editor, model, field, "_like")
    for name, field in _COVERED:
        model = apps.get_model("executions", name)
        _create(schema_editor, model, field)
        _create(schema_editor, model, field, "_like")
    outbox = apps.get_model("executions", "outboxevent")
    table = outbox._meta.db_table
    old = quote(table + "_key_key")
    schema_editor.execute(f"ALTER TABLE {quote(table)} RENAME CONSTRAINT uniq_event_key TO {old}")
    _create(schema_editor, outbox, "key", "_like")
    for name in _PRIMARY_KEYS:
        _create(schema_editor, apps.get_model("executions", name), "id", "_like")


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0015_drift_watch"),
    ]

    operations = [
        # The fields and indexes as the models now say, in the state only: in the database
        # the indexes are renamed and dropped by indexes_reshape, nothing rebuilt.
        migrations.SeparateDatabaseAndState(
            state_operations=[
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
                        help_text="The open drift the drift watch found (executions.drift); "
                        "none: in place, or not watched.",
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
                    field=models.CharField(
                        help_text="Stable; a re-emit is a no-op.", max_length=200
                    ),
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
            ],
            database_operations=[migrations.RunPython(indexes_reshape, indexes_restore)],
        ),
        migrations.RemoveIndex(model_name="run", name="run_live_lease"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "running")), fields=["id"], name="run_running"
            ),
        ),
        *(
            migrations.RunSQL(
                f"ALTER TABLE {table} SET (fillfactor = 80)",
                f"ALTER TABLE {table} RESET (fillfactor)",
            )
            for table in _ROOMY
        ),
    ]
