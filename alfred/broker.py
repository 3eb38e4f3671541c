"""Sending a task message, lean, when the broker is plain Redis: what every acceptance does.

``Signature.apply_async`` cost 0.8 ms of CPU in each acceptance, a quarter of all the web
process spent on one (bench/reports/acceptance.md): Celery's router, its configuration read
through Django's settings, kombu's producer and its entities, and a new Redis client for
every message (kombu's Redis channel makes one per put). :func:`task_send` sends the same
message for a third of that:

- the message is Celery's own (``app.amqp.as_task_v2``: task protocol 2, the headers, body
  and properties a worker reads, a countdown as its ``eta``);
- in the envelope kombu's Redis channel writes (the body in base64, a delivery tag, the
  delivery info), routed by the default exchange as Celery routes a queue named for itself
  (the queue's name is the list's key): ``tests/integration/test_broker.py`` holds the two
  equal, field for field but the ids;
- sent by one ``LPUSH`` on a Redis client the process keeps (redis-py's pool serves every
  thread, and a forked child makes connections of its own).

Any other broker (RabbitMQ, Redis over TLS or behind Sentinel, kombu's key prefix), eager
mode, and a task with options of its own that go in its message (a time limit, an expiry, a
priority, a route) get ``apply_async``: their publishing is Celery's business, not ours.

Failures: the connection times out as the broker's does (``broker_connection_timeout``), a
lost connection is tried twice more with a short back-off, and then the error is raised as
kombu raises it (``OperationalError``): ``run_dispatch`` records ``start_failed``. A retry
after an answer lost in transit can send a message twice; a message is only a hint
(``executions.engine.dispatch``), so that is safe.
"""

from __future__ import annotations

import base64
import threading
import uuid
from typing import Any
from urllib.parse import parse_qsl

import redis
from celery import Celery
from kombu.exceptions import OperationalError
from kombu.utils.json import dumps
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

# Transport options that change where kombu puts a message or how it connects: with any of
# them set, kombu publishes.
_KOMBU_ONLY_OPTIONS = frozenset({"global_keyprefix", "sep", "priority_steps", "sentinels"})
# A task's own options that would change its message or its route: a task with any of them
# set is published by apply_async.
_TASK_OPTIONS = (
    "queue",
    "routing_key",
    "exchange",
    "priority",
    "expires",
    "delivery_mode",
    "compression",
    "time_limit",
    "soft_time_limit",
)


def task_send(
    app: Celery, name: str, args: list[Any], *, queue: str, countdown: float | None = None
) -> None:
    """Send task ``name`` with ``args`` to ``queue`` (to run ``countdown`` seconds from now,
    if given), as ``apply_async`` would."""
    client = _client(app)
    plain, ignore_result = _task_plain(app, name)
    if client is None or not plain:
        app.signature(name, args=args, queue=queue, immutable=True).apply_async(
            countdown=countdown or 0
        )
        return
    task_id = str(uuid.uuid4())
    message = app.amqp.as_task_v2(
        task_id,
        name,
        args=tuple(args),
        countdown=countdown or None,
        reply_to=app.thread_oid,  # as apply_async sets them
        ignore_result=ignore_result,  # type: ignore[arg-type]
    )
    envelope = {
        "body": base64.b64encode(dumps(message.body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": message.headers,
        "properties": {
            **message.properties,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    try:
        client.lpush(queue, dumps(envelope))
    except redis.RedisError as exc:
        raise OperationalError(str(exc)) from exc


_clients: dict[tuple[int, str], redis.Redis | None] = {}
_clients_lock = threading.Lock()


def _client(app: Celery) -> redis.Redis | None:
    """The kept Redis client of ``app``'s broker, or None when kombu should publish."""
    url = app.conf.broker_write_url  # (Celery: the broker_url when none is set)
    key = (id(app), url)
    try:
        return _clients[key]
    except KeyError:
        pass
    with _clients_lock:
        if key not in _clients:
            _clients[key] = _client_made(app, url)
        return _clients[key]


def _task_plain(app: Celery, name: str) -> tuple[bool, bool | None]:
    """Whether task ``name``'s own options leave its message as :func:`task_send` writes it
    (JSON, no time limit, expiry, priority or route of its own), and its ``ignore_result``
    as ``apply_async`` puts it in the message (None for a task this process does not know)."""
    task = app.tasks.get(name)
    if task is None:
        return True, None
    own = [getattr(task, option, None) for option in _TASK_OPTIONS]
    return task.serializer in (None, "json") and not any(own), task.ignore_result


def _client_made(app: Celery, url: str) -> redis.Redis | None:
    options = app.conf.broker_transport_options or {}
    conf = app.conf
    if _KOMBU_ONLY_OPTIONS & options.keys() or conf.broker_use_ssl or conf.task_always_eager:
        return None
    if conf.task_serializer != "json" or conf.task_compression:
        return None
    redis_url = redis_url_of(url)
    if redis_url is None:
        return None
    timeout = app.conf.broker_connection_timeout
    retries = int(options.get("max_retries", 2))
    return redis.Redis.from_url(
        redis_url,
        socket_connect_timeout=timeout,
        socket_timeout=max(timeout, 5.0),
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.2), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


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
