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

from alfred.metrics import PROVIDER_BUDGET_WAIT
from providers.budgets import Rate
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
local tat = now + tonumber(ARGV[1]) + interval * (burst - 1)
if tonumber(redis.call('GET', KEYS[1]) or '0') < tat then
  redis.call('SET', KEYS[1], tat, 'PX', math.floor((tat - now) / 1000) + 1000)
end
return 0
"""


class RedisBudget:
    """The budgets of ``rates`` (providers without one draw nothing) on the Redis at ``url``."""

    def __init__(self, url: str, rates: Mapping[str, Rate], *, longest: float) -> None:
        self._redis = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._draw: Any = self._redis.register_script(_DRAW)
        self._close: Any = self._redis.register_script(_CLOSE)
        self._rates = dict(rates)
        self._longest = longest

    @staticmethod
    def key(provider: str, account: str) -> str:
        return f"alfred:budget:{provider}:{account}"

    def draw(self, provider: str, account: str, operation: str) -> float:
        rate = self._rates.get(provider)
        if rate is None:
            return 0.0
        interval = int(1_000_000 / rate.per_second)
        try:
            waited = int(
                self._draw(
                    keys=[self.key(provider, account)],
                    args=[interval, rate.burst, int(self._longest * 1_000_000)],
                )
            )
        except redis.RedisError as exc:
            log.warning(
                "the %s budget did not answer (%s): this request goes unbudgeted", provider, exc
            )
            return 0.0
        if waited < 0:
            PROVIDER_BUDGET_WAIT.labels(provider).observe(0.0)
            raise Throttled(
                f"{operation}: the rate budget for {account} is spent for {-waited / 1e6:.1f} s",
                provider=provider,
                code="BudgetSpent",
                details={"retry_after_seconds": -waited / 1e6},
            )
        seconds = waited / 1e6
        if seconds > 0:
            span = trace.get_current_span()
            span.add_event(
                "provider.budget",
                {
                    "alfred.provider": provider,
                    "alfred.operation": operation,
                    "alfred.wait_s": seconds,
                },
            )
            time.sleep(seconds)
        PROVIDER_BUDGET_WAIT.labels(provider).observe(seconds)
        return seconds

    def close(self, provider: str, account: str, seconds: float) -> None:
        rate = self._rates.get(provider)
        if rate is None:
            return
        interval = int(1_000_000 / rate.per_second)
        try:
            self._close(
                keys=[self.key(provider, account)],
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
