"""The lane reconciler (docs/architecture.md, "Lanes"): observe a lane's owner — its execution and
its bound run — and decide retain, release or recovery_required. It runs on every terminal
transition (at once, for that lane) and from beat over every lane whose owner is no longer
live (the guarantee); both paths are compare-and-swap writes, so two reconcilers racing
release a lane once. Each write's change goes to the executions side (``lanes.effects``) in
the transaction that made it: the events, and the next owner's run started on commit.

Decisions:
- live or suspended run → retain;
- succeeded / rolled_back, consistent with the run → release, and hand to the next in line;
- failed with a schema-valid readiness failure in the planning stage and no later stage
  started → release;
- anything else (canceled, unclassified failure, missing run, contradictory state) →
  recovery_required: the lane stays blocked for an operator.

A release whose leaving owner changed nothing (the readiness rule, or an end before any stage
started) that leaves the lane free removes it, unless some owner ever held it past such a
failure (``lanes.models``; ``lanes.services.try_lane_remove``).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Collate

from executions.models import (
    ACTIVE_STATUSES,
    Execution,
    ExecutionStatus,
    Run,
    RunStatus,
    Stage,
    StageStatus,
)
from executions.runtime.errors import readiness_is_valid
from lanes.effects import lane_effects
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import (
    lane_hand_over,
    lane_lock,
    lane_mark_recovery_required,
    try_lane_remove,
)

log = logging.getLogger(__name__)

BATCH = 200


class Action(enum.Enum):
    RETAIN = "retain"
    RELEASE = "release"
    RECOVERY_REQUIRED = "recovery_required"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    # A release whose owner changed nothing (a readiness failure in planning, or an end before
    # any stage started): the lane it frees may have guarded nothing (lanes.models).
    changed_nothing: bool = False


_LIVE_RUN = {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING}


def lane_decide(
    owner: Execution | None,
    run: Run | None,
    stages: list[Stage],
    *,
    ever_started: bool = True,
    earlier_work: bool = False,
) -> Decision:
    """The rule, on what was observed (pure: no reads, no writes). ``ever_started``: some
    stage of some run of the owner has started; one that never did changed nothing, so its
    end — failed or canceled — lets the lane go. ``earlier_work``: an earlier run of the
    owner went past its planning stage, so a readiness failure now proves nothing about
    what that run changed."""
    if owner is None:
        return Decision(Action.RECOVERY_REQUIRED, "the owner execution is missing")
    if run is None:
        return Decision(Action.RECOVERY_REQUIRED, f"{owner.id} has no bound run")
    if owner.status in ACTIVE_STATUSES:
        if run.status in _LIVE_RUN:
            return Decision(Action.RETAIN, f"{owner.id} is {owner.status}")
        return Decision(
            Action.RECOVERY_REQUIRED, f"{owner.id} is {owner.status} but its run is {run.status}"
        )
    if owner.status in (ExecutionStatus.SUCCEEDED, ExecutionStatus.ROLLED_BACK):
        if run.status == RunStatus.SUCCEEDED:
            return Decision(Action.RELEASE, f"{owner.id} {owner.status}")
        return Decision(
            Action.RECOVERY_REQUIRED, f"{owner.id} {owner.status} but its run is {run.status}"
        )
    if not ever_started:
        return Decision(
            Action.RELEASE,
            f"{owner.id} was {owner.status} before any stage started",
            changed_nothing=True,
        )
    if owner.status == ExecutionStatus.FAILED:
        if earlier_work:
            return Decision(
                Action.RECOVERY_REQUIRED, f"{owner.id} failed; an earlier run went past planning"
            )
        return _readiness(owner, stages)
    return Decision(Action.RECOVERY_REQUIRED, f"{owner.id} was {owner.status}")


def _readiness(owner: Execution, stages: list[Stage]) -> Decision:
    """A failed owner lets the lane go only on evidence that it changed nothing."""
    if not stages:
        return Decision(Action.RECOVERY_REQUIRED, f"{owner.id} failed; no stage to inspect")
    planning, later = stages[0], stages[1:]
    error: Any = planning.error
    if planning.status != StageStatus.FAILED or not isinstance(error, dict):
        return Decision(Action.RECOVERY_REQUIRED, f"{owner.id} failed outside its planning stage")
    if error.get("code") != "readiness_failure" or not readiness_is_valid(error.get("readiness")):
        return Decision(Action.RECOVERY_REQUIRED, f"{owner.id} failed without readiness evidence")
    started = [s.name for s in later if s.started_at is not None or s.status != StageStatus.PENDING]
    if started:
        return Decision(
            Action.RECOVERY_REQUIRED, f"{owner.id} failed after stage {started[0]} started"
        )
    return Decision(
        Action.RELEASE,
        f"{owner.id} was not ready: {error['readiness']['code']}",
        changed_nothing=True,
    )


def lane_reconcile(key: str, *, wait: bool = True) -> Decision | None:
    """Reconcile one lane; None when there was nothing to decide (free, nobody waiting).
    ``wait=False`` (the beat tick) skips a lane another writer holds right now. The owner's
    execution row is locked before the lane (``lane_lock``): its terminal transition cannot
    land between what is observed and what is written."""
    with transaction.atomic(durable=True):
        lane = lane_lock(key, wait=wait)
        if lane is None:
            return None  # unknown, or (not waiting) another writer holds it right now
        if lane.state == LaneState.FREE:
            if LaneWaiter.objects.filter(lane_id=key).exists():
                change = lane_hand_over(lane, reason="a queued execution waited on a free lane")
                lane_effects().lane_changed(change)
                return Decision(Action.RELEASE, "lost handoff")
            return None
        if lane.state == LaneState.RECOVERY_REQUIRED:
            return Decision(Action.RECOVERY_REQUIRED, lane.reason)
        decision = _observe(lane)
        if decision.action is Action.RECOVERY_REQUIRED:
            # A contradiction may be a transition seen half-way: look once more first.
            decision = _observe(lane)
        if decision.action is Action.RELEASE:
            _release(lane, decision, reason=decision.reason)
        elif decision.action is Action.RECOVERY_REQUIRED:
            lane_effects().lane_changed(lane_mark_recovery_required(lane, reason=decision.reason))
        return decision


def _release(lane: Lane, decision: Decision, *, reason: str) -> None:
    """Hand ``lane`` (locked) over as ``decision`` says; a lane it leaves free that never
    guarded anything goes (``try_lane_remove``), in this transaction."""
    change = lane_hand_over(lane, reason=reason, changed_nothing=decision.changed_nothing)
    lane_effects().lane_changed(change)
    if decision.changed_nothing and try_lane_remove(change):
        log.info("lane %s removed: freed by %s, it never guarded anything", lane.key, reason)


def _observe(lane: Lane) -> Decision:
    """The owner and its bound run in ONE statement (one snapshot: an execution and its run
    read apart could show a terminal commit half-way), then its stages."""
    owner = (
        Execution.objects.select_related("current_run").filter(pk=lane.owner_id).first()
        if lane.owner_id
        else None
    )
    run = owner.current_run if owner is not None else None
    stages: list[Stage] = []
    ever_started, earlier_work = True, False
    if owner is not None and run is not None:
        stages = list(Stage.objects.filter(run_id=run.id).order_by("position"))
        if owner.status not in ACTIVE_STATUSES:
            started = Stage.objects.filter(run__execution_id=owner.id, started_at__isnull=False)
            ever_started = started.exists()
            earlier_work = (
                ever_started and started.filter(position__gt=0).exclude(run_id=run.id).exists()
            )
    return lane_decide(owner, run, stages, ever_started=ever_started, earlier_work=earlier_work)


def lane_reconcile_on_finish(
    sender: Any, *, execution_id: str, lane_key: str | None, **_: Any
) -> None:
    """After the commit of every terminal transition (``execution_finished``, connected by
    ``ExecutionsConfig.ready``): act on that lane now; beat is the guarantee."""
    if not lane_key:
        return  # no lane (a workflow that takes none), or a child under its root's ownership
    try:
        lane_reconcile(lane_key)
    except Exception:
        log.exception("reconciling %s after %s", lane_key, execution_id)


# Held lanes whose owner would not be retained: missing, without its run, or not both active
# and live (``lane_decide``'s one RETAIN). A lane whose owner is live has nothing to decide.
# The held lanes come in code-point order from their own index (lanes.models): its predicate,
# the state, is written in the text, where the planner can match it.
_UNSETTLED_SQL = f"""
    SELECT l.key FROM {Lane._meta.db_table} l
    LEFT JOIN {Execution._meta.db_table} e ON e.id = l.owner_id
    LEFT JOIN {Run._meta.db_table} r ON r.id = e.current_run_id
    WHERE l.state = '{LaneState.HELD.value}' AND l.key COLLATE "C" > %s
      AND (r.id IS NULL OR e.status <> ALL(%s) OR r.status <> ALL(%s))
    ORDER BY l.key COLLATE "C" LIMIT %s
