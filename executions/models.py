"""The execution resource and everything that drives it (docs/architecture.md).

Models hold fields, choices and constraints; transitions live in services (acceptance,
controls, engine). The partial indexes cover active rows only, so the scanners cost what is
active, not what is remembered (docs/runbook.md, "Pruning old executions").
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from alfred.ids import Prefixed


class ExecutionStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    ROLLED_BACK = "rolled_back"


TERMINAL_STATUSES = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELED,
        ExecutionStatus.ROLLED_BACK,
    }
)
ACTIVE_STATUSES = frozenset(set(ExecutionStatus) - TERMINAL_STATUSES)
_ACTIVE = Q(status__in=sorted(ACTIVE_STATUSES))


class StartState(models.TextChoices):
    START_PENDING = "start_pending"
    STARTED = "started"
    START_FAILED = "start_failed"


class Execution(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("exe"), editable=False)
    workflow = models.CharField(max_length=64)
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.QUEUED
    )
    start_state = models.CharField(
        max_length=16, choices=StartState.choices, default=StartState.START_PENDING
    )
    start_error = models.JSONField(null=True, blank=True)
    input = models.JSONField(help_text="The canonical input (defaults filled in).")
    dry_run = models.BooleanField(default=False)
    logical_identity = models.CharField(max_length=64)
    principal = models.CharField(max_length=80, help_text="Who first asked for it.")
    lane_key = models.CharField(max_length=200, null=True, blank=True)
    lane_token = models.CharField(max_length=200, null=True, blank=True)
    # The foreign keys' indexes are plain B-trees in Meta: a key of its own would also get a
    # varchar_pattern_ops twin, which no query uses and every non-HOT update writes.
    current_run = models.ForeignKey(
        "Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        db_index=False,
    )
    predecessor = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="successors",
        db_index=False,
    )
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # The W3C trace context of the request that accepted it (or of its parent's step):
    # every stage it runs is a span of that trace (executions.runtime.tracing).
    trace_context = models.JSONField(null=True, blank=True)
    assistance = models.JSONField(default=list, blank=True)
    last_sequence = models.PositiveBigIntegerField(
        default=0, help_text="Last outbox sequence; allocated under this row's lock."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    drift = models.ForeignKey(
        "Drift",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        help_text="The open drift the drift watch found (executions.drift); none: in place, "
        "or not watched.",
    )
    pruned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When retention deleted its events, webhook deliveries, step receipts and "
        "timers (executions.retention): from then on it can no longer be rolled back.",
    )

    class Meta:
        ordering = ["-id"]
        permissions = [
            ("operate", "Can operate Alfred: cancel, retry, approve, roll back, recover lanes"),
        ]
        constraints = [
            # Concurrent requests for one operation under different keys serialize here:
            # at most one active execution per logical identity.
            models.UniqueConstraint(
                fields=["workflow", "logical_identity"],
                condition=_ACTIVE,
                name="uniq_active_execution_identity",
            ),
            models.CheckConstraint(
                condition=Q(status__in=ExecutionStatus.values), name="execution_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["current_run"], name="execution_current_run"),
            models.Index(fields=["parent"], name="execution_parent"),
            models.Index(fields=["predecessor"], name="execution_predecessor"),
            models.Index(fields=["drift"], name="execution_drift"),
            models.Index(fields=["workflow", "logical_identity", "-created_at"]),
            models.Index(fields=["workflow", "status", "-id"]),
            models.Index(fields=["status", "-id"]),
            models.Index(
                fields=["created_at"],
                condition=Q(start_state=StartState.START_PENDING),
                name="execution_start_pending",
            ),
            models.Index(
                fields=["lane_key", "id"], condition=_ACTIVE, name="execution_active_lane"
            ),
            # What the drift watch enrols (executions.drift): succeeded, not dry runs.
            models.Index(
                fields=["finished_at"],
                condition=Q(status="succeeded", dry_run=False),
                name="execution_succeeded",
            ),
            # What superseded a succeeded execution on its lane (executions.drift).
            models.Index(
                fields=["lane_key", "created_at"],
                condition=Q(status="succeeded", dry_run=False, lane_key__isnull=False),
                name="execution_succeeded_lane",
            ),
            # What retention has still to prune: ended roots, not pruned since they ended.
            models.Index(
                fields=["finished_at", "id"],
                condition=Q(parent__isnull=True, status__in=sorted(TERMINAL_STATUSES))
                & (Q(pruned_at__isnull=True) | Q(pruned_at__lt=F("finished_at"))),
                name="execution_prunable",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.workflow} {self.status}"

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class AcceptanceOutcome(models.TextChoices):
    CREATED = "created"  # a new execution (its predecessor set after a rollback)
    REUSED = "reused"  # an active (or finished) execution of the same operation
    CONTINUED = "continued"  # a continuation run on a failed/canceled execution


class DeliveryKey(models.Model):
    """An Idempotency-Key, scoped to the calling principal, kept as long as the execution."""

    principal = models.CharField(max_length=80)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="keys")
    outcome = models.CharField(max_length=16, choices=AcceptanceOutcome.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Concurrent duplicates of one key serialize on this constraint (docs/contract.md,
            # "Asking for an execution").
            models.UniqueConstraint(fields=["principal", "key"], name="uniq_delivery_key"),
        ]

    def __str__(self) -> str:
        return f"{self.principal} {self.key} → {self.execution_id}"


class RunKind(models.TextChoices):
    INITIAL = "initial"
    RETRY = "retry"
    CONTINUATION = "continuation"
    ROLLBACK = "rollback"


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class Run(models.Model):
    """One attempt at carrying an execution through its stages, under a fenced lease."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("run"), editable=False)
    # indexed by uniq_run_number, which it leads
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=RunKind.choices, default=RunKind.INITIAL)
    # The workflow's definition it started under: {"version", "stages"} (none for a rollback,
    # or a run older than this record). Only that definition runs it (executions.runtime.registry).
    definition = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    fence = models.PositiveBigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    wakeups = models.PositiveBigIntegerField(
        default=0, help_text="Bumped by every waker; a stage that sees it move does not sleep."
    )
    wakeups_seen = models.PositiveBigIntegerField(
        default=0, help_text="``wakeups`` at the last claim: more since means a wake is owed."
    )
    woken_at = models.DateTimeField(null=True, blank=True)
    recoveries = models.PositiveIntegerField(
        default=0, help_text="Re-dispatches by the recovery scan since the run was last claimed."
    )
    recovered_at = models.DateTimeField(
        null=True, blank=True, help_text="The recovery scan's last re-dispatch of this run."
    )
    paused_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when the run has been paused for an operator or held by a change "
        "freeze (the database's clock): the pause does not count against its deadline.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["execution", "number"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "number"], name="uniq_run_number"),
        ]
        indexes = [
            # The running runs (as many as run now), for the recovery scans: their lease is
            # read from the row, not the index, so that renewing it (every step, every
            # heartbeat, every stage's claim) changes no indexed column and is a HOT update.
            models.Index(
                fields=["id"],
                condition=Q(status=RunStatus.RUNNING),
                name="run_running",
            ),
            models.Index(
                fields=["woken_at"],
                condition=Q(status=RunStatus.WAITING, wakeups__gt=F("wakeups_seen")),
                name="run_owed_wake",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} #{self.number} {self.kind} {self.status}"


class StageStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Stage(models.Model):
    # indexed by uniq_stage_name, which it leads
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stages", db_index=False)
    name = models.CharField(max_length=64)
    position = models.PositiveSmallIntegerField()
    status = models.CharField(
        max_length=16, choices=StageStatus.choices, default=StageStatus.PENDING
    )
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="uniq_stage_name"),
            models.UniqueConstraint(fields=["run", "position"], name="uniq_stage_position"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class ReceiptStatus(models.TextChoices):
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"  # failed with a retryable error; a timer brings it back
    WAITING = "waiting"  # a durable wait (sleep, poll, hook, child) not yet over


class StepReceipt(models.Model):
    """The durable record of one completed step: replay returns ``output`` instead of running
    the step again. ``mutation`` says what changed, enough to undo it (rollback)."""

    # indexed by uniq_step_receipt, which it leads
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="receipts", db_index=False)
    stage = models.CharField(max_length=64)
    step_key = models.CharField(max_length=200)
    sequence = models.PositiveIntegerField(help_text="Order of the step within its stage.")
    kind = models.CharField(max_length=16, default="step")
    status = models.CharField(max_length=16, choices=ReceiptStatus.choices)
    output = models.JSONField(null=True, blank=True)
    mutation = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    fence = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "stage", "step_key"], name="uniq_step_receipt"),
        ]
        indexes = [
            models.Index(
                fields=["run", "sequence"],
                condition=Q(mutation__isnull=False),
                name="receipt_mutations",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.stage}/{self.step_key} ({self.status})"


class HookStatus(models.TextChoices):
    PENDING = "pending"
    SIGNALLED = "signalled"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    CANCELED = "canceled"


class HookQuerySet(models.QuerySet["Hook"]):
    def awaiting_operator(self) -> HookQuerySet:
        """The operator checkpoints not answered yet, newest first (an execution waits on
        the first: the one its ``pending_approval`` shows and an approval must name). The
        answer reads it in SQL (``executions.selectors``): a test holds the two together."""
        return self.filter(status=HookStatus.PENDING, operator=True).order_by("-created_at")


class Hook(models.Model):
    """A durable wait for an outside signal (an operator's approval, a callback)."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("hook"), editable=False)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="hooks")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="hooks")
    stage = models.CharField(max_length=64)
    name = models.CharField(max_length=64)
    token = models.CharField(max_length=128, unique=True)
    operator = models.BooleanField(default=False, help_text="Pauses the execution for a human.")
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=HookStatus.choices, default=HookStatus.PENDING)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Unanswered by then, the wait fails (none: no expiry)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = HookQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(
                fields=["execution"],
                condition=Q(status=HookStatus.PENDING),
                name="hook_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name} ({self.status})"


class HookSignal(models.Model):
    """The ledger of signals: a resent signal (same idempotency key) is a no-op."""

    hook = models.ForeignKey(Hook, on_delete=models.CASCADE, related_name="signals")
    idempotency_key = models.CharField(max_length=255)
    principal = models.CharField(max_length=80)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hook", "idempotency_key"], name="uniq_hook_signal"),
        ]

    def __str__(self) -> str:
        return f"{self.hook_id} {self.idempotency_key}"


class Approval(models.Model):
    """One operator's approval of the plan a checkpoint waits on (``executions.approvals``):
    the checkpoint is answered once its rule has all it asks; a new plan is a new hook, and
    its count starts again."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="approvals")
    hook = models.ForeignKey(Hook, on_delete=models.CASCADE, related_name="approvals")
    # The run the hook waited in: a hook reopened by a later run counts again from nothing.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    plan_hash = models.CharField(max_length=64)
    principal = models.CharField(max_length=80)
    actor_name = models.CharField(max_length=200, blank=True, default="")
    rule = models.CharField(max_length=100, help_text="The policy rule it was given under.")
    force = models.BooleanField(default=False)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Distinct operators: one approval per principal per plan, in each run it waits in.
            models.UniqueConstraint(fields=["hook", "run", "principal"], name="uniq_approval"),
        ]
        indexes = [models.Index(fields=["execution", "principal"])]

    def __str__(self) -> str:
        return f"{self.hook_id} approved by {self.principal}"


