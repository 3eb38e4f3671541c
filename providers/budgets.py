"""Rate budgets: every request to a provider draws from a budget per provider and account that
all of Alfred's processes share (docs/providers.md, "Rate budgets").

AWS counts requests per account (Route53: five a second, whoever sends them), GitHub per token.
A worker that only backs off when refused shares nothing with the others: fifty executions at
once, or the drift watch reading everything, trip the limit for everyone and every one of them
retries. So each adapter asks :func:`budget_draw` before each request on the wire (each retry
too), and goes when it answers; the budget is kept where every process sees it (the kernel
installs one on Redis at start: ``alfred.budgets``). Without one installed, nothing waits.

A provider's own word wins over the budget: GitHub's ``X-RateLimit-Remaining: 0`` or a
``Retry-After`` (its secondary limits, a 429) closes the budget until then, for every process
(:func:`budget_close`).

A draw that would wait longer than the budget allows (``Throttled``, with ``retry_after``)
refuses instead: the engine's durable retry waits it out without holding a worker.

Providers import nothing of Alfred's: the budget is a port, filled in at start.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


class Budget(Protocol):
    def draw(self, provider: str, account: str, operation: str) -> float:
        """Wait until ``provider``'s budget for ``account`` allows one more request, and take
        it; the seconds waited. Raises ``Throttled`` rather than wait past its limit."""
        ...

    def close(self, provider: str, account: str, seconds: float) -> None:
        """No request of ``provider`` for ``account`` before ``seconds`` from now."""
        ...


@dataclass(frozen=True)
class Rate:
    per_second: float
    burst: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``5/s``, ``300/min``, ``5000/h``; ``/s`` when no unit is given."""
        count, _, unit = text.strip().partition("/")
        seconds = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hour": 3600}[unit]
        per_second = float(count) / seconds
        if per_second <= 0:
            raise ValueError(text)
        return cls(per_second, max(1, int(per_second)))


def budgets_parse(text: str) -> dict[str, Rate]:
    """``aws.route53=4/s,github=10/s``: a rate per provider (the adapters' names,
    :data:`PROVIDERS`). Raises ``ValueError`` saying what is wrong."""
    rates: dict[str, Rate] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        provider, _, rate = (part.strip() for part in item.partition("="))
        if provider not in PROVIDERS:
            raise ValueError(f"{provider!r} is no provider: one of {', '.join(sorted(PROVIDERS))}")
        try:
            rates[provider] = Rate.parse(rate.replace(" ", ""))
        except (KeyError, ValueError):
            raise ValueError(f"{item!r}: a rate is N/s, N/min or N/h") from None
    return rates


# The code of a draw refused (``Throttled``): nothing reached the provider.
BUDGET_SPENT = "BudgetSpent"
# The adapters' names of the providers a budget may be set for.
PROVIDERS = frozenset({"aws.route53", "aws.acm", "aws.lambda", "github", "argocd"})

_installed: Budget | None = None
_patient: contextvars.ContextVar[bool] = contextvars.ContextVar("budget_patient", default=False)


@contextmanager
def budget_patient() -> Iterator[None]:
    """Draws inside wait their turn however long it is, never refused: the reads that settle
    an ambiguous mutation (a lost answer), which a refusal would turn into "outcome unknown"."""
    token = _patient.set(True)
    try:
        yield
    finally:
        _patient.reset(token)


def budget_patience() -> bool:
    """Whether the current draw may not be refused (:func:`budget_patient`)."""
    return _patient.get()


def budget_install(budget: Budget | None) -> None:
    global _installed
    _installed = budget


def budget_draw(provider: str, account: str, operation: str) -> float:
    """Draw one request from the installed budget (none: no wait)."""
    return 0.0 if _installed is None else _installed.draw(provider, account, operation)


def budget_close(provider: str, account: str, seconds: float) -> None:
    """The provider said to wait ``seconds``: close its budget for everyone until then."""
    if _installed is not None and seconds > 0:
        _installed.close(provider, account, seconds)


def budget_hook(provider: str, account: str) -> Callable[..., None]:
    """A botocore ``before-send`` handler that draws for each request of a client."""

    def draw(request: object, **kwargs: object) -> None:
        context = getattr(request, "context", {}) or {}
        budget_draw(provider, account, str(context.get("alfred_operation", "?")))

    return draw
