"""Run the stages of one run under a fenced lease (docs/architecture.md, "Life of an execution").

``stage_execute`` is what a ``run_stage`` task calls. For each stage, in order:

1. claim — a new run's first claim (a first run, a retry's, a rollback's) one statement
   (``executions.runtime.handoff``) where nothing stands in its way; any other, or that one
   when the statement wrote nothing, one transaction, the run and execution rows locked:
   refuse a superseded or
   finished run, a run held under another worker's live lease (a duplicate delivery:
   reported, nothing executed), a run its lane does not admit (the claim guards: a root must
   own its lane, a child's root must); honour a cancel request and the deadline; else
   ``fence += 1``, lease, stage and execution ``running`` (the first claim binds the run:
   ``start_state = started``, and starts its deadline: time spent queued behind a lane does
   not count against it). A message naming a stage already done stands for the run's first
   unfinished stage, unless that one waits (a timer's or a hook's to wake).
2. the stage's code, outside any transaction, through its ``Context``;
3. the outcome, fenced: succeeded (after the last stage, the terminal transition), suspended
   (``waiting``/``paused``; the worker is free), or failed.

After a stage succeeds, the same worker hands the run to itself: the statement that writes
the stage's end claims the next stage for it (``executions.runtime.handoff``: one statement,
its own transaction, where nothing changed since the claim; else one transaction that
decides as a claim does; no message between them); after the last stage, one statement
likewise ends the execution (else the terminal transition's transaction). The message that
started the run stays unacknowledged until the last stage it ran ends, so a worker that
dies anywhere in them has it delivered again, and the delivery finds the run at the stage
the worker died in (taken over at once when its holder is known to be gone,
``executions.runtime.holders``, else once its lease runs out). A whole worker killed takes
its message with it until the broker's visibility timeout: the recovery scan finds its runs
instead. A caller that delivers each stage itself (``onward=False``) leaves the run between
stages, leased to no one for a short grace: if no one claims the next stage, the recovery
scan takes the run on.

Around each stage it sends ``executions.runtime.signals`` (the tests' kill points between and after
stages listen; tracing is the runner's own ``stage_span``).
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from alfred.db import columns, instances, row_fetched
from alfred.logs import log_context
from alfred.metrics import DUPLICATE_DELIVERIES, LEASE_TAKEOVERS, STAGES
from executions.events import EventType
from executions.links import approval_links
from executions.models import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    Run,
    RunKind,
    RunStatus,
    Stage,
    StageStatus,
    StartState,
    Timer,
    TimerStatus,
)
from executions.outbox import Event, event_key, events_emit
from executions.runtime.clock import Clock
from executions.runtime.context import Context
from executions.runtime.dispatch import run_dispatch, run_wake_at
from executions.runtime.errors import (
    Canceled,
    EngineError,
    FatalError,
    LeaseLost,
    ReadinessFailure,
    Suspend,
    unclassified,
)
from executions.runtime.handoff import stage_claim_first, stage_finish, stage_hand_over
from executions.runtime.holders import holder_gone
from executions.runtime.projections import start_state_event
from executions.runtime.registry import (
    Definition,
    claim_refusal,
    definition_get,
    definition_of_run,
    stage_time_limit,
)
from executions.runtime.rollback import STAGES as ROLLBACK_STAGES
from executions.runtime.rollback import rollback_stage
from executions.runtime.signals import stage_claiming, stage_completed
from executions.runtime.terminal import execution_finish, execution_finished, terminal_event
from executions.runtime.tracing import stage_span
from executions.runtime.writes import Change, fields_of, transition_write

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    NEXT = "next"  # the stage is done: the next one is owed
    STOP = "stop"  # suspended, finished, superseded or refused: nothing more to run now


@dataclass(frozen=True)
class _Onward:
    """A message named a stage already done: it stands for ``stage``, the run's next."""

    stage: str


@dataclass(frozen=True)
class _Claim:
    run: Run
    stage: str
    stage_id: int
    fence: int
    wakeups: int
    input: dict[str, Any]
    workflow: str
    clock: Clock
    trace_context: dict[str, str]  # the execution's trace (executions.runtime.tracing)
    # A child's end wakes its parent: never finished in one statement (``handoff``).
    child: bool = False
    # Whether its next stage is claimed in one statement (``handoff``): not once that
    # statement wrote nothing and the claim under locks was made all the same (a guard that
    # can decide only in Python, say a child under its root's lane): the run goes on the
    # slow way, without a statement that would write nothing at every stage.
    at_once: bool = True


def stage_execute(run_id: str, stage: str, worker: str, *, onward: bool = True) -> Outcome:
    """Run ``stage`` of the run and, ``onward`` (a worker's task), the stages after it in this
    process, until the run ends, suspends, or is no longer this worker's: returns STOP.
    Without ``onward`` it runs the one stage and returns NEXT when the next one is owed (a
    caller that delivers each stage itself)."""
    claimed = _claim_patiently(run_id, stage, worker)
    while isinstance(claimed, _Claim):
        claimed = _stage_run(claimed, worker, onward=onward)
    return claimed