class TimerStatus(models.TextChoices):
    PENDING = "pending"
    FIRED = "fired"
    CANCELED = "canceled"


class TimerPurpose(models.TextChoices):
    SLEEP = "sleep"
    POLL = "poll"
    RETRY = "retry"
    DEADLINE = "deadline"
    EXPIRY = "expiry"
    HOLD = "hold"  # a mutation held by a change freeze, until it ends (or is lifted)


class Timer(models.Model):
    """A durable wake-up. The scanner over ``timer_due`` is the guarantee; a Celery countdown
    is only a hint for near timers."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="timers")
    stage = models.CharField(max_length=64)
    key = models.CharField(max_length=200)
    purpose = models.CharField(max_length=16, choices=TimerPurpose.choices)
    due_at = models.DateTimeField()
    topics = models.JSONField(
        default=list,
        blank=True,
        help_text="Opaque names of what the wait watches; news of one brings the poll forward.",
    )
    status = models.CharField(
        max_length=16, choices=TimerStatus.choices, default=TimerStatus.PENDING
    )
    created_at = models.DateTimeField(auto_now_add=True)
    fired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "stage", "key"], name="uniq_timer"),
        ]
        indexes = [
            models.Index(
                fields=["due_at"], condition=Q(status=TimerStatus.PENDING), name="timer_due"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.stage}/{self.key} due {self.due_at:%Y-%m-%d %H:%M:%S} ({self.status})"


class Freeze(models.Model):
    """A change freeze (``executions.freezes``): from ``starts_at`` until ``ends_at`` (none:
    until an operator ends it), an execution of a workflow and subject it covers waits before
    its first mutation."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("frz"), editable=False)
    reason = models.TextField(help_text="Why: shown to whoever is held by it.")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="None: until ended.")
    workflows = models.JSONField(default=list, help_text="Workflow names or globs ('*': all).")
    subjects = models.JSONField(default=list, help_text="Globs on the subject ('*': all).")
    created_by = models.CharField(max_length=80)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="Ended early by an operator.")
    ended_by = models.CharField(max_length=80, blank=True, default="")

    class Meta:
        ordering = ["-starts_at"]

    def __str__(self) -> str:
        return f"{self.id} ({self.reason[:40]})"


