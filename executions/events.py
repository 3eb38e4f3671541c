"""The public event catalogue: every event type an integrator receives — by polling, Server-Sent
Events or webhooks — declared once, with when it happens (docs/contract.md, "Events", lists
the same table; ``tests/unit/test_event_catalogue.py`` holds the two together).

An event is part of the contract: integrators branch on its type, webhook endpoints filter by
it, and its sequence is gapless per execution. What only helps an operator understand the
engine (a stage message refused because another worker holds the run, a lease taken over)
is a diagnostic: it goes to the logs and the metrics (``alfred.metrics``), never to the
outbox, so it reaches no integrator and takes no sequence.

Webhook endpoints may name these types in ``event_types`` (``PUBLIC_EVENT_TYPES`` is the
list to validate them against).
"""

# No ``from __future__ import annotations`` here: a TypedDict reads ``NotRequired`` from its
# live annotations (Python 3.11), which a postponed one would hide.
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, NotRequired, TypedDict

from executions.models import TERMINAL_STATUSES


class EventType(StrEnum):
    """Every public event type. Emitters name one of these (``executions.outbox`` refuses any
    other); a member is its string, so stored rows and the wire are unchanged."""

    ACCEPTED = "execution.accepted"
    CONTINUED = "execution.continued"
    RETRIED = "execution.retried"
    STARTED = "execution.started"
    START_FAILED = "execution.start_failed"
    RUNNING = "execution.running"
    WAITING = "execution.waiting"
    PAUSED = "execution.paused"
    STAGE_STARTED = "stage.started"
    STAGE_SUCCEEDED = "stage.succeeded"
    STAGE_WAITING = "stage.waiting"
    STAGE_FAILED = "stage.failed"
    HOOK_SIGNALLED = "hook.signalled"
    APPROVAL_RECORDED = "approval.recorded"
    HELD = "execution.held"
    LET_THROUGH = "execution.let_through"
    DRIFTED = "execution.drifted"
    DRIFT_ENDED = "execution.drift_ended"
    CANCEL_REQUESTED = "execution.cancel_requested"
    ROLLBACK_REQUESTED = "execution.rollback_requested"
    ASSISTANCE = "execution.assistance"
    SUCCEEDED = "execution.succeeded"
    FAILED = "execution.failed"
    CANCELED = "execution.canceled"
    ROLLED_BACK = "execution.rolled_back"
    LANE_ACQUIRED = "lane.acquired"
    LANE_QUEUED = "lane.queued"
    LANE_RELEASED = "lane.released"
    LANE_RECOVERY_REQUIRED = "lane.recovery_required"


# -- the payloads ------------------------------------------------------------------------------


class LanePlace(TypedDict):
    """Where an execution stands on its lane when it asked: ``role`` owner or queued."""

    key: str
    role: str
    position: NotRequired[int | None]


class Accepted(TypedDict):
    workflow: str
    run: str
    predecessor: str | None  # the execution it repeats (asked for again after success)
    parent: str | None  # the execution that started it as a child
    lane: NotRequired[LanePlace | None]


class RunAgain(TypedDict):
    """A new run on the execution: a continuation, a retry (``by``: who asked)."""

    run: str
    from_status: str
    lane: LanePlace | None
    by: NotRequired[str]


class StartStateChanged(TypedDict):
    run: str
    worker: NotRequired[str]
    fence: NotRequired[int]
    error: NotRequired[dict[str, Any]]


class StatusChanged(TypedDict):
    """``approval`` (paused): the checkpoint's summary, plan, hash, expiry and links."""

    run: str
    stage: str
    reason: NotRequired[str]
    approval: NotRequired[dict[str, Any]]


class StageChanged(TypedDict):
    run: str
    stage: str
    fence: int
    worker: NotRequired[str]  # started
    reason: NotRequired[str]  # waiting: what it waits for
    error: NotRequired[dict[str, Any]]  # failed