def _claim_named(run_id: str, stage: str, worker: str) -> _Claim | Outcome:
    """The claim of the stage a message names (or of the one it stands for)."""
    stage_claiming.send(Run, run_id=run_id, stage=stage)
    claimed = _claim(run_id, stage, worker)
    if isinstance(claimed, _Onward):
        return _claim_named(run_id, claimed.stage, worker)  # the message stands for that one
    return claimed


def _stage_run(claimed: _Claim, worker: str, *, onward: bool) -> _Claim | Outcome:
    """One claimed stage: its code run, and its outcome written. When it succeeded and
    another stage follows, ``onward``, the transaction that ends it claims the next one for
    this worker (the hand-off is one transaction, not two): returns that claim. Every line
    logged meanwhile names the execution, the run and the stage."""
    run = claimed.run
    with (
        log_context(execution=run.execution_id, run=run.id, stage=claimed.stage),
        stage_span(
            claimed.trace_context,
            workflow=claimed.workflow,
            execution_id=run.execution_id,
            run_id=run.id,
            stage=claimed.stage,
        ),
    ):
        return _stage_run_logged(claimed, worker, onward=onward)


def _stage_run_logged(claimed: _Claim, worker: str, *, onward: bool) -> _Claim | Outcome:
    run_id, stage = claimed.run.id, claimed.stage
    rollback = claimed.run.kind == RunKind.ROLLBACK
    started = time.monotonic()

    def took(outcome: str) -> None:
        STAGES.labels(claimed.workflow, stage, outcome).observe(time.monotonic() - started)

    try:
        definition = _definition_of(claimed.workflow, claimed.run)
        ctx = Context(
            run=claimed.run,
            stage=stage,
            fence=claimed.fence,
            input=definition.load_input(claimed.input),
            dry_run=bool(claimed.input.get("dry_run", False)),
            wake=_hint(run_id),
            clock=claimed.clock,
            workflow=claimed.workflow,
        )
        with ctx.heartbeat():
            if rollback:
                output = rollback_stage(ctx, claimed.run.number)
            else:
                output = definition.run_stage(stage, ctx)
    except Suspend as suspend:
        took("suspended")
        return _suspend(claimed, stage, suspend)
    except LeaseLost as lost:
        took("lost")
        log.warning("run %s stage %s: %s", run_id, stage, lost)
        return Outcome.STOP
    except _DATABASE_AWAY as lost:
        # The database went away under the stage (a restart, a failover): not the
        # workflow's failure, and nothing can be written now.
        took("lost")
        return _claim_patiently(run_id, stage, worker, away=lost)
    except SoftTimeLimitExceeded:
        took("failed")
        limit = stage_time_limit(claimed.workflow, stage)
        failure = FatalError(
            f"stage {stage} ran past its time limit of {limit or 0:g} s",
            code="stage_time_limit",
        )
        return _finish(claimed, stage, ExecutionStatus.FAILED, error=failure.projection())
    except Canceled as canceled:
        took("canceled")
        return _finish(claimed, stage, ExecutionStatus.CANCELED, error=canceled.projection())
    except ReadinessFailure as failure:
        took("failed")
        return _finish(claimed, stage, ExecutionStatus.FAILED, error=failure.projection())
    except EngineError as failure:
        took("failed")
        return _finish(claimed, stage, ExecutionStatus.FAILED, error=failure.projection())
    except Exception as exc:
        took("failed")
        log.exception("run %s stage %s raised", run_id, stage)
        return _finish(claimed, stage, ExecutionStatus.FAILED, error=unclassified(exc))
    took("succeeded")
    stages = ROLLBACK_STAGES if rollback else definition.stages
    following = stages[stages.index(stage) + 1] if stage != stages[-1] else None
    # The next stage on another queue, or bounded by a time limit (or this one is): handed
    # over by a message of its own, not run on here.
    hop = following is not None and not rollback and not definition.runs_on_after(stage, following)
    try:
        ended = _complete(
            claimed,
            output,
            following=following,
            worker=worker if onward and not hop else None,
            publish=(following, claimed.workflow) if hop and following else None,
        )
    except _DATABASE_AWAY as lost:
        # Written or not (a commit whose answer was lost), the claim again finds out: a stage
        # still running is replayed from its receipts, one done stands for the next.
        return _claim_patiently(run_id, stage, worker, away=lost)
    if ended is None:
        return Outcome.STOP  # fenced out: the run is no longer ours
    stage_completed.send(Run, run_id=run_id, stage=stage)
    if isinstance(ended, _Onward):
        return _claim_named(run_id, ended.stage, worker)
    if isinstance(ended, _Claim):
        stage_claiming.send(Run, run_id=run_id, stage=ended.stage)
    return ended


# The database is away (restarting, failing over) or the connection is gone: the same work on
# a fresh connection, a moment later, may well succeed.
_DATABASE_AWAY = (OperationalError, InterfaceError)


