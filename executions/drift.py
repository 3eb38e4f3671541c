"""The drift watch (docs/contract.md, "The drift watch"): whether what a succeeded execution did
is still what is there.

A workflow declares its check beside its verify stage (``drift`` in its ``stages.py``, read
through the catalogue: ``Workflow.watched`` and ``Workflow.drift_check``); the watch knows no
workflow and no provider. Beat runs :func:`drift_watch_tick` every
``ALFRED_DRIFT_TICK_SECONDS``:

1. **Enrol** (:func:`watch_enrol`): each succeeded execution of a watched workflow, not a dry
   run, gets a :class:`DriftWatch` row, due at a random point of the first period
   (``ALFRED_DRIFT_PERIOD_SECONDS``), so the checks of many executions spread over it instead of
   coming at once. It finds new ones from the newest execution already enrolled, less a margin
   for a transaction that committed late (an index lookup, not a scan of every execution); two
   beats enrolling at once insert each row once (``ON CONFLICT``).
2. **Claim** (:func:`watch_claim`): one statement takes the row most overdue (``SKIP LOCKED``),
   moves its ``due_at`` a lease ahead and raises its ``fence``, and commits. A second beat's
   tick, or a worker started after a crash, skips it until the lease is over: nothing is
   checked twice; a check cut short by a crash is made again after the lease.
3. **Check**, outside any transaction: first whether the execution is still in force (still
   succeeded; not superseded by a later execution of the same operation, nor, for a workflow
   whose later executions replace earlier ones, by another token on its lane); then the
   workflow's check, reads only. A lane is never held or read.
4. **Record** (:func:`_record`), under the execution's row lock (the engine's lock order:
   execution first, then its watch row), only while the claim's fence is still the row's:
   the outcome, the next due time (a period on; sooner after an unreadable check), and the
   drift — opened as a :class:`Drift` with an ``execution.drifted`` event, its findings kept
   up to date while it lasts, ended ``resolved`` when it is back in place (``execution.
   drift_ended``). Findings an operator accepted (:func:`drift_accept`) are not drift again
   until they change.

An operator ends an open drift two ways, the controls ``accept_drift`` and ``redo``
(``executions.controls``): accept what is there, or start the operation again — a new
execution through acceptance, as a request would (``executions.acceptance``: a drifted
execution no longer stands in for its operation), which plans from what is there and asks
for approval where its plan replaces something. Once the new one succeeds, the watch moves to
it and the old drift ends ``superseded``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet

from alfred.metrics import DRIFT_CHECKS
from alfred.principals import Caller
from alfred.readonly import writes_allowed
from executions.audit import audit_record
from executions.catalog import Finding, workflow_find, workflows_all
from executions.events import EventType
from executions.models import (
    ACTIVE_STATUSES,
    Drift,
    DriftStatus,
    DriftWatch,
    Execution,
    ExecutionStatus,
    Stage,
    StageStatus,
)
from executions.outbox import event_emit, event_key
from executions.runtime.clock import db_now

log = logging.getLogger(__name__)

# A claimed check not recorded within this long (its process died) is claimed again.
LEASE = timedelta(minutes=10)
# A check that could not read is tried again this much sooner than a period on.
UNREADABLE_RETRY = timedelta(minutes=15)
# New executions are looked for from the newest enrolled one less this: an execution whose
# terminal transaction committed this long after its finished_at was stamped is still found.
ENROL_MARGIN = timedelta(minutes=5)
ENROL_BATCH = 2000


class Outcome:
    IN_PLACE = "in_place"
    DRIFTED = "drifted"
    ACCEPTED = "accepted"
    UNREADABLE = "unreadable"
    RETIRED = "retired"
    POSTPONED = "postponed"  # running again (a continuation): looked at once it is done


def period() -> timedelta:
    return timedelta(seconds=settings.ALFRED_DRIFT_PERIOD_SECONDS)


def digest(findings: list[dict[str, Any]]) -> str:
    """The findings' fingerprint: what is compared with what an operator accepted."""
    text = json.dumps(sorted(findings, key=lambda f: f["what"]), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# -- enrol ------------------------------------------------------------------------------------


def watched_workflows() -> list[str]:
    return [workflow.name for workflow in workflows_all() if workflow.watched]


def watch_enrol(*, limit: int = ENROL_BATCH, everything: bool = False) -> int:
    """Watch the succeeded executions not watched yet (at most ``limit``, oldest first); one
    that succeeded again after its watch was retired (a retry after a failed rollback) is
    watched again. Returns how many were enrolled. ``everything``: however long ago they
    succeeded (``alfred_drift enrol``: after a workflow gained its check), not only since the
    newest enrolled; a scan of every succeeded execution, for an operator to ask for."""
    names = watched_workflows()
    if not names:
        return 0
    watches, executions = DriftWatch._meta.db_table, Execution._meta.db_table
    sql = f"""
        INSERT INTO {watches} AS w (execution_id, finished_at, due_at, fence, checks, outcome,
                                    error, accepted_digest, retired_reason)
        SELECT e.id, e.finished_at,
               clock_timestamp() + random() * %s, 0, 0, '', '', '', ''
          FROM {executions} e
         WHERE e.status = 'succeeded' AND NOT e.dry_run AND e.workflow = ANY(%s)
           -- one value, computed first: the partial index on finished_at serves the range
           AND (%s OR e.finished_at >= (
               SELECT coalesce(max(finished_at) - %s, '-infinity') FROM {watches}))
           -- not those watched already: a burst that finished within the margin must not
           -- fill every batch with rows that need nothing
           AND NOT EXISTS (
               SELECT 1 FROM {watches} x
                WHERE x.execution_id = e.id
                  AND (x.retired_at IS NULL OR x.finished_at >= e.finished_at))
         ORDER BY e.finished_at
         LIMIT %s
        ON CONFLICT (execution_id) DO UPDATE
           SET retired_at = NULL, retired_reason = '', finished_at = EXCLUDED.finished_at,
               due_at = clock_timestamp(), accepted_digest = '', outcome = '', error = ''
         WHERE w.retired_at IS NOT NULL AND w.finished_at < EXCLUDED.finished_at
        RETURNING execution_id
    """  # noqa: S608
    params: list[Any] = [period(), names, everything, ENROL_MARGIN, limit]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        enrolled = [row[0] for row in cursor.fetchall()]
        if enrolled:
            # What a new one supersedes is looked at now, not a period from now: the
            # operation ran again, and the earlier execution's open drift ends with it.
            DriftWatch.objects.filter(
                execution__successors__id__in=enrolled, retired_at__isnull=True
            ).update(due_at=db_now())
    return len(enrolled)


# -- claim, check, record ---------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    execution_id: str
    fence: int


def watch_claim(execution_id: str | None = None) -> Claim | None:
    """The most overdue watch (or ``execution_id``'s, due or not), taken for one check: its
    ``due_at`` moved a lease ahead and its fence raised, committed at once."""
    table = DriftWatch._meta.db_table
    which = (
        "execution_id = %s"
        if execution_id
        # the time as one value, so that the index on due_at serves the range
        else "due_at <= (SELECT clock_timestamp()) ORDER BY due_at LIMIT 1"
    )
    sql = f"""
        UPDATE {table} w SET due_at = clock_timestamp() + %s, fence = w.fence + 1
         WHERE w.execution_id = (
               SELECT execution_id FROM {table}
                WHERE retired_at IS NULL AND {which}
                  FOR UPDATE SKIP LOCKED)
        RETURNING w.execution_id, w.fence
    """  # noqa: S608
    params: list[Any] = [LEASE] + ([execution_id] if execution_id else [])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return Claim(row[0], row[1]) if row else None


@dataclass
class Checked:
    """What one check found: the outcome, the findings, why it could not read, what retired it."""

    outcome: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    retired: str = ""
    replaced_by: str | None = None


def watch_check(claim: Claim) -> str:
    """Check the claimed execution and record what was found; returns the outcome."""
    execution = Execution.objects.get(pk=claim.execution_id)
    outcome = _record(claim, _checked(execution))
    if outcome:  # not when a later claim of the same watch records instead
        DRIFT_CHECKS.labels(execution.workflow, outcome).inc()
    return outcome or "superseded_claim"


def _checked(execution: Execution) -> Checked:
    standing = _standing(execution)
    if standing is not None:
        return standing
    workflow = workflow_find(execution.workflow)
    if workflow is None:  # _standing postponed it already; for the type checker
        return Checked(Outcome.POSTPONED)
    try:
        found = workflow.drift_check(
            execution.id, execution.input, recorded_outputs(execution), db_now()
        )
    except KeyError as missing:
        # What the check reads was never recorded (a stage skipped, or recorded by a version
        # whose outputs had another shape): no check can say anything of it, now or later.
        return Checked(Outcome.RETIRED, retired=f"not checkable: its stages recorded no {missing}")
    except Exception as exc:  # any failure to read is "unreadable", said as such
        log.warning("drift check of %s could not read: %s", execution.id, exc)
        return Checked(Outcome.UNREADABLE, error=f"{type(exc).__name__}: {exc}"[:2000])
    findings = [_finding(f) for f in found]
    return Checked(Outcome.DRIFTED if findings else Outcome.IN_PLACE, findings)


def _standing(execution: Execution) -> Checked | None:
    """Whether ``execution`` is still in force, as read now: None when it is (its check may
    run, or its outcome be recorded); else why not. Asked before the reads and again under the
    execution's lock before recording, so that a rollback, a later execution or a run started
    meanwhile is never taken for drift."""
    if execution.status in (
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELED,
        ExecutionStatus.ROLLED_BACK,
    ):
        return Checked(Outcome.RETIRED, retired=f"{execution.status} since it succeeded")
    if execution.status != ExecutionStatus.SUCCEEDED:
        return Checked(Outcome.POSTPONED)  # running again (a rollback, a continuation)
    workflow = workflow_find(execution.workflow)
    if workflow is None or not workflow.watched:
        # this process may not have it (a deploy under way): looked at again later
        return Checked(Outcome.POSTPONED, error="its workflow declares no drift check here")
    later = _superseded_by(execution, workflow.replaced_by_another_token)
    if later is not None:
        return Checked(Outcome.RETIRED, retired=f"superseded by {later}", replaced_by=later)
    if _redone_now(execution, workflow.replaced_by_another_token):
        return Checked(Outcome.POSTPONED)  # its operation runs again: its result will tell
    return None


def recorded_outputs(execution: Execution) -> dict[str, Any]:
    """Each stage's latest succeeded output over all the execution's runs, as recorded: a check
    reads what was done, whichever version of the workflow did it."""
    rows = (
        Stage.objects.filter(run__execution=execution, status=StageStatus.SUCCEEDED)
        .order_by("run__number")
        .values_list("name", "output")
    )
    return dict(rows)


def _finding(found: Finding) -> dict[str, Any]:
    # What the stage code's types allow through JSON as it will be stored and sent.
    shown: dict[str, Any] = json.loads(json.dumps(found.as_dict(), default=str))
    return shown


def _later(execution: Execution, on_lane: bool) -> QuerySet[Execution]:
    """The executions after ``execution`` that redo its operation: of the same logical
    identity (a repeat, a redo, however many in between were rolled back), started again from
    it (a redo whose workflow repairs with an input of its own), or, for a
    workflow whose later executions replace earlier ones, on its lane with another token."""
    same = Q(workflow=execution.workflow, logical_identity=execution.logical_identity) | Q(
        predecessor=execution
    )
    if on_lane and execution.lane_key is not None:
        same |= Q(workflow=execution.workflow, lane_key=execution.lane_key) & ~Q(
            lane_token=execution.lane_token
        )
    return Execution.objects.filter(same, created_at__gt=execution.created_at, dry_run=False)


def _superseded_by(execution: Execution, on_lane: bool) -> str | None:
    """A later succeeded execution that took over what ``execution`` did."""
    later = _later(execution, on_lane).filter(status=ExecutionStatus.SUCCEEDED)
    found: str | None = later.order_by("created_at").values_list("id", flat=True).first()
    return found


def _redone_now(execution: Execution, on_lane: bool) -> bool:
    """A later execution of its operation is under way: what is there may be its doing."""
    return _later(execution, on_lane).filter(status__in=sorted(ACTIVE_STATUSES)).exists()


def _record(claim: Claim, checked: Checked) -> str:
    """Record what a check found, under the execution's lock, as it stands now; the outcome
    recorded ("" when a later claim of the watch took it over)."""
    with transaction.atomic(durable=True):
        execution = Execution.objects.select_for_update().get(pk=claim.execution_id)
        watch = DriftWatch.objects.select_for_update().get(pk=claim.execution_id)
        if watch.fence != claim.fence:
            return ""  # claimed again after the lease: the later claim records
        if checked.outcome in (Outcome.DRIFTED, Outcome.IN_PLACE, Outcome.UNREADABLE):
            checked = _standing(execution) or checked  # what changed while it read
        now = db_now()
        watch.checked_at, watch.checks = now, watch.checks + 1
        watch.outcome, watch.error = checked.outcome, checked.error
        watch.due_at = now + period()
        open_drift = (
            Drift.objects.filter(pk=execution.drift_id).first() if execution.drift_id else None
        )
        if checked.outcome == Outcome.POSTPONED:
            watch.due_at = now + UNREADABLE_RETRY
        elif checked.outcome == Outcome.UNREADABLE:
            watch.due_at = now + min(UNREADABLE_RETRY, period())
        elif checked.outcome == Outcome.RETIRED:
            watch.retired_at, watch.retired_reason = now, checked.retired
            if open_drift is not None:
                _end(
                    execution,
                    open_drift,
                    DriftStatus.SUPERSEDED,
                    now,
                    by="drift-watch",
                    reason=checked.retired,
                    replaced_by=checked.replaced_by,
                )
        elif checked.outcome == Outcome.IN_PLACE:
            watch.accepted_digest = ""
            if open_drift is not None:
                _end(
                    execution,
                    open_drift,
                    DriftStatus.RESOLVED,
                    now,
                    by="drift-watch",
                    reason="back as the execution left it",
                )
        else:
            _drifted(execution, watch, open_drift, checked.findings, now)
            watch.outcome = Outcome.ACCEPTED if execution.drift_id is None else Outcome.DRIFTED
        watch.save()
        return watch.outcome


def _drifted(
    execution: Execution,
    watch: DriftWatch,
    open_drift: Drift | None,
    findings: list[dict[str, Any]],
    now: datetime,
) -> None:
    """Open a drift, or keep the open one up to date; nothing when an operator accepted
    exactly this."""
    seen = digest(findings)
    if open_drift is None and seen == watch.accepted_digest:
        return
    if open_drift is None:
        open_drift = Drift.objects.create(
            execution=execution,
            findings=findings,
            digest=seen,
            first_seen_at=now,
            last_seen_at=now,
        )
        execution.drift = open_drift
        execution.save(update_fields=["drift", "updated_at"])
    elif open_drift.digest != seen:
        open_drift.findings, open_drift.digest, open_drift.last_seen_at = findings, seen, now
        open_drift.save(update_fields=["findings", "digest", "last_seen_at"])
    else:
        open_drift.last_seen_at = now
        open_drift.save(update_fields=["last_seen_at"])
        return
    # Once per drift and what it found: seeing the same again says nothing new.
    event_emit(
        execution_id=execution.id,
        type=EventType.DRIFTED,
        key=event_key(execution.id, f"{open_drift.id}:drifted:{seen[:16]}"),
        payload={
            "drift": open_drift.id,
            "findings": findings,
            "first_seen_at": open_drift.first_seen_at.isoformat(),
            "seen_at": now.isoformat(),
        },
    )


def _end(
    execution: Execution,
    drift: Drift,
    status: DriftStatus,
    now: datetime,
    *,
    by: str,
    reason: str,
    replaced_by: str | None = None,
) -> None:
    drift.status, drift.ended_at, drift.ended_by, drift.reason = status, now, by, reason
    drift.replaced_by_id = replaced_by
    drift.save(update_fields=["status", "ended_at", "ended_by", "reason", "replaced_by"])
    execution.drift = None
    execution.save(update_fields=["drift", "updated_at"])
    event_emit(
        execution_id=execution.id,
        type=EventType.DRIFT_ENDED,
        key=event_key(execution.id, f"{drift.id}:ended"),
        payload={
            "drift": drift.id,
            "status": str(status),
            "by": by,
            "reason": reason,
            "replaced_by": replaced_by,
        },
    )


# -- the tick ---------------------------------------------------------------------------------


@dataclass
class Tick:
    enrolled: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    more: bool = False  # checks were still due when the budget ran out

    @property
    def checked(self) -> int:
        return sum(self.outcomes.values())


def drift_watch_tick(*, budget: float = 5.0) -> Tick:
    """Enrol, then check what is due, one claim at a time, for up to ``budget`` seconds. A
    read-only instance records nothing (``ReadOnlyInstance``)."""
    writes_allowed()
    tick = Tick(enrolled=watch_enrol())
    deadline = time.monotonic() + budget
    while True:
        if time.monotonic() >= deadline:
            tick.more = True
            break
        claim = watch_claim()
        if claim is None:
            break
        outcome = watch_check(claim)
        tick.outcomes[outcome] = tick.outcomes.get(outcome, 0) + 1
    return tick


def drift_check_now(execution_id: str) -> str:
    """Check one watched execution now (an operator's ``alfred_drift check``), due or not.
    Raises ``DriftWatch.DoesNotExist`` when it is not watched (or retired)."""
    writes_allowed()
    watch_enrol()
    claim = watch_claim(execution_id)
    if claim is None:
        raise DriftWatch.DoesNotExist(execution_id)
    return watch_check(claim)


# -- an operator's word -----------------------------------------------------------------------


def drift_accept(execution: Execution, caller: Caller, reason: str) -> None:
    """Accept the open drift of ``execution`` (locked by the caller) as what should be there:
    the watch compares with these findings from now on, and a change from them is drift
    again. Audited (``execution.accept_drift``) and an ``execution.drift_ended`` event."""
    writes_allowed()
    drift = Drift.objects.select_for_update().get(pk=execution.drift_id)
    now = db_now()
    DriftWatch.objects.filter(pk=execution.id).update(
        accepted_digest=drift.digest, outcome=Outcome.ACCEPTED
    )
    audit_record(caller, "execution.accept_drift", execution.id, reason, drift=drift.id)
    _end(execution, drift, DriftStatus.ACCEPTED, now, by=caller.principal, reason=reason)


def drift_summary(findings: list[Mapping[str, Any]]) -> str:
    """The findings in a line, as the admin's list and the commands show them."""
    if not findings:
        return ""
    first = findings[0]["what"]
    return first if len(findings) == 1 else f"{first} and {len(findings) - 1} more"
