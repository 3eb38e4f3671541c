"""Sending a task message, lean, when the broker is plain Redis: what every acceptance does,
with ``ALFRED_LEAN_PUBLISH`` on (off by default: Celery's own ``apply_async`` publishes).

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

Failures: connecting, and waiting for Redis's answer, each time out after the broker's
``broker_connection_timeout``; a lost connection or a timeout is tried again as the
transport's options say (``max_retries`` 2, at once and then 0.2 s later; where they are not
set, as Celery's publish retry policy says), and then the error is raised as kombu raises it
(``OperationalError``): ``run_dispatch`` records ``start_failed``. A try after an answer
lost in transit can send a message twice; a message is only a hint
(``engine.runtime.dispatch``), so that is safe.

Sent from inside a task (a worker's wake of another run), the message carries that task's
root and parent ids, as ``send_task`` gives them. Nothing here sends Celery's publish
signals: with a receiver connected to them, ``apply_async`` publishes.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import redis
from celery import Celery
from celery.signals import after_task_publish, before_task_publish
from django.conf import settings
from kombu.exceptions import OperationalError
from kombu.utils.json import dumps
from redis.backoff import NoBackoff
from redis.retry import Retry

# Transport options that change where kombu puts a message or how it connects: with any of
# them set, kombu publishes.
_KOMBU_ONLY_OPTIONS = frozenset({"global_keyprefix", "sep", "priority_steps", "sentinels"})
_RETRY_OPTIONS = frozenset({"max_retries", "interval_start", "interval_step", "interval_max"})
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
    app = getattr(app, "_get_current_object", lambda: app)()  # (current_app is a proxy)
    if not settings.ALFRED_LEAN_PUBLISH:
        app.signature(name, args=args, queue=queue, immutable=True).apply_async(
            countdown=countdown or 0
        )
        return
    sender = _sender(app)
    plain, ignore_result = _task_plain(app, name)
    if sender is None or not plain or _publish_watched():
        app.signature(name, args=args, queue=queue, immutable=True).apply_async(
            countdown=countdown or 0
        )
        return
    task_id = str(uuid.uuid4())
    parent = app.current_worker_task  # sent from a task: its lineage, as send_task gives it
    message = app.amqp.as_task_v2(
        task_id,
        name,
        args=tuple(args),
        countdown=countdown or None,
        reply_to=app.thread_oid,  # as apply_async sets them
        ignore_result=ignore_result,  # type: ignore[arg-type]
        root_id=(parent.request.root_id or parent.request.id) if parent else None,
        parent_id=parent.request.id if parent else None,
    )
    envelope = dumps(
        {
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
    )
    sender.push(queue, envelope)


def _publish_watched() -> bool:
    """Whether something listens for Celery's publish signals, which only apply_async sends."""
    return bool(before_task_publish.receivers or after_task_publish.receivers)


@dataclass(frozen=True)
class _Sender:
    """A kept Redis client, and how a push is tried again after a lost connection or a
    timeout (``max_retries``, ``interval_start``, ``interval_step``, ``interval_max``), each
    try bounded by the client's timeouts."""

    client: redis.Redis
    tries: int
    interval_start: float
    interval_step: float
    interval_max: float

    def push(self, queue: str, envelope: str) -> None:
        for attempt in range(self.tries):
            try:
                self.client.lpush(queue, envelope)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if attempt == self.tries - 1:
                    raise OperationalError(str(exc)) from exc
                interval = self.interval_start + self.interval_step * attempt
                time.sleep(min(self.interval_max, interval))
            except redis.RedisError as exc:
                raise OperationalError(str(exc)) from exc


# Per app (weakly: an app that is gone takes its client with it): its broker's URL, and its
# sender, or None when kombu should publish.
_kept: weakref.WeakKeyDictionary[Celery, tuple[str, _Sender | None]] = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()


def _sender(app: Celery) -> _Sender | None:
    """``app``'s sender, or None when kombu should publish (decided again whenever the
    broker's URL changes; eager mode, at every send)."""
    if app.conf.task_always_eager:
        return None
    url = app.conf.broker_write_url  # (Celery: the broker_url when none is set)
    kept = _kept.get(app)
    if kept is not None and kept[0] == url:
        return kept[1]
    with _kept_lock:
        kept = _kept.get(app)
        if kept is None or kept[0] != url:
            if kept is not None and kept[1] is not None:
                kept[1].client.close()
            kept = (url, _sender_made(app, url))
            _kept[app] = kept
        return kept[1]


def _task_plain(app: Celery, name: str) -> tuple[bool, bool | None]:
    """Whether task ``name``'s own options leave its message as :func:`task_send` writes it
    (JSON, no time limit, expiry, priority or route of its own), and its ``ignore_result``
    as ``apply_async`` puts it in the message (None for a task this process does not know)."""
    task = app.tasks.get(name)
    if task is None:
        return True, None
    own = [getattr(task, option, None) for option in _TASK_OPTIONS]
    return task.serializer in (None, "json") and not any(own), task.ignore_result


def _sender_made(app: Celery, url: str) -> _Sender | None:
    conf = app.conf
    options = conf.broker_transport_options or {}
    if _KOMBU_ONLY_OPTIONS & options.keys() or conf.broker_use_ssl:
        return None
    if conf.task_serializer != "json" or conf.task_compression:
        return None
    redis_url = redis_url_of(url) if isinstance(url, str) else None
    if redis_url is None:
        return None
    timeout = conf.broker_connection_timeout
    client = redis.Redis.from_url(
        redis_url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),  # the tries are the sender's own
    )
    # The transport's retry options where set (ours: fail fast), else the publish retry policy
    # apply_async would follow.
    policy = {
        **conf.task_publish_retry_policy,
        **{k: v for k, v in options.items() if k in _RETRY_OPTIONS and v is not None},
    }
    return _Sender(
        client,
        tries=1 + max(0, int(policy.get("max_retries") or 0)),
        interval_start=float(policy.get("interval_start") or 0),
        interval_step=float(policy.get("interval_step") or 0),
        interval_max=float(policy.get("interval_max") or 0),
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