def _claim_patiently(
    run_id: str, stage: str, worker: str, *, away: Exception | None = None
) -> _Claim | Outcome:
    """The claim of ``stage`` by name, made again while the database is ``away`` (found so
    by the caller, or by a try here): once it answers, this worker claims the stage anew. Its
    lease is its own, so nothing waits for it to run out, and the stage replays from its
    receipts (as after a takeover). Still away after half a lease: STOP; the lease runs out
    and the recovery scan hands the run on."""
    give_up = time.monotonic() + settings.ALFRED_LEASE_SECONDS / 2
    attempt = 0
    while True:
        if away is not None:
            if attempt == 0:
                log.warning("run %s stage %s: the database is away: %s", run_id, stage, away)
            elif time.monotonic() > give_up:
                log.warning("run %s stage %s: the database is still away: %s", run_id, stage, away)
                return Outcome.STOP
            attempt += 1
            with suppress(*_DATABASE_AWAY):  # the next statement connects anew
                connection.close()
            time.sleep(min(0.2 * attempt, 2.0))
        try:
            return _claim_named(run_id, stage, worker)
        except _DATABASE_AWAY as again:
            away = again


@cache
def _lock_sql(stages: bool) -> str:
    """The locked read, written once from the models: the execution and its run (``FOR
    UPDATE OF`` locks in the order it names), with the stages as one JSON array in order and
    the database's time (``clock_timestamp()``: the statement's moment, not the
    transaction's start) when ``stages``."""
    extra = (
        f""", clock_timestamp(), (
            SELECT jsonb_agg(jsonb_build_object(
                'id', s.id, 'name', s.name, 'position', s.position, 'status', s.status,
                'started', s.started_at IS NOT NULL) ORDER BY s.position)
            FROM {Stage._meta.db_table} s WHERE s.run_id = r.id)"""  # noqa: S608
        if stages
        else ""
    )
    return (
        f"SELECT {columns(Execution, 'e')}, {columns(Run, 'r')}{extra} "  # noqa: S608
        f"FROM {Execution._meta.db_table} e "
        f"JOIN {Run._meta.db_table} r ON r.execution_id = e.id "
        "WHERE r.id = %s FOR UPDATE OF e, r"
    )


def _lock(run_id: str, *, stages: bool = False) -> tuple[Execution, Run] | None:
    """Lock the execution, then its run, in one statement: the order every writer (controls,
    the terminal transition, the scans) keeps, so that two of them never wait on each other.
    With ``stages``, the run also carries ``stage_rows`` and ``db_now``: the database's time,
    read with the locks held, so a lease counts from when the claim holds them."""
    row = row_fetched(_lock_sql(stages), [run_id])
    if row is None:
        return None
    (execution, run), rest = instances(row, Execution, Run)
    if stages:
        run.db_now = rest[0]
        listed = rest[1]
        run.stage_rows = json.loads(listed) if isinstance(listed, str) else listed or []
    return execution, run


def _lock_current(claim: _Claim, *, stages: bool = False) -> tuple[Execution, Run] | None:
    """Lock for a write after the stage ran; None when the round is no longer ours: fenced
    out (a takeover, or the terminal transition, which bumps the fence), superseded by a
    newer run, or finished."""
    locked = _lock(claim.run.id, stages=stages)
    if locked is None:
        return None
    execution, run = locked
    if (
        run.fence != claim.fence
        or execution.current_run_id != run.id
        or execution.status in TERMINAL_STATUSES
    ):
        return None
    return execution, run


def _claim(run_id: str, stage_name: str, worker: str) -> _Claim | _Onward | Outcome:
    """The claim of ``stage_name`` of the run for ``worker``: a new run's first in one
    statement, any other (or that one, when the statement wrote nothing) under its locks."""
    return _claim_first(run_id, stage_name, worker) or _claim_locked(run_id, stage_name, worker)


def _claim_locked(run_id: str, stage_name: str, worker: str) -> _Claim | _Onward | Outcome:
    """The claim made the slow way: the execution and the run locked and read, every case
    decided in Python, its writes and events in one transaction."""
    with transaction.atomic(durable=True):
        locked = _lock(run_id, stages=True)
        if locked is None:
            return Outcome.STOP
        execution, run = locked
        if execution.current_run_id != run.id or execution.status in TERMINAL_STATUSES:
            return Outcome.STOP
        now: datetime = run.db_now  # type: ignore[attr-defined]
        stages: list[dict[str, Any]] = run.stage_rows or []  # type: ignore[attr-defined]
        stage = next((s for s in stages if s["name"] == stage_name), None)
        if stage is None:
            return _fail_locked(execution, FatalError(f"no stage {stage_name!r}", code="bad_stage"))
        if stage["status"] == StageStatus.SUCCEEDED:
            # A message for work already done (delivered again, or the hand-off's): the run
            # goes on at its first unfinished stage — pending (the hand-off was lost with its
            # worker) or running (its worker died in it: taken over as a message naming it
            # would be, once no live worker holds the lease) — unless that one waits: a
            # waiting stage is a timer's or a hook's to wake.
            stage = next(
                (
                    s
                    for s in stages
                    if s["position"] > stage["position"] and s["status"] != StageStatus.SUCCEEDED
                ),
                None,
            )
            if stage is None or stage["status"] not in (StageStatus.PENDING, StageStatus.RUNNING):
                return Outcome.STOP
            return _Onward(stage["name"])
        if any(
            s["status"] != StageStatus.SUCCEEDED
            for s in stages
            if s["position"] < stage["position"]
        ):
            return Outcome.STOP  # out of order: the chain of the earlier stage will get here
        if stage["status"] == StageStatus.WAITING and not _wake_owed(run, stage_name, now):
            # A stale message (delivered again, a recovery's or a hint's that lost the race):
            # a waiting stage is its wake's to claim. Claiming it anyway would replay it only
            # to wait again, and flip a paused execution to running meanwhile, refusing an
            # operator's approval in that window.
            return Outcome.STOP
        if _leased_by_other(run, worker, now):
            _report_duplicate(execution, run, stage_name, worker)
            return Outcome.STOP
        return _take(execution, run, stage, worker)


