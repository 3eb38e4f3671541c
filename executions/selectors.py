"""Reads of the execution resource (services own writes, selectors own reads)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.urls import reverse

from alfred.db import Rows, Statement, columns, instance, instances, statements_run
from alfred.principals import Caller, principal_name
from executions.approvals import Standing
from executions.catalog import workflows_all
from executions.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    AuditEntry,
    DeliveryKey,
    Execution,
    ExecutionStatus,
    Freeze,
    Hook,
    HookStatus,
    OutboxEvent,
    Run,
    Stage,
    Timer,
    TimerPurpose,
    TimerStatus,
)
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.selectors import POSITION_SQL

# What an execution can be waiting for that someone else must give: the filters of the admin's
# list, of its attention panel and of ``alfred_executions list``. "recovery": its lane is
# recovery_required (it owns it, asked for again, or queues behind it), which only an operator
# clears; without that, nothing it waits for ever comes.
AWAITING = {
    "approval": "an operator's approval",
    "lane": "their lane (queued)",
    "recovery": "an operator's lane recovery",
    "freeze": "a change freeze to end (or to let them through)",
}


def executions_visible(caller: Caller) -> QuerySet[Execution]:
    """What ``caller`` may read: operators and viewers everything; an integration what it
    owns and what it holds a delivery key for (an operator may have continued an
    integration's execution under the operator's key; the integration still reads it).

    Trade-off, written down in docs/contract.md: an integration cannot list the work of
    another integration even on a lane they share; it sees the lane's queue by execution id
    only (``GET /lanes/{key}``) and reads none of those executions."""
    if caller.reads_all:
        return Execution.objects.all()
    keyed = DeliveryKey.objects.filter(execution=OuterRef("pk"), principal=caller.principal)
    return Execution.objects.filter(Q(principal=caller.principal) | Exists(keyed))


def execution_list(
    caller: Caller, *, workflow: str | None = None, status: str | None = None
) -> QuerySet[Execution]:
    qs = executions_visible(caller)
    if workflow:
        qs = qs.filter(workflow=workflow)
    if status:
        qs = qs.filter(status=status)
    return qs


def _awaits(what: str) -> Exists:
    """Whether an execution waits for ``what`` (a key of :data:`AWAITING`): an operator's
    answer to a pending hook (a plan to approve, an assistance), or its lane's owner."""
    if what == "approval":
        return Exists(Hook.objects.filter(execution=OuterRef("pk")).awaiting_operator())
    if what == "lane":
        return Exists(LaneWaiter.objects.filter(execution=OuterRef("pk")))
    if what == "recovery":
        # An owner still active (a retry or rollback asked for on its blocked lane), or a
        # waiter behind a blocked owner; a failed owner ended and waits for nothing.
        return Exists(
            Lane.objects.filter(state=LaneState.RECOVERY_REQUIRED).filter(
                Q(owner=OuterRef("pk"), owner__status__in=ACTIVE_STATUSES)
                | Q(waiters__execution=OuterRef("pk"))
            )
        )
    if what == "freeze":
        # a pending hold on its current run (executions.freezes)
        return Exists(
            Timer.objects.filter(
                run_id=OuterRef("current_run_id"),
                purpose=TimerPurpose.HOLD,
                status=TimerStatus.PENDING,
            )
        )
    raise ValueError(f"awaiting {what!r}: one of {', '.join(AWAITING)}")


def executions_awaiting(queryset: QuerySet[Execution], what: str) -> QuerySet[Execution]:
    """Those of ``queryset`` waiting for ``what`` (a key of :data:`AWAITING`)."""
    return queryset.filter(_awaits(what))


def execution_rows(
    caller: Caller,
    *,
    workflow: str | None = None,
    status: str | None = None,
    awaiting: str | None = None,
) -> QuerySet[Execution]:
    """A list's rows, newest first, marked as :func:`executions_marked` says."""
    qs = execution_list(caller, workflow=workflow, status=status)
    if awaiting is not None:
        qs = executions_awaiting(qs, awaiting)
    return executions_marked(qs).order_by("-created_at", "-id")