class HookSignalled(TypedDict):
    hook: str
    name: str
    by: str


class ApprovalRecorded(TypedDict):
    """An operator's approval of the plan ``plan_hash``: ``approvals`` of the ``required``
    its policy ``rule`` asks (the last one answers the hook: ``hook.signalled`` follows)."""

    hook: str
    plan_hash: str
    by: str
    approvals: int
    required: int
    rule: str


class Held(TypedDict):
    """The run waits before its first mutation: the change freeze ``freeze`` is in force
    (until ``ends_at``; null: until an operator ends it)."""

    freeze: str
    reason: str
    ends_at: str | None
    run: str


class LetThrough(TypedDict):
    """An operator let the execution through the freeze ``freeze``."""

    freeze: str
    by: str
    reason: str


class CancelRequested(TypedDict):
    run: str
    by: str
    reason: str | None


class Drifted(TypedDict):
    """What the drift watch found not as the succeeded execution left it (``findings``: each
    ``what``, ``expected``, ``found``); sent again, same ``drift``, when what it finds changes."""

    drift: str
    findings: list[dict[str, Any]]
    first_seen_at: str
    seen_at: str


class DriftEnded(TypedDict):
    """``status``: resolved (back in place), accepted (an operator's word, ``by``) or
    superseded (``replaced_by``: the execution that did it again; or no longer in force)."""

    drift: str
    status: str
    by: str
    reason: str
    replaced_by: str | None


class RollbackRequested(TypedDict):
    run: str
    from_status: str
    by: str  # a principal, or execution:<root> for a child its root's rollback undoes


class Ended(TypedDict):
    run: str
    result: Any
    error: dict[str, Any] | None


class LaneTaken(TypedDict):
    """The execution's place on ``lane``: ``role`` owner (acquired) or queued, its
    ``position`` in the queue at acceptance, whom it follows on a handover (``after``).
    ``key`` repeats ``lane`` (the name the acceptance's ``lane`` object uses)."""

    lane: str
    key: str
    role: str
    position: NotRequired[int | None]
    after: NotRequired[str | None]


class LaneReleased(TypedDict):
    lane: str
    reason: str
    next: str | None  # the execution it went to; None: the lane is free


class LaneBlocked(TypedDict):
    lane: str
    reason: str


@dataclass(frozen=True)
class EventSpec:
    """When an event happens and its payload's type. ``open``: the payload is what a stage
    wrote (an assistance item: ``kind`` and the stage's own fields)."""

    when: str
    payload: type
    open: bool = False


class Assistance(TypedDict):
    kind: str