def _claim_first(run_id: str, stage_name: str, worker: str) -> _Claim | None:
    """The first claim of a new run, in one statement (``handoff.stage_claim_first``), with
    what ``_claim_write`` would emit for it (the fence it takes is 1); None when it wrote
    nothing: the claim the slow way decides (every case but the plain first one)."""
    started = stage_claim_first(
        run_id=run_id,
        stage=stage_name,
        worker=worker,
        events=first_claim_events(run_id, stage_name, worker),
    )
    if started is None:
        return None
    run = started.run
    return _Claim(
        run,
        stage_name,
        started.stage_id,
        run.fence,
        run.wakeups,
        started.input,
        started.workflow,
        Clock(started.now),
        started.trace_context,
        started.child,
    )


def first_claim_events(run_id: str, stage_name: str, worker: str) -> list[Event]:
    """The events of a new run's first claim, as ``_claim_write`` emits them (the fence it
    takes is 1), named under the execution (``outbox.event_key``)."""
    return [
        start_state_event(None, StartState.STARTED, run_id=run_id, worker=worker, fence=1),
        _status_event_of(None, ExecutionStatus.RUNNING, run_id, 1, stage_name),
        _stage_event_of(None, run_id, 1, EventType.STAGE_STARTED, stage_name, worker=worker),
    ]


def _take(
    execution: Execution,
    run: Run,
    stage: dict[str, Any],
    worker: str,
    *,
    ended: tuple[Change, list[Event]] | None = None,
) -> _Claim | Outcome:
    """Claim ``stage`` (a row of ``run.stage_rows``) for ``worker``, the execution and run
    locked (by ``_lock(stages=True)``) and found to be the execution's current run. ``ended``:
    the end of the stage before, which this worker has just run, and its events: written in
    this transaction, before the claim, whether or not the claim is made."""
    end, ended_events = ended or (None, [])
    pending: list[Change] = [end] if end is not None else []
    now: datetime = run.db_now  # type: ignore[attr-defined]
    if run.paused_at is not None:
        # back from a pause for an operator or a hold by a freeze, which the deadline does not
        # count (written with the claim): an approval's window, a freeze's end bound that wait
        if run.deadline_at is not None:
            run.deadline_at += now - run.paused_at
        run.paused_at = None
    refused = _claim_refused(execution, run, stage["name"], now, pending, ended_events)
    if refused is not None:
        return refused
    return _claim_write(execution, run, stage, worker, now, pending, ended_events)


def _claim_refused(
    execution: Execution,
    run: Run,
    stage_name: str,
    now: datetime,
    pending: list[Change],
    ended_events: list[Event],
) -> Outcome | None:
    """Why the stage is not claimed, having written what that means (with the end of the
    stage before, in ``pending`` and ``ended_events``), or None: the execution may not run
    now (its lane is another's), its run was canceled, or the run passed its deadline."""
    refusal = claim_refusal(execution)
    if refusal is not None:
        # Dispatched without its lane (a stale message, a scan's guess): nothing runs.
        # The lane's handover dispatches it again once it is its turn.
        log.warning("run %s stage %s not claimed: %s", run.id, stage_name, refusal)
        if pending:
            _hand_off(run, now, pending)
            transition_write(pending, execution.id, ended_events)
        return Outcome.STOP
    if run.cancel_requested_at is not None:
        execution_finish(execution, ExecutionStatus.CANCELED, events=ended_events, rows=pending)
        return Outcome.STOP
    if run.deadline_at is not None and now > run.deadline_at:
        failure = FatalError("the run passed its deadline", code="timed_out")
        return _fail_locked(execution, failure, events=ended_events, rows=pending)
    return None


