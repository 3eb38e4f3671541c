"""The lanes' port to the executions they serialize: what a lane change returns, and the
interface through which it reaches the executions it names.

Lanes write lanes. What a change means for the executions a lane names — the outbox events
(``lane.released``, ``lane.acquired``, ``lane.recovery_required``), starting the new owner's
run, the operator's audit entry — and the execution rows a lane writer must lock first belong
to the executions side. So the lanes services return what changed (the frozen dataclasses
below) and an outermost lanes service — the reconciler, ``lane_recover`` — hands that change
to :class:`LaneEffects` before its transaction commits.

The dependency points one way at import time, executions → lanes: ``ExecutionsConfig.ready``
installs the executions side's implementation once (:func:`lane_effects_install`), and lanes
reach it through :func:`lane_effects`, never by importing executions.

What every implementation keeps:
- it runs in the caller's transaction and never commits: an event travels in the transaction
  that changed the lane (docs/architecture.md, "Events"); work for a worker is published on commit;
- ``executions_lock`` is the first half of the lock order (docs/architecture.md, "Invariants"):
execution rows, in id
  order, before the lane row that ``lanes.services.lane_lock`` takes next.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class LaneHandedOver:
    """``key`` left ``previous`` (None: it was free) for ``owner``, whose run is to start —
    or, ``owner`` None, for nobody: the lane is free. ``version`` is the lane's after."""

    key: str
    version: int
    reason: str
    previous: str | None
    owner: str | None


@dataclass(frozen=True)
class LaneBlocked:
    """``key``, held by ``owner``, is blocked for an operator (recovery_required)."""

    key: str
    version: int
    reason: str
    owner: str | None


@dataclass(frozen=True)
class LaneRecovered:
    """An operator recovered ``key``, owned by ``expected_owner`` when they looked. Either the
    owner, active again, got its lane back and its run starts again (``resumed``), or the
    lane was handed over (``handed_over``)."""

    key: str
    actor: str
    reason: str
    expected_owner: str | None
    resumed: str | None = None
    handed_over: LaneHandedOver | None = None

    @property
    def owner(self) -> str | None:
        """Who holds the lane now (None: it is free)."""
        if self.resumed is not None:
            return self.resumed
        return self.handed_over.owner if self.handed_over is not None else None


LaneChange = LaneHandedOver | LaneBlocked | LaneRecovered


@dataclass(frozen=True)
class ExecutionStanding:
    """What a lane needs to know of an execution it names."""

    id: str
    status: str
    active: bool  # not terminal: it may run (again)
    started: bool  # past queued: it may be changing infrastructure right now


class LaneEffects(Protocol):
    @property
    def active_statuses(self) -> frozenset[str]:
        """The statuses of an execution that may still run: a queued one in another status has
        ended and is not eligible for a lane (the queue's rows join their executions)."""
        ...

    def executions_lock(self, ids: Collection[str], *, skip_locked: bool) -> list[str]:
        """Lock the rows of the executions ``ids``, in id order, in the caller's transaction;
        ``skip_locked``: leave out those another transaction holds. Returns the ids locked
        (an id of no execution locks nothing)."""
        ...

    def execution_standing(self, execution_id: str) -> ExecutionStanding | None:
        """``execution_id`` as it stands (its row locked by the caller), or None if absent."""
        ...

    def lane_changed(self, change: LaneChange) -> None:
        """Make ``change`` known to the executions it names: events now, runs on commit."""
        ...

    def execution_admin_url(self, execution_id: str) -> str:
        """Where the admin shows ``execution_id`` (a lane's page links its owner there)."""
        ...


_installed: LaneEffects | None = None


def lane_effects_install(effects: LaneEffects) -> None:
    """Called once, by the executions app when it is ready."""
    global _installed
    _installed = effects


def lane_effects() -> LaneEffects:
    if _installed is None:
        raise ImproperlyConfigured(
            "no LaneEffects installed: the executions app installs them when it is ready"
        )
    return _installed
