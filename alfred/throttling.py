"""Rate limits on the API's mutations, per principal: DRF's scoped throttle, counted in Redis.

A view opts in with ``throttle_scope`` (``trigger``: asking for an execution; ``control``:
cancel, retry, lane recovery); views without one are never throttled. The budget belongs to
the caller's principal, not to a token row, so a rotated token (``token_rotate`` keeps the
principal) spends what its predecessor left, and one caller's flood never spends another's.
Rates come from ``settings.ALFRED_THROTTLE_RATES`` (``ALFRED_THROTTLE_TRIGGER``,
``ALFRED_THROTTLE_CONTROL``), read per request.

The counters live in the ``default`` cache, the broker's Redis, so every web process sees the
same history. DRF's algorithm reads the history and writes it back: concurrent requests of
one principal may each see the same history, so a burst can pass the limit by about the
number of requests in flight. That is a rate limit's precision, not a guarantee anyone relies
on: acceptance is idempotent and every control checks its state under a row lock.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import ScopedRateThrottle

from alfred.principals import caller_of

log = logging.getLogger(__name__)

# What a cache that is down or slow raises (redis-py wraps socket errors, mostly).
CACHE_ERRORS = (RedisError, OSError)


def client_address(request: HttpRequest) -> str:
    """The client's address: the connection's, or with ``ALFRED_TRUST_PROXY_HEADERS`` the
    rightmost ``X-Forwarded-For`` entry, the one the trusted proxy appended (entries left of it
    are whatever the client sent)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if settings.ALFRED_TRUST_PROXY_HEADERS and forwarded.strip(", "):
        return forwarded.rstrip(", ").rsplit(",", 1)[-1].strip()
    return str(request.META.get("REMOTE_ADDR") or "unknown")


class PrincipalScopedThrottle(ScopedRateThrottle):
    """``ScopedRateThrottle`` keyed by the caller's stable principal id.

    It fails open: when the cache errors the request goes through and a warning is logged.
    The throttle protects capacity, not correctness (PostgreSQL holds every guarantee), so a
    Redis outage should lose the limit for its duration, not turn every trigger and control
    into a 500. Anything else (a misconfigured scope) still raises.
    """

    cache_format = "throttle:%(scope)s:%(ident)s"

    def get_rate(self) -> str | None:
        # DRF copies THROTTLE_RATES at class definition; settings read here follow overrides.
        rates: dict[str, str | None] = settings.ALFRED_THROTTLE_RATES
        try:
            return rates[str(self.scope)]
        except KeyError:
            raise ImproperlyConfigured(f"ALFRED_THROTTLE_RATES has no {self.scope!r}") from None

    def get_cache_key(self, request: Request, view: Any) -> str:
        caller = caller_of(request.user)
        # Throttled views let principals only; an address is the fallback, never a shared key.
        ident = caller.principal if caller is not None else f"addr:{client_address(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS as exc:
            log.warning(
                "throttle %s not applied: the cache failed (%s: %s)",
                getattr(view, self.scope_attr, None),
                type(exc).__name__,
                exc,
            )
            return True
