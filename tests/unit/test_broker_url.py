"""Which broker URLs name a plain Redis that redis-py can reach too (``alfred.broker``)."""

from __future__ import annotations

import pytest

from alfred.broker import redis_url_of


@pytest.mark.parametrize(
    ("broker", "url"),
    [
        ("redis://127.0.0.1:6379/3", "redis://127.0.0.1:6379/3"),
        ("redis://:secret@cache.internal:6380/0", "redis://:secret@cache.internal:6380/0"),
        ("redis+socket:///run/redis.sock?virtual_host=2", "unix:///run/redis.sock?db=2"),
        ("redis+socket:///run/redis.sock", "unix:///run/redis.sock?db=0"),
        ("redis://127.0.0.1:6379/0?health_check_interval=10", None),  # kombu's options
        ("redis://a:6379/0;redis://b:6379/0", None),  # failover
        ("rediss://cache.internal:6380/0", None),  # TLS: kombu's business
        ("sentinel://s1:26379", None),
        ("amqp://guest@rabbit//", None),
    ],
)
def test_which_broker_urls_are_plain_redis(broker, url):
    assert redis_url_of(broker) == url