def _claim_write(
    execution: Execution,
    run: Run,
    stage: dict[str, Any],
    worker: str,
    now: datetime,
    pending: list[Change],
    ended_events: list[Event],
) -> _Claim:
    """The claim: the run fenced anew under ``worker``'s lease, the stage running, the
    execution running (and started), with their events, in one write after ``pending``."""
    if run.started_at is None and run.deadline_at is None:
        deadline = _deadline_seconds(execution.workflow)
        run.deadline_at = now + timedelta(seconds=deadline) if deadline else None
    if run.status == RunStatus.RUNNING and run.lease_owner not in ("", worker):
        # Its worker's lease ran out, or its holder is gone: counted once this commits.
        transaction.on_commit(LEASE_TAKEOVERS.labels(execution.workflow).inc)
    run.fence += 1
    run.recoveries = 0  # its message arrived: the recovery backoff starts over
    run.wakeups_seen = run.wakeups
    run.lease_owner = worker
    run.lease_expires_at = now + timedelta(seconds=settings.ALFRED_LEASE_SECONDS)
    run.status = RunStatus.RUNNING
    run.started_at = run.started_at or now
    pending += [
        fields_of(
            run,
            [
                "fence",
                "wakeups_seen",
                "lease_owner",
                "lease_expires_at",
                "status",
                "started_at",
                "deadline_at",
                "paused_at",
                "recoveries",
            ],
        ),
        (
            Stage,
            stage["id"],
            {"status": StageStatus.RUNNING}
            if stage["started"]
            else {"status": StageStatus.RUNNING, "started_at": now},
        ),
    ]
    stage_name = stage["name"]
    if stage["started"]:
        _timers_served(run, stage_name, now)  # a stage claimed before may have timers
    events, changed = list(ended_events), []
    if execution.start_state != StartState.STARTED:
        execution.start_state, execution.start_error = StartState.STARTED, None
        changed += ["start_state", "start_error"]
        events.append(
            start_state_event(
                execution.id, StartState.STARTED, run_id=run.id, worker=worker, fence=run.fence
            )
        )
    if execution.status != ExecutionStatus.RUNNING:
        execution.status = ExecutionStatus.RUNNING
        changed.append("status")
        events.append(_status_event(execution, run, stage_name))
    if changed:
        execution.updated_at = timezone.now()
        pending.append(fields_of(execution, [*changed, "updated_at"]))
    events.append(
        _stage_event(execution.id, run, EventType.STAGE_STARTED, stage_name, worker=worker)
    )
    transition_write(pending, execution.id, events)
    return _Claim(
        run,
        stage_name,
        stage["id"],
        run.fence,
        run.wakeups,
        execution.input,
        execution.workflow,
        Clock(now),
        execution.trace_context or {},
        execution.parent_id is not None,
    )


def _timers_served(run: Run, stage_name: str, now: datetime) -> None:
    """The stage's timers already due are served by this claim: mark them fired, so that the
    scanner does not wake the run a second time for them (every near timer also had a
    countdown hint; one of the two deliveries would only find the run leased). SKIP LOCKED:
    one the scanner holds right now is the scanner's to fire."""
    due = list(
        Timer.objects.select_for_update(skip_locked=True)
        .filter(run=run, stage=stage_name, status=TimerStatus.PENDING, due_at__lte=now)
        .values_list("pk", flat=True)
    )
    if due:
        Timer.objects.filter(pk__in=due).update(status=TimerStatus.FIRED, fired_at=now)


def _wake_owed(run: Run, stage_name: str, now: datetime) -> bool:
    """Whether a waiting stage has something to look at: a wake since its last claim (a
    signal, a fired timer, a child's end), its own timer due (the countdown hint's delivery,
    which the scanner has not fired yet) or its deadline passed (the claim ends it; not while
    paused for an operator or held by a freeze, ``paused_at``, which the deadline does not
    count). A cancel needs
    no claim: a waiting run is canceled at once (``controls``)."""
    return (
        run.wakeups != run.wakeups_seen
        or (run.paused_at is None and run.deadline_at is not None and now > run.deadline_at)
        or Timer.objects.filter(
            run=run, stage=stage_name, status=TimerStatus.PENDING, due_at__lte=now
        ).exists()
    )


def _deadline_seconds(workflow: str) -> float | None:
    try:
        return definition_get(workflow).deadline_seconds
    except FatalError:
        return None  # an unknown workflow fails when its stage runs, with the reason


def _leased_by_other(run: Run, worker: str, now: datetime) -> bool:
    """Whether another holder's lease still protects the run: it runs, and its holder is not
    known to be gone (``executions.runtime.holders``)."""
    live = bool(
        run.lease_owner
        and run.lease_owner != worker
        and run.lease_expires_at
        and run.lease_expires_at > now
    )
    return live and not holder_gone(run.lease_owner)


def _suspend(claim: _Claim, stage_name: str, suspend: Suspend) -> Outcome:
    with transaction.atomic(durable=True):
        locked = _lock_current(claim)
        if locked is None:
            return Outcome.STOP
        execution, run = locked
        if run.cancel_requested_at is not None:
            # asked to stop while the stage replayed its waits: stop instead of waiting
            execution_finish(
                execution,
                ExecutionStatus.CANCELED,
                error={"code": "canceled", "message": "canceled while waiting"},
            )
            return Outcome.STOP
        run.lease_owner = ""
        run.lease_expires_at = None
        run.status = RunStatus.WAITING
        if (suspend.operator or suspend.hold) and run.paused_at is None:
            run.paused_at = claim.clock.now()  # the database's clock, carried forward
        run.save(update_fields=["lease_owner", "lease_expires_at", "status", "paused_at"])
        Stage.objects.filter(run=run, name=stage_name).update(status=StageStatus.WAITING)
        status = ExecutionStatus.PAUSED if suspend.operator else ExecutionStatus.WAITING
        if execution.status != status:
            details = _approval_asked(execution, run) if suspend.operator else {}
            _status_set(execution, status, run, stage_name, reason=suspend.reason, **details)
        _emit(execution.id, run, EventType.STAGE_WAITING, stage_name, reason=suspend.reason)
        woken = run.wakeups != claim.wakeups
    if woken:
        # A signal, timer or child finished while this stage ran: it may already be what the
        # stage waits for, and its own dispatch found the run leased. Look again now.
        run_dispatch(claim.run.id)
    return Outcome.STOP