def executions_marked(queryset: QuerySet[Execution]) -> QuerySet[Execution]:
    """Each row marked ``awaits_<what>`` for every key of :data:`AWAITING` (what a list's
    "waits for" column reads: :func:`waits_for_mark`)."""
    return queryset.annotate(**{f"awaits_{what}": _awaits(what) for what in AWAITING})


def waits_for_mark(execution: Execution) -> str:
    """A list row's "waits for", from :func:`executions_marked`'s marks: who must act first
    (a blocked lane before anything else: nothing else moves until it is recovered)."""
    if getattr(execution, "awaits_recovery", False):
        return "lane recovery (operator)"
    if getattr(execution, "awaits_approval", False):
        return "approval (operator)"
    if getattr(execution, "awaits_lane", False):
        return "lane (its owner first)"
    if getattr(execution, "awaits_freeze", False):
        return "a change freeze (operator)"
    return ""


def execution_assistance(execution: Execution) -> list[Any]:
    """The assistance a person still owes the execution (its ``assistance`` as recorded,
    docs/contract.md): none once it is rolled back, whose rollback undid what was asked for
    (what it asked a person to do for what it made is moot once that is undone)."""
    if execution.status == ExecutionStatus.ROLLED_BACK:
        return []
    return list(execution.assistance or [])


def execution_get(execution_id: str) -> Execution:
    """The execution with its current run, whoever asks (a caller's read goes through
    :func:`execution_detail`)."""
    return Execution.objects.select_related("current_run").get(pk=execution_id)


@dataclass(frozen=True)
class LaneView:
    key: str
    role: str | None  # owner | queued | None (not holding nor waiting)
    state: str | None
    position: int | None
    owner: str | None = None  # who holds the lane
    reason: str = ""  # the lane's: why it is recovery_required


@dataclass(frozen=True)
class Waiting:
    """What an active execution waits for that someone else must give, and who can give it
    (docs/runbook.md, "A lane is recovery_required"): the execution's resource, its admin
    page and list, and ``alfred_executions show|list`` all say this one thing.

    ``code``: ``approval`` (an operator approves or rejects the plan), ``lane`` (queued: the
    lane's owner must finish) or ``lane_recovery`` (its lane is recovery_required: only an
    operator can release it). ``who``: ``operator`` or ``lane owner``. ``recover``: for
    ``lane_recovery``, the command that releases the lane to this execution's side."""

    code: str
    who: str
    detail: str
    lane: str | None = None
    recover: str = ""
    freeze: str | None = None


def execution_waiting(
    execution: Execution,
    lane: LaneView | None,
    pending_approval: Hook | None,
    standing: Standing | None = None,
    held: Freeze | None = None,
) -> Waiting | None:
    """What ``execution`` (active) waits for, from its lane and its pending approval (its
    parts, :func:`execution_parts`, and where the approval stands under its policy):
    None when nothing, or only a worker (running, a timer)."""
    if execution.status in TERMINAL_STATUSES:
        return None
    # The holder as read with the lane; an acceptance's own answer knows only the lane's key,
    # role and state (as its transaction left them): the owner is then named by the lane.
    holder = execution.id if lane is not None and lane.role == "owner" else None
    holder = holder or (lane.owner if lane is not None else None)
    if lane is not None and lane.state == LaneState.RECOVERY_REQUIRED and lane.role:
        behind = (
            "it holds" if lane.role == "owner" else f"it queues on (behind {holder or 'its owner'})"
        )
        why = f": {lane.reason}" if lane.reason else ""
        owner = holder or "OWNER"
        recover = (
            f'manage.py alfred_lanes recover {shlex.quote(lane.key)} --owner {owner} --reason "…"'
        )
        return Waiting(
            code="lane_recovery",
            who="operator",
            detail=f"The lane {lane.key} {behind} is recovery_required{why}. Nothing on it "
            "starts until an operator has checked what its owner left behind and recovered "
            f"the lane: the API (POST {reverse('lane-recover', kwargs={'key': lane.key})}), "
            f"the admin (the lane's page, Recover…) or `{recover}`.",
            lane=lane.key,
            recover=recover,
        )
    if pending_approval is not None:
        plan = str((pending_approval.payload or {}).get("plan_hash", ""))
        detail = f"An operator's answer to the plan {plan}: approve or reject it"
        if standing is not None and standing.blocked:
            detail = (
                f"{detail}. Its approval cannot be met as the policy stands: {standing.blocked}"
            )
        elif standing is not None:
            detail = (
                f"{detail} ({standing.summary()}; the rule {standing.rule.name!r} asks "
                f"{standing.rule.asks()})"
            )
        return Waiting(code="approval", who="operator", detail=f"{detail}.")
    if held is not None:
        until = (
            "until an operator ends it"
            if held.ends_at is None
            else (f"until {held.ends_at.isoformat()}")
        )
        return Waiting(
            code="freeze",
            who="operator",
            detail=f"The change freeze {held.id} ({held.reason}) holds it before its first "
            f"change, {until}: it goes on when the freeze ends. An operator may end the "
            f"freeze, or let this execution through with a reason (POST "
            f"{reverse('freeze-exempt', kwargs={'freeze_id': held.id})}, the admin's freeze "
            f"page, or `manage.py alfred_freezes exempt {held.id} {execution.id} --reason "
            '"…"`).',
            freeze=held.id,
        )
    if lane is not None and lane.role == "queued":
        return Waiting(
            code="lane",
            who="lane owner",
            detail=f"Its turn on the lane {lane.key} (position {lane.position}, behind "
            f"{holder or 'its owner'}): it starts when the lane is handed to it.",
            lane=lane.key,
        )
    return None