"""  # noqa: S608 - the table names come from model metadata; the values are bound


def unsettled_params(after: str, batch: int) -> list[Any]:
    """The parameters of ``_UNSETTLED_SQL`` (bench/lanes.py explains the same read)."""
    return [after, sorted(ACTIVE_STATUSES), sorted(_LIVE_RUN), batch]


def lanes_reconcile(batch: int = BATCH, *, after: str = "") -> tuple[int, str | None]:
    """The beat tick, one page: the held lanes whose owner is no longer live (its release
    missed: a terminal transition whose own reconcile did not run; a missing owner; a
    contradiction), and free lanes someone waits on, in key order after ``after``. Returns
    how many were visited and, when the page was full, the key to go on from (the task goes
    on at once in a new task), so every such lane is reached each tick however many there
    are. A held lane whose owner and run are live would be retained: it is not visited, so
    a tick costs one indexed read of the held lanes and a transaction per lane that has
    something to decide (bench/reports/lanes.md). A lane blocked for an operator has
    nothing to decide and is not visited either.

    Pages go in code-point order (``COLLATE "C"``), the order Python's ``sorted`` merges the
    two reads in, whatever the database's own collation: under another (en_US, ICU) the page
    went on after the wrong key and skipped lanes."""
    with connection.cursor() as cursor:
        cursor.execute(_UNSETTLED_SQL, unsettled_params(after, batch))
        held = [key for (key,) in cursor.fetchall()]
    stranded = (
        LaneWaiter.objects.filter(lane__state=LaneState.FREE)
        .annotate(in_order=Collate("lane_id", "C"))
        .filter(in_order__gt=after)
        .order_by("in_order")
        .values_list("in_order", flat=True)
        .distinct()[:batch]
    )
    keys = sorted({*held, *stranded})[:batch]
    for key in keys:
        try:
            lane_reconcile(key, wait=False)
        except Exception:
            log.exception("reconciling lane %s failed; the next tick tries again", key)
    return len(keys), (keys[-1] if len(keys) == batch else None)


def lanes_release_ready() -> list[str]:
    """At the API process's start: the rule again, once, for every lane an operator has not
    recovered yet — a restart never leaves a safely releasable lane blocked. Compare-and-swap:
    two processes starting together release a lane once. Returns the lanes released."""
    released = []
    keys = Lane.objects.filter(state=LaneState.RECOVERY_REQUIRED).values_list("key", flat=True)
    for key in list(keys):
        with transaction.atomic(durable=True):
            lane = lane_lock(key, wait=False)
            if lane is None or lane.state != LaneState.RECOVERY_REQUIRED:
                continue  # released by another process meanwhile, or being
            decision = _observe(lane)
            if decision.action is Action.RELEASE:
                _release(lane, decision, reason=f"released at start: {decision.reason}")
                released.append(key)
    return released