def _complete(
    claim: _Claim,
    output: Any,
    *,
    following: str | None,
    worker: str | None,
    publish: tuple[str, str] | None = None,
) -> _Claim | _Onward | Outcome | None:
    """Write the stage's success; None when the round is no longer ours and nothing was
    written. After the last stage, with the terminal transition: STOP. Else, with a
    ``worker`` to go on and ``following`` pending, in the same transaction the claim of it
    for that worker (the claim's outcome: a ``_Claim``, or STOP where it was refused); with
    ``following`` in any other state, ``_Onward`` to it (its claim by name decides); without
    a worker, the run is left between stages for whoever delivers the next: NEXT; with
    ``publish`` (the following stage and the workflow), the message that delivers it is sent
    once this commits (a lost one is the recovery scan's, after the hand-off's grace)."""
    if following is not None and worker is not None:
        handed = _hand_over(claim, output, following, worker)
        if handed is not None:
            return handed
    if following is None and _finished_at_once(claim, output):
        return Outcome.STOP
    now = claim.clock.now()
    with transaction.atomic(durable=True):
        locked = _lock_current(claim, stages=following is not None and worker is not None)
        if locked is None:
            return None
        execution, run = locked
        end, events = _stage_end(execution, run, claim.stage_id, claim.stage, output=output)
        if following is None:
            done = (
                ExecutionStatus.ROLLED_BACK
                if run.kind == RunKind.ROLLBACK
                else ExecutionStatus.SUCCEEDED
            )
            execution_finish(execution, done, result=output, events=events, rows=[end])
            return Outcome.STOP
        if worker is not None:
            rows: list[dict[str, Any]] = run.stage_rows  # type: ignore[attr-defined]
            stage = next((s for s in rows if s["name"] == following), None)
            if stage is not None and stage["status"] == StageStatus.PENDING:
                taken = _take(execution, run, stage, worker, ended=(end, events))
                if isinstance(taken, _Claim):
                    # the hand-off statement was tried (no help asked) and wrote nothing,
                    # yet the claim was made: the next ones go this way too
                    return replace(taken, at_once=claim.at_once and _asks_for_help(output))
                return taken
        changes = [end]
        _hand_off(run, now, changes)
        transition_write(changes, execution.id, events)
        if publish is not None:
            next_stage, workflow = publish
            transaction.on_commit(
                lambda: run_dispatch(run.id, stages=(next_stage,), workflow=workflow)
            )
    # Not claimed here: the caller delivers the next stage, or the following stage is not
    # simply pending (done already: a continuation's skipped stage; missing) and the claim
    # by its name decides (it goes on past a stage done, fails a stage that is not there).
    return _Onward(following) if worker is not None else Outcome.NEXT


def _hand_over(claim: _Claim, output: Any, following: str, worker: str) -> _Claim | None:
    """The stage's end and the claim of ``following`` in one statement (``handoff``): the
    next stage's claim, or None when that statement could not be used or wrote nothing (a
    stage asking for help, a guard with no SQL test, or anything changed since the claim:
    the caller goes the slow way, which decides each case)."""
    if not claim.at_once or _asks_for_help(output):
        return None
    run, execution_id = claim.run, claim.run.execution_id
    handed = stage_hand_over(
        execution_id=execution_id,
        run_id=run.id,
        fence=claim.fence,
        stage_id=claim.stage_id,
        output=output,
        following=following,
        worker=worker,
        events=[
            _stage_event(execution_id, run, EventType.STAGE_SUCCEEDED, claim.stage),
            _stage_event(
                execution_id,
                run,
                EventType.STAGE_STARTED,
                following,
                fence=claim.fence + 1,
                worker=worker,
            ),
        ],
    )
    if handed is None:
        return None
    run.fence, run.wakeups, run.wakeups_seen = handed.fence, handed.wakeups, handed.wakeups
    run.lease_owner, run.recoveries = worker, 0
    return _Claim(
        run,
        following,
        handed.stage_id,
        handed.fence,
        handed.wakeups,
        claim.input,
        claim.workflow,
        Clock(handed.now),
        claim.trace_context,
        claim.child,
    )