def execution_lane(execution: Execution) -> LaneView | None:
    """Its lane's state, and whether it holds the lane or its place in the queue."""
    (view,) = statements_run([_lane_statement(execution.id)])
    return view


@dataclass(frozen=True)
class ExecutionParts:
    """What an execution's answer shows besides its own row."""

    execution_id: str
    stages: list[Stage]  # of its current run
    pending_approval: Hook | None  # the operator checkpoint it waits on, if any
    children: list[str]
    lane: LaneView | None


_EXECUTION = Execution._meta.db_table
# What executions_visible lets a caller read, for one execution ``e``, in SQL (the list's
# filters and pages build on the queryset; the reads of one execution on this).
_VISIBLE_TO_CALLER = f"""
    (%(reads_all)s OR e.principal = %(principal)s OR EXISTS (
        SELECT 1 FROM {DeliveryKey._meta.db_table} AS k
        WHERE k.execution_id = e.id AND k.principal = %(principal)s
    ))
"""  # noqa: S608 - names from model metadata; the values are bound
# The execution with its current run (select_related), if the caller may read it.
_VISIBLE_SQL = f"""
    SELECT {columns(Execution, "e")}, {columns(Run, "r")}
    FROM {_EXECUTION} AS e LEFT JOIN {Run._meta.db_table} AS r ON r.id = e.current_run_id
    WHERE e.id = %(execution)s AND {_VISIBLE_TO_CALLER}
"""  # noqa: S608 - names from model metadata; the values are bound
_EVENTS_SQL = f"""
    SELECT {columns(OutboxEvent, "o")} FROM {OutboxEvent._meta.db_table} AS o
    WHERE o.execution_id = %s AND o.sequence > %s ORDER BY o.sequence LIMIT %s
"""  # noqa: S608 - names from model metadata; the values are bound
_IS_VISIBLE_SQL = f"""
    SELECT EXISTS (
        SELECT 1 FROM {_EXECUTION} AS e WHERE e.id = %(execution)s AND {_VISIBLE_TO_CALLER}
    )
"""  # noqa: S608 - names from model metadata; the values are bound


def _visible_params(execution_id: str, caller: Caller) -> dict[str, Any]:
    return {"execution": execution_id, "reads_all": caller.reads_all, "principal": caller.principal}


