"""``alfred.broker.task_send``: the message kombu would have written, by a lean path, on the
real broker; and kombu's own path for any broker that is not plain Redis. (That a real worker
runs what it sends, every test whose worker runs an accepted execution shows: each start is
sent so.)"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
import redis
from celery import Celery, current_app
from celery.signals import before_task_publish
from django.conf import settings
from kombu.exceptions import OperationalError

import engine.tasks  # noqa: F401 - run_stage registered, as in the web process
from alfred import broker as broker_module
from alfred import celery_app
from alfred.broker import redis_url_of, task_send

QUEUE = "broker-contract"  # no worker consumes it
TASK = "executions.tasks.run_stage"


@pytest.fixture(autouse=True)
def lean(settings: Any) -> None:
    settings.ALFRED_LEAN_PUBLISH = True


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


@contextmanager
def _app_like_ours(name: str, **conf: Any) -> Iterator[Celery]:
    """A Celery app configured as ours, with ``conf`` over it."""
    app = Celery(name, set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(**conf)
    try:
        yield app
    finally:
        app.close()


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
    # given: the same task sent by Celery's own apply_async and by task_send (the lean path:
    # the test stack's broker is plain Redis)
    assert broker_module._sender(celery_app) is not None
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


def test_off_by_default_celery_publishes(queue, settings, monkeypatch):
    # given: the setting as it ships, and a lean path that would fail if it were taken
    settings.ALFRED_LEAN_PUBLISH = False

    def untouched(app: Any) -> None:
        raise AssertionError("the lean path was taken")

    monkeypatch.setattr(broker_module, "_sender", untouched)

    # when
    task_send(current_app, TASK, ["run_1", "plan"], queue=QUEUE)

    # then: Celery's own message is on the queue
    assert _taken(queue)["headers"]["task"] == TASK


def test_a_countdown_is_the_messages_eta(queue):
    task_send(current_app, TASK, ["run_1", "verify"], queue=QUEUE, countdown=30)
    lean_sent = _taken(queue)
    current_app.signature(TASK, args=["run_1", "verify"], queue=QUEUE).apply_async(countdown=30)
    kombu_sent = _taken(queue)

    ahead = datetime.fromisoformat(lean_sent["headers"]["eta"]).timestamp() - time.time()
    assert 25 < ahead <= 30
    kombu_eta = datetime.fromisoformat(kombu_sent["headers"]["eta"])
    assert kombu_eta.utcoffset() == datetime.fromisoformat(lean_sent["headers"]["eta"]).utcoffset()


def test_a_message_sent_from_a_task_carries_its_lineage(queue):
    # given: a task (run as a worker runs it) that sends another, as a wake does
    with _app_like_ours("alfred-lineage") as app:

        @app.task(name="tests.waking")
        def waking() -> None:
            task_send(app, TASK, ["run_1", "plan"], queue=QUEUE)

        # when
        waking.apply(task_id="parent-1")

    # then
    headers = _taken(queue)["headers"]
    assert (headers["parent_id"], headers["root_id"]) == ("parent-1", "parent-1")


def test_a_task_with_options_of_its_own_is_sent_by_apply_async(queue):
    # given: a task whose own time limit goes in its message
    with _app_like_ours("alfred-limited") as app:

        @app.task(name="tests.limited", time_limit=5)
        def limited() -> None: ...

        # when
        task_send(app, "tests.limited", [], queue=QUEUE)

    # then: the message is Celery's, the limit in it
    assert _taken(queue)["headers"]["timelimit"] == [5, None]


def test_a_receiver_of_the_publish_signals_gets_them(queue):
    heard: list[str] = []

    def receiver(sender: str | None = None, **_: Any) -> None:
        heard.append(str(sender))

    before_task_publish.connect(receiver)
    try:
        task_send(current_app, TASK, ["run_1", "plan"], queue=QUEUE)
    finally:
        before_task_publish.disconnect(receiver)

    assert heard == [TASK]
    assert _taken(queue)["headers"]["task"] == TASK


@pytest.mark.parametrize(
    "conf",
    [
        {"broker_write_url": "amqp://guest:guest@127.0.0.1:1//"},  # nothing listens there
        {"task_always_eager": True},
        {"broker_transport_options": {"global_keyprefix": "other:"}},
    ],
    ids=["amqp", "eager", "key-prefix"],
)
def test_kombu_publishes_for_what_the_lean_path_does_not_speak(conf):
    with _app_like_ours("alfred-other", **conf) as app:
        assert broker_module._sender(app) is None


def test_a_broker_that_is_not_plain_redis_fails_as_kombu_fails():
    amqp = "amqp://guest:guest@127.0.0.1:1//"
    with (
        _app_like_ours("alfred-amqp", broker_write_url=amqp) as app,
        pytest.raises(OperationalError),
    ):
        task_send(app, TASK, ["run_1", "plan"], queue=QUEUE)


def test_a_redis_that_does_not_answer_fails_as_kombu_fails():
    with _app_like_ours("alfred-dead-redis", broker_write_url="redis://127.0.0.1:1/0") as app:
        assert broker_module._sender(app) is not None
        with pytest.raises(OperationalError):
            task_send(app, TASK, ["run_1", "plan"], queue=QUEUE)


def test_a_new_broker_url_gets_a_new_client():
    with _app_like_ours("alfred-moved", broker_write_url="redis://127.0.0.1:1/0") as app:
        first = broker_module._sender(app)
        app.conf.update(broker_write_url="redis://127.0.0.1:1/1")
        second = broker_module._sender(app)

    assert first is not None and second is not None
    assert first.client is not second.client
    assert second.tries == 3  # max_retries 2 in settings: three tries
    assert (second.interval_start, second.interval_step, second.interval_max) == (0, 0.2, 0.5)


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
