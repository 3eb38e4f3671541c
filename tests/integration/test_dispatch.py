"""After commit, and only then, the run is published; a real worker binds it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from celery import Celery, current_app

from executions.models import Execution, OutboxEvent
from executions.runtime.dispatch import RUN_STAGE_TASK, run_dispatch
from tests.support.helpers import SUBDOMAIN, submit


@pytest.fixture
def broker():
    """The real broker's client; the stages queue emptied around the test."""
    with current_app.connection_for_write() as conn:
        client: Any = conn.default_channel.client  # type: ignore[attr-defined]
        client.delete("stages")
        yield client
        client.delete("stages")


def _published(broker) -> list[dict]:
    messages = [json.loads(raw) for raw in broker.lrange("stages", 0, -1)]
    return [
        {"task": m["headers"]["task"], "args": args, "chain": embed.get("chain")}
        for m in messages
        for args, _, embed in [json.loads(_body(m))]
    ]


def _body(message: dict) -> str:
    import base64

    return base64.b64decode(message["body"]).decode()


@pytest.mark.django_db
def test_the_run_is_published_after_commit_only(api, broker, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = submit(api, "add-subdomain", SUBDOMAIN).json()
    assert _published(broker) == []  # nothing left the transaction before it committed

    for callback in callbacks:
        callback()

    # one message: the first stage, and no chain behind it (the worker that takes it runs
    # the stages after it too)
    assert _published(broker) == [
        {"task": RUN_STAGE_TASK, "args": [body["current_run"]["id"], "plan"], "chain": None}
    ]


@pytest.mark.django_db
def test_queued_work_is_not_published(api, broker, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        submit(api, "add-domain", {"domain": "one.example"})
        submit(api, "add-domain", {"domain": "two.example"})

    assert len(_published(broker)) == 1


@pytest.mark.django_db
def test_a_replay_or_reuse_publishes_nothing(api, broker, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        submit(api, "add-subdomain", SUBDOMAIN, key="k-1")
        submit(api, "add-subdomain", SUBDOMAIN, key="k-1")
        submit(api, "add-subdomain", SUBDOMAIN, key="k-2")

    assert len(_published(broker)) == 1


@pytest.fixture
def dead_broker_app():
    """A Celery app like ours whose broker is not there: a real connection failure."""
    app = Celery("alfred-dead-broker", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    # broker_write_url: Celery lets a CELERY_BROKER_URL in the environment beat broker_url.
    app.conf.update(broker_write_url="redis://127.0.0.1:1/0")
    yield app
    app.close()


@pytest.mark.django_db
def test_a_publish_failure_records_start_failed(
    api, dead_broker_app, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = submit(api, "add-subdomain", SUBDOMAIN).json()
    assert len(callbacks) == 1

    # when: publishing after commit meets a broker that does not answer
    run_dispatch(body["current_run"]["id"], app=dead_broker_app)

    # then
    execution = Execution.objects.get(pk=body["id"])
    assert execution.start_state == "start_failed"
    error = execution.start_error or {}
    assert error["code"] == "start_failed"
    assert error["type"] == "OperationalError"
    events = OutboxEvent.objects.filter(execution=execution).order_by("sequence")
    assert [(e.sequence, e.type) for e in events] == [
        (1, "execution.accepted"),
        (2, "execution.start_failed"),
    ]
    # the request itself stays accepted: the intent is durable
    assert api.get(f"/api/v1/executions/{body['id']}").json()["start_state"] == "start_failed"
