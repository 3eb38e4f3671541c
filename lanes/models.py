"""Concurrency lanes (docs/architecture.md, "Lanes"): one root owner at a time per lane key, a
durable FIFO queue.

Every write is a compare-and-swap on (key, owner, state, version): see ``lanes.services``.

A lane exists from the first claim on its key. One that never guarded anything is removed
rather than left listed forever: when the reconciler frees a lane whose leaving owner changed
nothing (a readiness failure in its planning stage, or an end before any stage started), nobody
waits on it, and no owner ever held it past such a failure (``held_past_readiness``), the lane
row is deleted in the same transaction, by a compare-and-swap on (key, no owner, free,
version) — ``lanes.services.try_lane_remove``. A request for a fleet that does not exist
(``lambda:nope-fleet:production``) therefore leaves no lane behind; the next claim on that
key creates it again. A lane some owner held past planning, or that an operator recovered,
stays listed when free.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Collate


class LaneState(models.TextChoices):
    FREE = "free"
    HELD = "held"
    RECOVERY_REQUIRED = "recovery_required"


class Lane(models.Model):
    key = models.CharField(primary_key=True, max_length=200)
    state = models.CharField(max_length=24, choices=LaneState.choices, default=LaneState.FREE)
    owner = models.ForeignKey(
        "executions.Execution",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="owned_lanes",
    )
    owner_token = models.CharField(
        max_length=200, null=True, blank=True, help_text="What the owner does to the subject."
    )
    version = models.PositiveBigIntegerField(default=0)
    reason = models.TextField(blank=True, default="")
    held_past_readiness = models.BooleanField(
        default=False,
        db_default=False,  # lanes.services creates lanes in SQL of its own
        help_text="Some owner's tenure ended otherwise than by a readiness failure (or an "
        "operator recovered the lane): it guarded real work, and stays listed when free.",
    )
    updated_at = models.DateTimeField(auto_now=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(state=LaneState.FREE) & Q(owner__isnull=True))
                | (~Q(state=LaneState.FREE) & Q(owner__isnull=False)),
                name="lane_owner_matches_state",
            ),
        ]
        indexes = [
            models.Index(
                fields=["updated_at"], condition=~Q(state=LaneState.FREE), name="lane_busy"
            ),
            # The reconciler's tick reads the held lanes a page at a time in code-point order
            # (whatever the database's collation): this index gives that order, so the page's
            # owners are looked up one by one from it, not sorted after joining every held
            # lane to its owner (a merge join that walked the executions' primary key
            # through the whole history before the first live owner).
            models.Index(
                Collate("key", "C"),
                condition=Q(state=LaneState.HELD),
                name="lane_held_in_code_point_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.state})"


class LaneWaiter(models.Model):
    """A queued execution. ``priority`` 0 puts rollback/continuation/finalization of work that
    already mutated infrastructure ahead of ordinary work (1); ties go by arrival (``id``)."""

    PRIORITY_URGENT = 0
    PRIORITY_NORMAL = 1

    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="waiters")
    execution = models.OneToOneField(
        "executions.Execution", on_delete=models.CASCADE, related_name="lane_wait"
    )
    token = models.CharField(max_length=200, null=True, blank=True)
    priority = models.PositiveSmallIntegerField(default=PRIORITY_NORMAL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["priority", "id"]
        indexes = [models.Index(fields=["lane", "priority", "id"])]

    def __str__(self) -> str:
        return f"{self.execution_id} waiting on {self.lane_id}"