_STAGES_SQL = f"""
    SELECT {columns(Stage, "s")} FROM {Stage._meta.db_table} AS s
    WHERE s.run_id = (SELECT e.current_run_id FROM {_EXECUTION} AS e WHERE e.id = %s)
    ORDER BY s.position
"""  # noqa: S608 - names from model metadata; the value is bound
# Hook.objects.awaiting_operator().first(), for one execution
_PENDING_APPROVAL_SQL = f"""
    SELECT {columns(Hook, "h")} FROM {Hook._meta.db_table} AS h
    WHERE h.execution_id = %s AND h.status = '{HookStatus.PENDING.value}' AND h.operator
    ORDER BY h.created_at DESC LIMIT 1
"""  # noqa: S608 - names and a status from the model; the value is bound
_CHILDREN_SQL = f"""
    SELECT c.id FROM {_EXECUTION} AS c WHERE c.parent_id = %s ORDER BY c.id
"""  # noqa: S608 - names from model metadata; the value is bound
# The execution's lane key, the lane's state and holder (NULL when the lane has no row), and
# the execution's place in its queue; no row for an execution on no lane.
_LANE_SQL = f"""
    SELECT e.lane_key, l.state, l.owner_id, l.reason, ({POSITION_SQL})
    FROM {_EXECUTION} AS e LEFT JOIN {Lane._meta.db_table} AS l ON l.key = e.lane_key
    WHERE e.id = %s AND e.lane_key <> ''
"""  # noqa: S608 - names from model metadata; the values are bound


def _lane_statement(execution_id: str) -> Statement:
    def view(rows: Rows) -> LaneView | None:
        if not rows:
            return None
        key, state, owner, reason, position = rows[0]
        if owner == execution_id:
            return LaneView(key, "owner", state, None, owner, reason or "")
        role = "queued" if position is not None else None
        return LaneView(key, role, state, position, owner, reason or "")

    return Statement(_LANE_SQL, [execution_id, execution_id], view)  # in the order of the %s


def _parts_statements(execution_id: str) -> list[Statement]:
    return [
        Statement(_STAGES_SQL, [execution_id], lambda rows: [instance(Stage, r) for r in rows]),
        Statement(
            _PENDING_APPROVAL_SQL,
            [execution_id],
            lambda rows: instance(Hook, rows[0]) if rows else None,
        ),
        Statement(_CHILDREN_SQL, [execution_id], lambda rows: [row[0] for row in rows]),
        _lane_statement(execution_id),
    ]


def execution_parts(execution: Execution) -> ExecutionParts:
    """The stages of the execution's current run, its pending approval, its children and
    its place on its lane: one round trip, prepared statements sent together (each reads
    as the ORM reads, in a snapshot of its own unless the caller is in a transaction)."""
    return _parts_of(execution, statements_run(_parts_statements(execution.id)))


def execution_detail(execution_id: str, caller: Caller) -> tuple[Execution, ExecutionParts]:
    """The execution with its current run, and its parts (:func:`execution_parts`), if
    ``caller`` may read it (else ``Execution.DoesNotExist``): all in one round trip. The
    parts of an execution the caller may not read are read too, and dropped."""

    def execution(rows: Rows) -> Execution:
        if not rows:
            raise Execution.DoesNotExist(f"no execution {execution_id} for {caller.principal}")
        (found, run), _ = instances(rows[0], Execution, Run)
        found.current_run = run
        return found

    visible = Statement(_VISIBLE_SQL, _visible_params(execution_id, caller), execution)
    found, *parts = statements_run([visible, *_parts_statements(execution_id)])
    return found, _parts_of(found, parts)


def _parts_of(execution: Execution, found: list[Any]) -> ExecutionParts:
    stages, pending_approval, children, lane = found
    run_id = execution.current_run_id
    if run_id is None:
        stages = []
    elif any(stage.run_id != run_id for stage in stages):
        # The stages statement found the execution's current run by itself, in a snapshot
        # of its own: a retry or a continuation committed after the execution was read gave
        # it another run's. Those of the run the answer shows, then (rare: read again).
        stages = list(Stage.objects.filter(run_id=run_id).order_by("position"))
    return ExecutionParts(execution.id, stages, pending_approval, children, lane)


def execution_events_visible(
    execution_id: str, caller: Caller, *, after: int, limit: int
) -> list[OutboxEvent]:
    """The execution's events with ``sequence > after``, in order, at most ``limit``, if
    ``caller`` may read it (else ``Execution.DoesNotExist``): one round trip (the events of
    an execution the caller may not read are read too, and dropped)."""

    def visible(rows: Rows) -> None:
        if not rows[0][0]:
            raise Execution.DoesNotExist(f"no execution {execution_id} for {caller.principal}")

    _, events = statements_run(
        [
            Statement(_IS_VISIBLE_SQL, _visible_params(execution_id, caller), visible),
            Statement(
                _EVENTS_SQL,
                [execution_id, after, limit],
                lambda rows: [instance(OutboxEvent, row) for row in rows],
            ),
        ]
    )
    return events