class FreezeExemption(models.Model):
    """An operator let one execution through a freeze (audited)."""

    freeze = models.ForeignKey(Freeze, on_delete=models.CASCADE, related_name="exemptions")
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="freeze_exemptions"
    )
    principal = models.CharField(max_length=80)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["freeze", "execution"], name="uniq_freeze_exemption")
        ]

    def __str__(self) -> str:
        return f"{self.execution_id} through {self.freeze_id}"


class DriftStatus(models.TextChoices):
    OPEN = "open"  # what the execution did is not what is there
    ACCEPTED = "accepted"  # an operator took what is there as it is
    RESOLVED = "resolved"  # back as the execution left it
    SUPERSEDED = "superseded"  # a later execution of the same operation succeeded


class Drift(models.Model):
    """What the drift watch (``executions.drift``) found of a succeeded execution that is not
    as it left it: each finding's what, expected and found, first and last seen. One row per
    episode: it stays open while the check keeps finding it, and ends resolved (back in place),
    accepted (an operator's word) or superseded (the operation ran again)."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("dft"), editable=False)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="drifts")
    status = models.CharField(
        max_length=16, choices=DriftStatus.choices, default=DriftStatus.OPEN, db_index=True
    )
    findings = models.JSONField(help_text="[{what, expected, found}], as last seen.")
    digest = models.CharField(
        max_length=64, help_text="sha256 of the findings (accepted: as accepted)."
    )
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=80, blank=True, default="")
    reason = models.TextField(blank=True, default="", help_text="An operator's, when accepted.")
    replaced_by = models.ForeignKey(
        Execution, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-first_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["execution"],
                condition=Q(status="open"),
                name="uniq_open_drift",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.execution_id} {self.status}"


class DriftWatch(models.Model):
    """A succeeded execution the drift watch checks: when next (``due_at``, spread over the
    period), how the last check went. A check claims its row by moving ``due_at`` a lease
    ahead and raising ``fence`` in one statement, so two beats or a restart never check it
    twice; only the claim's fence may record the outcome."""

    execution = models.OneToOneField(
        Execution, primary_key=True, on_delete=models.CASCADE, related_name="drift_watch"
    )
    finished_at = models.DateTimeField(
        db_index=True, help_text="When it succeeded (enrolment goes on from the newest)."
    )
    due_at = models.DateTimeField()
    fence = models.PositiveIntegerField(default=0)
    checks = models.PositiveIntegerField(default=0)
    checked_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="in_place, drifted, accepted or unreadable.",
    )
    error = models.TextField(blank=True, default="", help_text="Why the last check could not read.")
    accepted_digest = models.CharField(
        max_length=64, blank=True, default="", help_text="What an operator accepted: not drift."
    )
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_reason = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(
                fields=["due_at"], condition=Q(retired_at__isnull=True), name="drift_watch_due"
            )
        ]

    def __str__(self) -> str:
        return f"watch {self.execution_id}"