def _finished_at_once(claim: _Claim, output: Any) -> bool:
    """The last stage's end and the terminal transition in one statement (``handoff``);
    False when it could not be used or wrote nothing (the caller goes the slow way)."""
    if claim.child or _asks_for_help(output):
        return False
    run, execution_id = claim.run, claim.run.execution_id
    status = (
        ExecutionStatus.ROLLED_BACK if run.kind == RunKind.ROLLBACK else ExecutionStatus.SUCCEEDED
    )
    finished = stage_finish(
        execution_id=execution_id,
        run_id=run.id,
        fence=claim.fence,
        stage_id=claim.stage_id,
        output=output,
        status=status,
        events=[
            _stage_event(execution_id, run, EventType.STAGE_SUCCEEDED, claim.stage),
            terminal_event(execution_id, run.id, status, result=output, error=None),
        ],
    )
    if finished is None:
        return False
    lane_key = finished.lane_key
    transaction.on_commit(
        lambda: execution_finished.send(Execution, execution_id=execution_id, lane_key=lane_key)
    )
    return True


def _asks_for_help(output: Any) -> bool:
    """Whether a stage's output lists help for a person (``_assistance_add``'s to write)."""
    return isinstance(output, dict) and isinstance(output.get("assistance"), list)


def _hand_off(run: Run, now: datetime, changes: list[Change]) -> None:
    """Leave the run between stages, leased to no one: if whoever delivers the next stage
    never does (its worker died), the recovery scan picks the run up once this grace is over
    (or the message, delivered again, does sooner)."""
    run.lease_owner = ""
    run.lease_expires_at = now + timedelta(seconds=settings.ALFRED_HANDOFF_GRACE_SECONDS)
    changes.append(fields_of(run, ["lease_owner", "lease_expires_at"]))


def _finish(
    claim: _Claim, stage_name: str, status: str, *, error: dict[str, Any] | None
) -> Outcome:
    with transaction.atomic(durable=True):
        locked = _lock_current(claim)
        if locked is None:
            return Outcome.STOP
        execution, run = locked
        end, events = _stage_end(execution, run, claim.stage_id, stage_name, error=error)
        execution_finish(execution, status, error=error, events=events, rows=[end])
    return Outcome.STOP


def _stage_end(
    execution: Execution,
    run: Run,
    stage_id: int,
    stage: str,
    *,
    output: Any = None,
    error: dict[str, Any] | None = None,
) -> tuple[Change, list[Event]]:
    """The stage's end (``succeeded`` with ``output``, or ``failed`` with ``error``) as a
    change to write and the events to emit after it: the caller writes it with its own
    changes, in one statement. The help a succeeded stage asks for is added here."""
    status = StageStatus.FAILED if error is not None else StageStatus.SUCCEEDED
    end: Change = (
        Stage,
        stage_id,
        {"status": status, "output": output, "error": error, "finished_at": timezone.now()},
    )
    events = [
        _stage_event(execution.id, run, EventType(f"stage.{status}"), stage, error=error)
        if error
        else _stage_event(execution.id, run, EventType(f"stage.{status}"), stage)
    ]
    if status == StageStatus.SUCCEEDED and isinstance(output, dict):
        events += _assistance_add(execution, run, stage, output.get("assistance"))
    return end, events


def _assistance_add(execution: Execution, run: Run, stage: str, items: Any) -> list[Event]:
    """A stage asks a person for help by listing it in its output (``assistance``: objects
    with a ``kind``): each is added to the execution's ``assistance`` once (a stage that
    completes again after a crash adds nothing new), in the stage's transaction; returns
    the events that announce them, for the stage's emission."""
    if not isinstance(items, list):
        return []
    known = list(execution.assistance or [])
    fresh = [
        {**item, "stage": stage, "run": run.id}
        for item in items
        if isinstance(item, dict) and not any(_same_help(item, held) for held in known)
    ]
    if not fresh:
        return []
    execution.assistance = known + fresh
    execution.save(update_fields=["assistance", "updated_at"])
    return [
        Event(
            type=EventType.ASSISTANCE,
            key=event_key(execution.id, f"assistance:{position}"),
            payload=item,
        )
        for position, item in enumerate(fresh, start=len(known))
    ]


def _definition_of(workflow: str, run: Run) -> Definition:
    """The definition that runs ``run``, or its ``definition_changed`` failure, which names the
    operator approvals the run woke with (docs/runbook.md, "A deploy changed a workflow"): an
    approval given for the old code is never spent without a word. It stays recorded on its
    hook, signalled (the failure cancels only pending hooks); a retry under the current
    definition that asks for the approval of the same plan again finds it given and goes on,
    and one whose plan differs pauses for a new approval."""
    try:
        return definition_of_run(workflow, run.definition)
    except FatalError as changed:
        approvals = _approvals_given(run)
        if changed.code != "definition_changed" or not approvals:
            raise
        given = "; ".join(f"plan {a['plan_hash']} approved by {a['by']}" for a in approvals)
        raise FatalError(
            f"{changed.message} The approval it woke with is kept ({given}): a retry applies "
            "it without asking again if its plan has the same hash, and asks again otherwise.",
            code=changed.code,
            **changed.details,
            approvals=approvals,
        ) from None


