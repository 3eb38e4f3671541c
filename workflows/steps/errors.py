"""Provider errors → engine errors, in one place (docs/workflows.md).

=================  ==================================================================
provider           engine
=================  ==================================================================
Transient          ``RetryableError`` (``retry_after`` when the provider said so)
Throttled          ``RetryableError`` (likewise)
Conflict           ``FatalError`` with the provider's code and message
Rejected           ``FatalError`` (in ``plan``: ``ReadinessFailure`` when a precondition)
NotFound           ``FatalError`` (in ``plan``: ``ReadinessFailure`` when a precondition)
Unknown            ``FatalError`` ``provider_outcome_unknown``: the outcome of a mutation
                   cannot be proven, and the lane reconciler keeps the lane for an operator
=================  ==================================================================

A step function says which of its failures are preconditions by naming a readiness code:
``with provider_errors(readiness="zone_missing")`` turns NotFound and Rejected into a
``ReadinessFailure`` with that code and one failed check; everything else maps as above.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from executions.runtime.errors import FatalError, ReadinessFailure, RetryableError
from providers.errors import (
    Conflict,
    NotFound,
    ProviderError,
    Rejected,
    Transient,
    Unknown,
)

PROVIDER_OUTCOME_UNKNOWN = "provider_outcome_unknown"


def engine_error(
    exc: ProviderError, *, readiness: str | None = None, check: str | None = None
) -> Exception:
    """The engine's error for ``exc``. ``readiness``: the code of the precondition this call
    checks (plan only); ``check``: the name of that check (default: the provider's)."""
    provider: dict[str, Any] = {"provider": exc.as_dict()}
    if isinstance(exc, Transient):
        # Route53's NotApplied names the in-flight window it MUST NOT be retried within;
        # GitHub and ArgoCD their Retry-After.
        retry_after = exc.details.get("retry_after_seconds", exc.details.get("retry_after"))
        return RetryableError(
            str(exc),
            code="provider_transient",
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
            **provider,
        )
    if isinstance(exc, Unknown):
        return FatalError(str(exc), code=PROVIDER_OUTCOME_UNKNOWN, **provider)
    if readiness is not None and isinstance(exc, NotFound | Rejected):
        return ReadinessFailure(
            str(exc),
            code=readiness,
            checks=[{"name": check or exc.provider, "ok": False, "detail": exc.message[:500]}],
        )
    if isinstance(exc, Conflict | NotFound | Rejected):
        return FatalError(str(exc), code=_code(exc), **provider)
    return FatalError(str(exc), code="provider_error", **provider)


def _code(exc: ProviderError) -> str:
    return {Conflict: "provider_conflict", NotFound: "provider_not_found"}.get(
        type(exc), "provider_rejected"
    )


@contextmanager
def provider_errors(*, readiness: str | None = None, check: str | None = None) -> Iterator[None]:
    """Run provider calls, raising the engine's error for a provider's (see the table)."""
    try:
        yield
    except ProviderError as exc:
        raise engine_error(exc, readiness=readiness, check=check) from exc
