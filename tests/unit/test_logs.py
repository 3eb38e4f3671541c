"""The log filter that keeps idle periodic scans quiet, fed the records Celery itself writes
(its own format strings and argument shapes), through the handler ``settings.LOGGING`` builds."""

from __future__ import annotations

import io
import logging
import logging.config
from collections.abc import Iterator

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from django.conf import settings


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    config = {**settings.LOGGING, "root": {"handlers": ["console"], "level": "INFO"}}
    logging.config.dictConfig(config)
    stream = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def worker(template: str, name: str, returned: str = "0") -> None:
    context = {"id": "t1", "name": name, "return_value": returned, "runtime": 0.01}
    logging.getLogger("celery.app.trace").info(template, {**context, "args": "()", "kwargs": ""})


def test_an_idle_scan_tick_writes_nothing(log: io.StringIO) -> None:
    logging.getLogger("celery.beat").info(
        "Scheduler: Sending due task %s (%s)", "timers-scan", "executions.tasks.timers_scan"
    )
    worker(LOG_RECEIVED, "executions.tasks.timers_scan")
    worker(LOG_SUCCESS, "executions.tasks.timers_scan", "0")
    worker(LOG_SUCCESS, "lanes.tasks.reconcile", "0")

    assert log.getvalue() == ""


def test_heartbeats_and_a_stages_received_line_write_nothing(log: io.StringIO) -> None:
    worker(LOG_RECEIVED, "alfred.tasks.worker_heartbeat")
    worker(LOG_SUCCESS, "alfred.tasks.worker_heartbeat", "None")
    worker(LOG_RECEIVED, "executions.tasks.run_stage")

    assert log.getvalue() == ""


def test_a_scan_that_did_something_stages_and_warnings_are_kept(log: io.StringIO) -> None:
    worker(LOG_SUCCESS, "executions.tasks.timers_scan", "3")
    worker(LOG_SUCCESS, "executions.tasks.run_stage", "'stop'")
    logging.getLogger("celery.beat").warning(
        "Scheduler: Sending due task %s (%s)", "timers-scan", "executions.tasks.timers_scan"
    )
    logging.getLogger("executions").info("timers_scan is mentioned by our own code")

    lines = log.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert "timers_scan" in lines[0] and "succeeded" in lines[0] and lines[0].endswith(": 3")
    assert "executions.tasks.run_stage" in lines[1]