def _approvals_given(run: Run) -> list[dict[str, Any]]:
    """The operator approvals ``run`` has been given (signalled operator hooks), oldest
    first: what a ``definition_changed`` failure says it did not spend."""
    hooks = (
        Hook.objects.filter(run=run, operator=True, status=HookStatus.SIGNALLED)
        .prefetch_related("signals")
        .order_by("resolved_at")
    )
    given = []
    for hook in hooks:
        signal = max(hook.signals.all(), key=lambda s: s.created_at, default=None)
        payload = hook.payload if isinstance(hook.payload, dict) else {}
        answer = signal.payload if signal is not None and isinstance(signal.payload, dict) else {}
        # every approver the policy asked for (answer["approvers"]), else the one who answered
        approvers = answer.get("approvers") or ([signal.principal] if signal is not None else [])
        given.append(
            {
                "hook": hook.id,
                "stage": hook.stage,
                "plan_hash": payload.get("plan_hash"),
                "by": ", ".join(approvers) or None,
                "at": signal.created_at.isoformat() if signal is not None else None,
            }
        )
    return given


def _approval_asked(execution: Execution, run: Run) -> dict[str, Any]:
    """What ``execution.paused`` tells whoever must ask a person (a chat bot, a ticket
    system): the checkpoint's one-line summary, its plan and hash, when it expires, and
    where to approve it."""
    hook = Hook.objects.filter(run=run).awaiting_operator().first()
    if hook is None:
        return {}
    payload = hook.payload if isinstance(hook.payload, dict) else {}
    return {
        "approval": {
            "hook": hook.id,
            "name": hook.name,
            "summary": str(payload.get("summary") or payload.get("why") or ""),
            "plan": payload.get("plan"),
            "plan_hash": payload.get("plan_hash"),
            "force_required": bool(payload.get("force_required")),
            "expires_at": hook.expires_at.isoformat() if hook.expires_at else None,
            "links": approval_links(execution.id, str(payload.get("plan_hash") or "")),
        }
    }


def _same_help(item: dict[str, Any], held: Any) -> bool:
    return isinstance(held, dict) and all(held.get(k) == v for k, v in item.items())


def _fail_locked(
    execution: Execution,
    failure: FatalError,
    *,
    events: Sequence[Event] = (),
    rows: Sequence[Change] = (),
) -> Outcome:
    error = failure.projection()
    execution_finish(execution, ExecutionStatus.FAILED, error=error, events=events, rows=rows)
    return Outcome.STOP


def _status_set(execution: Execution, status: str, run: Run, stage: str, **payload: Any) -> None:
    execution.status = status
    execution.save(update_fields=["status", "updated_at"])
    events_emit(execution.id, [_status_event(execution, run, stage, **payload)])


def _status_event(execution: Execution, run: Run, stage: str, **payload: Any) -> Event:
    """``execution.<status>`` for the status ``execution`` has now."""
    return _status_event_of(execution.id, execution.status, run.id, run.fence, stage, **payload)


def _status_event_of(
    execution_id: str | None, status: str, run_id: str, fence: int, stage: str, **payload: Any
) -> Event:
    """``execution.<status>`` (``execution_id`` None: named, ``outbox.event_key``)."""
    return Event(
        type=EventType(f"execution.{status}"),
        key=event_key(execution_id, f"{run_id}:{status}:{fence}"),
        payload={"run": run_id, "stage": stage, **payload},
    )


def _emit(execution_id: str, run: Run, type: EventType, stage: str, **payload: Any) -> None:
    events_emit(execution_id, [_stage_event(execution_id, run, type, stage, **payload)])


def _stage_event(
    execution_id: str,
    run: Run,
    type: EventType,
    stage: str,
    *,
    fence: int | None = None,
    **payload: Any,
) -> Event:
    """A stage's event, under the run's fence (or ``fence``: the one a claim is taking)."""
    fence = run.fence if fence is None else fence
    return _stage_event_of(execution_id, run.id, fence, type, stage, **payload)


def _stage_event_of(
    execution_id: str | None, run_id: str, fence: int, type: EventType, stage: str, **payload: Any
) -> Event:
    """A stage's event under ``fence`` (``execution_id`` None: named, ``outbox.event_key``)."""
    return Event(
        type=type,
        key=event_key(execution_id, f"{run_id}:{stage}:{type}:{fence}"),
        payload={"run": run_id, "stage": stage, "fence": fence, **payload},
    )


def _report_duplicate(execution: Execution, run: Run, stage: str, worker: str) -> None:
    """A stage message for a run another live worker holds: nothing is done. A diagnostic
    for operators (a log line and ``alfred_duplicate_deliveries_total``), not an event: it
    says nothing about the execution an integrator could act on, so it stays out of the
    outbox, its sequence and its webhooks (``executions.events``)."""
    DUPLICATE_DELIVERIES.labels(execution.workflow, stage).inc()
    log.warning(
        "duplicate delivery of run %s stage %s to %s: held by %s until %s",
        run.id,
        stage,
        worker,
        run.lease_owner,
        run.lease_expires_at,
        extra={"execution": execution.id},
    )


def _hint(run_id: str) -> Any:
    def wake_at(due: datetime, now: datetime) -> None:
        run_wake_at(run_id, due, now)

    return wake_at