EVENTS: Final[Mapping[EventType, EventSpec]] = MappingProxyType(
    {
        EventType.ACCEPTED: EventSpec("the request was recorded (sequence 1)", Accepted),
        EventType.CONTINUED: EventSpec("a new run on the execution (a continuation)", RunAgain),
        EventType.RETRIED: EventSpec("a new run on the execution (a retry)", RunAgain),
        EventType.STARTED: EventSpec(
            "a worker bound the run (start state `started`)", StartStateChanged
        ),
        EventType.START_FAILED: EventSpec(
            "the work could not be published (the scan tries again)", StartStateChanged
        ),
        EventType.RUNNING: EventSpec("the execution's status changed to running", StatusChanged),
        EventType.WAITING: EventSpec("the execution's status changed to waiting", StatusChanged),
        EventType.PAUSED: EventSpec(
            "the execution's status changed to paused (an approval is asked)", StatusChanged
        ),
        EventType.STAGE_STARTED: EventSpec("a stage of the current run started", StageChanged),
        EventType.STAGE_SUCCEEDED: EventSpec("a stage of the current run succeeded", StageChanged),
        EventType.STAGE_WAITING: EventSpec(
            "a stage of the current run waits (a timer, a hook, a child)", StageChanged
        ),
        EventType.STAGE_FAILED: EventSpec("a stage of the current run failed", StageChanged),
        EventType.HOOK_SIGNALLED: EventSpec(
            "a hook the execution waited for was answered", HookSignalled
        ),
        EventType.APPROVAL_RECORDED: EventSpec(
            "an operator approved the pending plan (`approvals` of `required`)", ApprovalRecorded
        ),
        EventType.HELD: EventSpec(
            "a change freeze holds the execution before its first mutation (`freeze`)", Held
        ),
        EventType.LET_THROUGH: EventSpec(
            "an operator let the execution through a change freeze", LetThrough
        ),
        EventType.DRIFTED: EventSpec(
            "the drift watch found the succeeded execution's work changed (`findings`)", Drifted
        ),
        EventType.DRIFT_ENDED: EventSpec(
            "its drift ended: back in place, accepted, or superseded (`status`)", DriftEnded
        ),
        EventType.CANCEL_REQUESTED: EventSpec(
            "cancel of a running execution (at the next step)", CancelRequested
        ),
        EventType.ROLLBACK_REQUESTED: EventSpec(
            "an operator asked for a rollback", RollbackRequested
        ),
        EventType.ASSISTANCE: EventSpec(
            "a stage asked a person for something Alfred does not do", Assistance, open=True
        ),
        EventType.SUCCEEDED: EventSpec("the terminal transition (`payload.result`)", Ended),
        EventType.FAILED: EventSpec("the terminal transition (`payload.error`)", Ended),
        EventType.CANCELED: EventSpec("the terminal transition", Ended),
        EventType.ROLLED_BACK: EventSpec("the terminal transition", Ended),
        EventType.LANE_ACQUIRED: EventSpec("the execution took its lane", LaneTaken),
        EventType.LANE_QUEUED: EventSpec("the execution queued for its lane", LaneTaken),
        EventType.LANE_RELEASED: EventSpec(
            "its lane went to the next in line (or became free)", LaneReleased
        ),
        EventType.LANE_RECOVERY_REQUIRED: EventSpec(
            "its lane is blocked for an operator (`reason`)", LaneBlocked
        ),
    }
)
# type -> when, as the webhook endpoints' catalogue and the admin list it.
EVENT_CATALOGUE: Final[Mapping[str, str]] = MappingProxyType(
    {str(type_): spec.when for type_, spec in EVENTS.items()}
)
PUBLIC_EVENT_TYPES: Final[frozenset[str]] = frozenset(EVENT_CATALOGUE)


def payload_fields(type_: EventType) -> tuple[frozenset[str], frozenset[str]]:
    """The payload's required and optional keys."""
    payload = EVENTS[type_].payload
    required: frozenset[str] = payload.__required_keys__  # type: ignore[attr-defined]
    optional: frozenset[str] = payload.__optional_keys__  # type: ignore[attr-defined]
    return required, optional


def payload_problem(type_: str, payload: Mapping[str, Any]) -> str | None:
    """What is wrong with an event of ``type_`` carrying ``payload``, or None: a type not in
    the catalogue, a key its payload type does not declare, or one it requires missing."""
    try:
        known = EventType(type_)
    except ValueError:
        return f"{type_!r} is not a public event type (executions.events)"
    required, optional = payload_fields(known)
    missing = required - payload.keys()
    extra = set() if EVENTS[known].open else payload.keys() - required - optional
    if missing or extra:
        return f"{known} payload: missing {sorted(missing)}, undeclared {sorted(extra)}"
    return None


# The terminal transitions: after one, an execution's events go on only with what its lane
# does about it (``lane.released`` or ``lane.recovery_required``, written by the reconciler
# in a transaction of its own), with what the drift watch finds of a succeeded one
# (``execution.drifted``, ``execution.drift_ended``) or with someone acting on it again (a
# retry, a rollback).
TERMINAL_EVENT_TYPES: Final[frozenset[str]] = frozenset(
    f"execution.{status.value}" for status in TERMINAL_STATUSES
)