class OutboxEvent(models.Model):
    """Every transition's event, written in the transition's transaction."""

    # indexed by uniq_event_sequence, which it leads
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    sequence = models.PositiveBigIntegerField(help_text="Gapless per execution, from 1.")
    # unique by uniq_event_key (a constraint, not unique=True: no varchar_pattern_ops twin)
    key = models.CharField(max_length=200, help_text="Stable; a re-emit is a no-op.")
    type = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["execution", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "sequence"], name="uniq_event_sequence"),
            models.UniqueConstraint(fields=["key"], name="uniq_event_key"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id} #{self.sequence} {self.type}"


class WebhookEndpoint(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("whe"), editable=False)
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True, default="")
    secret = models.CharField(max_length=200, help_text="Standard Webhooks signing secret.")
    previous_secret = models.CharField(
        max_length=200, blank=True, default="", help_text="Signs beside the new one until it ends."
    )
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    event_types = models.JSONField(default=list, blank=True, help_text="Empty: every event.")
    active = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.url


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    """One event owed to one endpoint, written in the event's own transaction (so nothing
    emitted is ever missed). At least once: a claim holds it for one attempt; a relay that
    dies mid-attempt leaves a claim that runs out, and the scan sends it again."""

    # indexed by uniq_webhook_delivery, which it leads
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    event = models.ForeignKey(OutboxEvent, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    # Attempts since the last redelivery: the position in the retry schedule.
    round_attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "event"], name="uniq_webhook_delivery"),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status=DeliveryStatus.PENDING),
                name="webhook_delivery_due",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint_id} {self.event_id} ({self.status})"


class WebhookAttempt(models.Model):
    """Every attempt, as the relay saw it."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="log")
    number = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField()
    response_excerpt = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number} {self.status_code or self.error[:40]}"


class InboundNotification(models.Model):
    """A verified notification from a receiver (``delivery.receivers``), kept so a resent
    one is a no-op."""

    source = models.CharField(max_length=16)
    delivery_id = models.CharField(max_length=200)
    topics = models.JSONField(default=list)
    woken = models.PositiveIntegerField(default=0, help_text="Polls brought forward.")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "delivery_id"], name="uniq_inbound"),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.delivery_id}"


class AuditEntry(models.Model):
    """Who did what to which object, and why: every operator action writes one."""

    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=200)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["target_type", "target_id", "-created_at"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"