# Whether an execution ``e`` is settled: no event will come to it unless someone acts on it
# again (a retry, a rollback, an operator's recovery of its lane). The terminal transition is
# not enough: the lane reconciler acts after it commits, in a transaction of its own, so a
# terminal owner of a lane still held has its ``lane.released`` (or ``lane.recovery_required``)
# to come, some milliseconds later (beat's tick at worst). The streams end, and answer 204,
# only on this. The lane's event commits with the lane's change, so an execution read settled
# has every event of its own committed already.
_SETTLED = f"""
    (e.status = ANY(%(terminal)s) AND NOT EXISTS (
        SELECT 1 FROM {Lane._meta.db_table} AS l
        WHERE l.owner_id = e.id AND l.state = '{LaneState.HELD.value}'
    ))
"""  # noqa: S608 - names from model metadata; the values are bound
_TERMINAL = sorted(status.value for status in TERMINAL_STATUSES)
# For the event streams' own connections (``delivery.stream``): (terminal, settled).
EXECUTION_SETTLED_SQL = f"""
    SELECT e.status = ANY(%(terminal)s), {_SETTLED} FROM {_EXECUTION} AS e
    WHERE e.id = %(execution)s
"""  # noqa: S608 - names from model metadata; the values are bound
_STREAM_START_SQL = f"""
    SELECT e.status = ANY(%(terminal)s), {_SETTLED}, e.last_sequence FROM {_EXECUTION} AS e
    WHERE e.id = %(execution)s AND {_VISIBLE_TO_CALLER}
"""  # noqa: S608 - names from model metadata; the values are bound


def execution_settled_params(execution_id: str) -> dict[str, Any]:
    """The parameters of :data:`EXECUTION_SETTLED_SQL`."""
    return {"execution": execution_id, "terminal": _TERMINAL}


@dataclass(frozen=True)
class EventsStanding:
    """Where an execution's event log stands, read in one snapshot (so that ``settled`` and
    ``last_sequence`` agree: an event committed between two reads could be missed)."""

    terminal: bool
    settled: bool
    last_sequence: int


def execution_events_standing(execution_id: str, caller: Caller) -> EventsStanding | None:
    """Whether the execution ended, whether its events are all written (settled, above),
    and its last sequence, if ``caller`` may read it (else None)."""

    def standing(rows: Rows) -> EventsStanding | None:
        return EventsStanding(bool(rows[0][0]), bool(rows[0][1]), int(rows[0][2])) if rows else None

    params = {**_visible_params(execution_id, caller), **execution_settled_params(execution_id)}
    (found,) = statements_run([Statement(_STREAM_START_SQL, params, standing)])
    return found if isinstance(found, EventsStanding) else None


def audit_entries() -> QuerySet[AuditEntry]:
    """The audit log, each entry with ``actor_name``: the name people know its actor by (a
    user's username for ``user:<pk>``, a token's name), read now (one subquery per page)."""
    return AuditEntry.objects.annotate(actor_name=principal_name("actor"))


def workflow_names() -> list[str]:
    return [workflow.name for workflow in workflows_all()]


def workflow_list() -> list[dict[str, Any]]:
    return [workflow.describe() for workflow in workflows_all()]


def execution_lane_successor(execution: Execution) -> Execution | None:
    """The newest execution accepted on ``execution``'s lane after it that can have left its
    mark there: not a dry run, not rolled back (a rollback put back what it changed), not a
    child (a child runs under its root's claim). None when none came after it.

    What acceptance asks before a succeeded execution stands in for a new request of the same
    operation (``executions.acceptance._effect_replaced``). The lane serializes its executions, so
    being accepted later means having run later. Read on the reuse path only: no index serves
    ended executions by lane, and none is needed at that rate."""
    if execution.lane_key is None:
        return None
    return (
        Execution.objects.filter(
            lane_key=execution.lane_key,
            created_at__gt=execution.created_at,
            dry_run=False,
            parent__isnull=True,
        )
        .exclude(status=ExecutionStatus.ROLLED_BACK)
        .order_by("-created_at")
        .only("id", "lane_token", "status")
        .first()
    )
