"""The bare Celery baseline for ``python -m bench engine``: a chain of no-op tasks, timed in
Redis by its own tasks."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import redis
from celery import shared_task
from django.conf import settings


def timing_client() -> redis.Redis:
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"), db=2)
    parts = urlsplit(url)  # redis-py lets the URL's database win over a db= argument
    return redis.Redis.from_url(urlunsplit(parts._replace(path="/2")))


@shared_task(name="bench.tasks.noop", acks_late=True, ignore_result=True)
def noop(position: int, length: int) -> None:
    client = timing_client()
    now = repr(time.time())
    client.setnx("bench:first", now)
    if position == length - 1:
        client.set("bench:last", now)
        client.incr("bench:chains")
