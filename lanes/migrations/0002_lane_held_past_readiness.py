"""Lane.held_past_readiness (see lanes.models). Lanes that exist already have a history the
new field did not see: every one is taken as having guarded work, but for a free lane that
nobody waits on whose one tenure (created, claimed, released: version 2) ended in a release
that proved its owner changed nothing — those are the lanes that would otherwise stay listed
forever (a fleet that does not exist), and they go, by the same compare-and-swap as
lanes.services.try_lane_remove."""

from django.db import migrations, models
from django.db.models import Q

# The reasons the lane reconciler (executions.lanes.reconciler) gave such a release (Decision.reason of lane_decide).
_CHANGED_NOTHING = Q(reason__contains=" was not ready: ") | Q(
    reason__contains=" before any stage started"
)


def _mark_and_prune(apps, schema_editor):
    Lane = apps.get_model("lanes", "Lane")
    LaneWaiter = apps.get_model("lanes", "LaneWaiter")
    unused = (
        Lane.objects.filter(state="free", owner__isnull=True, version=2)
        .filter(_CHANGED_NOTHING)
        .exclude(key__in=LaneWaiter.objects.values("lane_id"))
    )
    Lane.objects.exclude(key__in=unused.values("key")).update(held_past_readiness=True)
    for key, version in list(unused.values_list("key", "version")):
        Lane.objects.filter(
            key=key, owner__isnull=True, state="free", version=version, held_past_readiness=False
        ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("lanes", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="lane",
            name="held_past_readiness",
            field=models.BooleanField(
                default=False,
                db_default=False,
                help_text="Some owner's tenure ended otherwise than by a readiness failure (or "
                "an operator recovered the lane): it guarded real work, and stays listed when "
                "free.",
            ),
        ),
        migrations.RunPython(_mark_and_prune, migrations.RunPython.noop),
    ]
