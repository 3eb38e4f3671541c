"""Who is told of each call to a provider: the application registers observers (metrics,
traces) at start; the adapters report every attempt on the wire with its outcome and how long
it took. Providers know nothing of what an observer does with it (they import nothing of
Alfred's), and an observer that raises never fails a provider call."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# (provider, operation, outcome, seconds). ``outcome``: ``ok``, or the kind of failure:
# ``throttled``, ``transient`` (a 5xx, a connection that failed), ``conflict``, ``not_found``,
# ``rejected`` (any other 4xx).
Observer = Callable[[str, str, str, float], None]

_observers: list[Observer] = []


def observer_add(observer: Observer) -> None:
    if observer not in _observers:
        _observers.append(observer)


def call_observed(provider: str, operation: str, outcome: str, seconds: float) -> None:
    for observer in _observers:
        try:
            observer(provider, operation, outcome, seconds)
        except Exception:
            log.exception("provider call observer %r failed", observer)


def outcome_of_status(status: int) -> str:
    """The outcome of an HTTP answer, by its status alone."""
    if status < 400:
        return "ok"
    if status == 429:
        return "throttled"
    if status >= 500:
        return "transient"
    return {404: "not_found", 409: "conflict"}.get(status, "rejected")
