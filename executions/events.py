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

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from executions.models import TERMINAL_STATUSES

EVENT_CATALOGUE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "execution.accepted": "the request was recorded (sequence 1)",
        "execution.continued": "a new run on the execution (a continuation)",
        "execution.retried": "a new run on the execution (a retry)",
        "execution.started": "a worker bound the run (start state `started`)",
        "execution.start_failed": "the work could not be published (the scan tries again)",
        "execution.running": "the execution's status changed to running",
        "execution.waiting": "the execution's status changed to waiting",
        "execution.paused": "the execution's status changed to paused (an approval is asked)",
        "stage.started": "a stage of the current run started",
        "stage.succeeded": "a stage of the current run succeeded",
        "stage.waiting": "a stage of the current run waits (a timer, a hook, a child)",
        "stage.failed": "a stage of the current run failed",
        "hook.signalled": "a hook the execution waited for was answered",
        "execution.cancel_requested": "cancel of a running execution (at the next step)",
        "execution.rollback_requested": "an operator asked for a rollback",
        "execution.assistance": "a stage asked a person for something Alfred does not do",
        "execution.succeeded": "the terminal transition (`payload.result`)",
        "execution.failed": "the terminal transition (`payload.error`)",
        "execution.canceled": "the terminal transition",
        "execution.rolled_back": "the terminal transition",
        "lane.acquired": "the execution took its lane",
        "lane.queued": "the execution queued for its lane",
        "lane.released": "its lane went to the next in line (or became free)",
        "lane.recovery_required": "its lane is blocked for an operator (`reason`)",
    }
)
PUBLIC_EVENT_TYPES: Final[frozenset[str]] = frozenset(EVENT_CATALOGUE)

# The terminal transitions: after one, an execution's events go on only with what its lane
# does about it (``lane.released`` or ``lane.recovery_required``, written by the reconciler
# in a transaction of its own) or with someone acting on it again (a retry, a rollback).
TERMINAL_EVENT_TYPES: Final[frozenset[str]] = frozenset(
    f"execution.{status.value}" for status in TERMINAL_STATUSES
)
