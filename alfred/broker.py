"""The broker's Redis, as redis-py names it: the cache, the beat leader's lease and the tests
reach the same Redis Celery's messages travel on."""

from __future__ import annotations

from urllib.parse import parse_qsl


def redis_url_of(broker: str) -> str | None:
    """``broker`` (a kombu URL) as redis-py's URL for the same Redis, or None when it is not
    plain Redis: kombu's ``redis+socket://PATH?virtual_host=N`` is ``unix://PATH?db=N``."""
    if broker.startswith("redis+socket://"):
        path, _, query = broker.removeprefix("redis+socket://").partition("?")
        db = dict(parse_qsl(query)).get("virtual_host", "0")
        return f"unix://{path}?db={db}"
    if broker.startswith("redis://") and not {"?", ";"} & set(broker):
        return broker  # (kombu's options come after "?", failover brokers after ";")
    return None
