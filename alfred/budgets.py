"""The providers' rate budgets on Redis (``providers.budgets``; docs/providers.md, "Rate
budgets"): one budget per provider and account, shared by every process that reaches the
broker's Redis — web, workers, beat's tasks, commands.

Each budget is a generic cell rate algorithm (GCRA) kept in one Redis key: the theoretical
arrival time of the next request. A draw is one script, atomic in Redis, on Redis's clock (one
clock for every process): it reserves the next slot and answers how long to wait for it, so
the caller sleeps exactly that long and goes, without polling and in the order drawn. A burst
of up to one second's worth goes at once; beyond it requests are spaced ``1/rate`` apart. A
provider's own word (:meth:`RedisBudget.close`: GitHub's reset time, a ``Retry-After``) moves
the budget past that moment for everyone.

A draw that would wait longer than ``ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS`` reserves
nothing and raises ``Throttled`` (``retry_after``): the engine's durable retry waits without
holding a worker. When Redis does not answer, requests go unbudgeted (a warning is logged):
the providers' own throttling and the adapters' retries remain, as before budgets.

Waits are the histogram ``alfred_provider_budget_wait_seconds{provider}`` and, inside a traced
step, a ``provider.budget`` event on its span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import redis
from opentelemetry import trace

from alfred.metrics import BUDGET_REFUSALS, PROVIDER_BUDGET_WAIT
from providers.budgets import BUDGET_SPENT, Rate, budget_patience
from providers.errors import Throttled

log = logging.getLogger(__name__)

# KEYS[1]: the budget's theoretical arrival time (µs, Redis's clock). ARGV: the interval
# between requests (µs), the burst (requests), the longest wait allowed (µs). Answers the
# wait (µs, 0: go now), or -wait when it is longer than allowed (nothing reserved).
_DRAW = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval, burst, longest = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat + interval - interval * burst - now
if wait < 0 then wait = 0 end
if wait > longest then return -wait end
local next_tat = tat + interval
redis.call('SET', KEYS[1], next_tat, 'PX', math.floor((next_tat - now) / 1000) + 1000)
return wait
"""
# KEYS[1] as above; ARGV[1]: no request before now + this (µs); ARGV[2], ARGV[3]: the
# interval and the burst, so that the next draw waits exactly until then (and no burst follows).
_CLOSE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local until_ = now + tonumber(ARGV[1])
local tat = until_ + interval * (burst - 1)
if tonumber(redis.call('GET', KEYS[1]) or '0') < tat then
  redis.call('SET', KEYS[1], tat, 'PX', math.floor((tat - now) / 1000) + 1000)
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < until_ then
  redis.call('SET', KEYS[2], until_, 'PX', math.floor(tonumber(ARGV[1]) / 1000) + 1000)
end
return 0
"""
# KEYS[1]: the budget's closed-until (µs). Answers how long it stays closed (µs, 0: open):
# a request that waited for its slot looks again before it goes, since a close may have come
# while it slept.
_CLOSED = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local until_ = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ > now then return until_ - now end
return 0
"""
# After Redis failed to answer, requests go unbudgeted this long before it is asked again:
# each request does not pay a connect timeout, and the log says so once.
BREAKER_SECONDS = 10.0


class RedisBudget:
    """The budgets of ``rates`` (providers without one draw nothing) on the Redis at ``url``."""

    def __init__(self, url: str, rates: Mapping[str, Rate], *, longest: float) -> None:
        self._redis = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._draw: Any = self._redis.register_script(_DRAW)
        self._close: Any = self._redis.register_script(_CLOSE)
        self._closed: Any = self._redis.register_script(_CLOSED)
        self._rates = dict(rates)
        self._longest = longest
        self._unanswered_until = 0.0  # the breaker: monotonic time until Redis is tried again

    @staticmethod
    def key(provider: str, account: str) -> str:
        return f"alfred:budget:{provider}:{account}"

    def draw(self, provider: str, account: str, operation: str) -> float:
        rate = self._rates.get(provider)
        if rate is None or time.monotonic() < self._unanswered_until:
            return 0.0
        interval = int(1_000_000 / rate.per_second)
        longest = 3600.0 if budget_patience() else self._longest
        key = self.key(provider, account)
        try:
            waited = int(
                self._draw(keys=[key], args=[interval, rate.burst, int(longest * 1_000_000)])
            )
        except redis.RedisError as exc:
            self._unanswered(provider, exc)
            return 0.0
        if waited < 0:
            raise self._refused(provider, operation, -waited / 1e6)
        seconds = waited / 1e6
        if seconds > 0:
            span = trace.get_current_span()
            said = {"alfred.provider": provider, "alfred.operation": operation}
            span.add_event("provider.budget", {**said, "alfred.wait_s": seconds})
            time.sleep(seconds)
            seconds += self._still_closed(provider, operation, key, longest - seconds)
        PROVIDER_BUDGET_WAIT.labels(provider).observe(seconds)
        return seconds

    def _still_closed(self, provider: str, operation: str, key: str, patience: float) -> float:
        """A close that came while this request slept for its slot holds it too: it sleeps
        until the budget opens (the seconds more), or is refused past ``patience``."""
        try:
            closed = int(self._closed(keys=[f"{key}:closed"])) / 1e6
        except redis.RedisError as exc:
            self._unanswered(provider, exc)
            return 0.0
        if closed <= 0:
            return 0.0
        if closed > patience:
            raise self._refused(provider, operation, closed)
        time.sleep(closed)
        return closed

    @staticmethod
    def _refused(provider: str, operation: str, seconds: float) -> Throttled:
        BUDGET_REFUSALS.labels(provider).inc()
        return Throttled(
            f"{operation}: the rate budget is spent for {seconds:.1f} s",
            provider=provider,
            code=BUDGET_SPENT,
            details={"retry_after_seconds": seconds},
        )

    def _unanswered(self, provider: str, exc: Exception) -> None:
        self._unanswered_until = time.monotonic() + BREAKER_SECONDS
        log.warning(
            "the %s budget did not answer (%s): requests go unbudgeted for %.0f s",
            provider,
            exc,
            BREAKER_SECONDS,
        )

    def close(self, provider: str, account: str, seconds: float) -> None:
        rate = self._rates.get(provider)
        if rate is None:
            return
        interval = int(1_000_000 / rate.per_second)
        key = self.key(provider, account)
        try:
            self._close(
                keys=[key, f"{key}:closed"],
                args=[int(seconds * 1_000_000), interval, rate.burst],
            )
        except redis.RedisError as exc:
            log.warning("the %s budget did not answer (%s): not closed", provider, exc)


def budget_from_settings() -> RedisBudget | None:
    """The budgets ``ALFRED_PROVIDER_BUDGETS`` names, on the cache's Redis (None: off)."""
    from django.conf import settings  # the kernel's settings, read when the app is ready

    if not settings.ALFRED_PROVIDER_BUDGETS:
        return None
    return RedisBudget(
        str(settings.CACHES["default"]["LOCATION"]),
        settings.ALFRED_PROVIDER_BUDGETS,
        longest=settings.ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS,
    )
