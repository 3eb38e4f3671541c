"""``alfred.broker.task_send``: the message kombu would have written, by a lean path, on the
real broker; and kombu's own path for any broker that is not plain Redis. (That a real worker
runs what it sends, every test whose worker runs an accepted execution shows: each start is
sent so.)"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import redis
from celery import Celery, current_app
from django.conf import settings
from kombu.exceptions import OperationalError

import executions.tasks  # noqa: F401 - run_stage registered, as in the web process
from alfred import broker as broker_module
from alfred.broker import redis_url_of, task_send

QUEUE = "broker-contract"  # no worker consumes it
TASK = "executions.tasks.run_stage"


@pytest.fixture
def queue() -> Iterator[redis.Redis]:
    url = redis_url_of(settings.CELERY_BROKER_URL)
    assert url is not None, "the test stack's broker is plain Redis"
    client = redis.Redis.from_url(url)
    client.delete(QUEUE)
    yield client
    client.delete(QUEUE)
    client.close()


def _taken(client: redis.Redis) -> dict[str, Any]:
    raw = client.rpop(QUEUE)
    assert isinstance(raw, bytes), "no message in the queue"
    message: dict[str, Any] = json.loads(raw)
    return message


def _masked(message: dict[str, Any]) -> dict[str, Any]:
    """The message without what differs from one sending to the next: its ids."""
    headers = {k: v for k, v in message["headers"].items() if k not in ("id", "root_id")}
    properties = {
        k: v
        for k, v in message["properties"].items()
        if k not in ("correlation_id", "delivery_tag")
    }
    return {**message, "headers": headers, "properties": properties}


def test_the_lean_message_is_the_one_kombu_writes(queue):
    # given: the same task sent by Celery's own apply_async and by task_send
    current_app.signature(TASK, args=["run_1", "plan"], queue=QUEUE, immutable=True).apply_async()
    kombu_sent = _taken(queue)
    task_send(current_app, TASK, ["run_1", "plan"], queue=QUEUE)
    lean_sent = _taken(queue)

    # then: the same envelope, headers, properties (the default exchange, as Celery routes a
    # queue of its own name) and body
    assert _masked(lean_sent) == _masked(kombu_sent)
    assert lean_sent["properties"]["delivery_info"] == {"exchange": "", "routing_key": QUEUE}
    assert json.loads(base64.b64decode(lean_sent["body"])) == [
        ["run_1", "plan"],
        {},
        {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
    ]
    # each message its own ids, the task's id its correlation id as Celery makes them
    assert lean_sent["headers"]["id"] == lean_sent["properties"]["correlation_id"]
    assert lean_sent["headers"]["id"] != kombu_sent["headers"]["id"]


def test_a_countdown_is_the_messages_eta(queue):
    task_send(current_app, TASK, ["run_1", "verify"], queue=QUEUE, countdown=30)

    eta = _taken(queue)["headers"]["eta"]

    ahead = datetime.fromisoformat(eta).timestamp() - time.time()
    assert 25 < ahead <= 30


def test_a_task_with_options_of_its_own_is_sent_by_apply_async(queue):
    # given: a task whose own time limit goes in its message
    app = Celery("alfred-limited", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")

    @app.task(name="tests.limited", time_limit=5)
    def limited() -> None: ...

    try:
        # when
        task_send(app, "tests.limited", [], queue=QUEUE)

        # then: the message is Celery's, the limit in it
        assert _taken(queue)["headers"]["timelimit"] == [5, None]
    finally:
        app.close()


def test_a_broker_that_is_not_plain_redis_is_kombus_to_publish_to():
    # given: an app like ours on AMQP (nothing listens on that port)
    app = Celery("alfred-amqp", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_write_url="amqp://guest:guest@127.0.0.1:1//")
    try:
        # then: no lean client; the send is apply_async's, and fails as kombu fails
        assert broker_module._client(app) is None
        with pytest.raises(OperationalError):
            task_send(app, TASK, ["run_1", "plan"], queue=QUEUE)
    finally:
        app.close()


def test_a_broker_that_does_not_answer_fails_as_kombu_fails():
    app = Celery("alfred-dead-redis", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_write_url="redis://127.0.0.1:1/0")
    try:
        assert broker_module._client(app) is not None
        with pytest.raises(OperationalError):
            task_send(app, TASK, ["run_1", "plan"], queue=QUEUE)
    finally:
        app.close()


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
def test_which_brokers_the_lean_path_speaks_to(broker, url):
    assert redis_url_of(broker) == url
