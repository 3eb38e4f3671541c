"""Logs as an operator reads them: a real web process and a real worker under
``ALFRED_LOG_FORMAT=json`` write one JSON object a line; a refused request is one line, not
three; each transition of an execution is one INFO line naming it; a stage's lines name the
execution, run and stage; a line logged inside a span carries its trace and span ids."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from alfred.logs import JsonLines, LogContext, log_context
from executions.models import Execution
from tests.conftest import BeatProcess, WorkerProcess, wait_for
from tests.support.helpers import submit
from tests.support.live import WebServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def json_lines(output: str) -> list[dict[str, Any]]:
    """The log's lines that are JSON."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_line_carries_its_context_and_the_current_spans_ids(capsys):
    # given a handler as the settings make it under ALFRED_LOG_FORMAT=json
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines())
    handler.addFilter(LogContext())
    logger = logging.getLogger("alfred.tests.logs")
    logger.addHandler(handler)
    logger.propagate = False
    tracer = TracerProvider().get_tracer("tests")
    try:
        # when lines are logged outside any context, inside one, and inside a span
        logger.warning("plain")
        with log_context(execution="exe_1", run="run_1", stage="plan"):
            logger.info("in a stage")
            with tracer.start_as_current_span("stage plan") as span:
                logger.error("failed", exc_info=ValueError("boom"))
    finally:
        logger.removeHandler(handler)
    plain, staged, spanned = json_lines(capsys.readouterr().err)
    # then each is one JSON object with what was known when it was written
    assert plain["message"] == "plain" and plain["level"] == "WARNING"
    assert "execution" not in plain and "trace_id" not in plain
    assert plain["time"].endswith("+00:00")
    assert staged | {"time": ""} == {
        "time": "",
        "level": "INFO",
        "logger": "alfred.tests.logs",
        "message": "in a stage",
        "execution": "exe_1",
        "run": "run_1",
        "stage": "plan",
    }
    context = span.get_span_context()
    assert spanned["trace_id"] == format(context.trace_id, "032x")
    assert spanned["span_id"] == format(context.span_id, "016x")
    assert "ValueError: boom" in spanned["exception"]


def test_web_and_worker_write_json_lines_one_per_refusal_and_per_transition(api):
    web = WebServer("logs-web", ALFRED_LOG_FORMAT="json").start()
    # (the worker without a beat of its own: two beats race for the one lease, and the one
    # whose lines this test reads could wait a whole lease for the other's to run out)
    worker = WorkerProcess("logs").start(beat=False, environ={"ALFRED_LOG_FORMAT": "json"})
    beat = BeatProcess("logs-beat").start(environ={"ALFRED_LOG_FORMAT": "json"})
    try:
        wait_for(lambda: "ready" in worker.output(), timeout=60)
        wait_for(lambda: "leads" in beat.output() or "lease" in beat.output(), timeout=60)
        # and an execution that fails
        crashed = submit(api, "test-crashing", {"label": "crashes"}).json()
        wait_for(lambda: Execution.objects.get(pk=crashed["id"]).terminal, timeout=30)
        wait_for(lambda: f"{crashed['id']} failed" in worker.output(), timeout=10)
        # given a token for the web process, and a request it refuses
        token = api._credentials["HTTP_AUTHORIZATION"]
        refused = httpx.post(
            f"{web.base}/api/v1/workflows/test-counter/executions",
            headers={"Authorization": token, "Idempotency-Key": "k-refused"},
            json={"label": 7},
        )
        assert refused.status_code == 422
        # when an execution runs to its end on the worker
        body = submit(api, "test-counter", {"label": "logged"}).json()
        wait_for(lambda: Execution.objects.get(pk=body["id"]).terminal, timeout=30)
        wait_for(lambda: f"{body['id']} succeeded" in worker.output(), timeout=10)
    finally:
        web.stop()
        worker.stop()
        beat.stop()
    # then every line of the worker and of beat is JSON, their banners and shutdown lines too
    for process in (worker, beat):
        printed = [line for line in process.output().splitlines() if line.strip()]
        assert printed and all(line.startswith("{") for line in printed), [
            line for line in printed if not line.startswith("{")
        ]
    banner = [line for line in json_lines(worker.output()) if line["logger"] == "celery.worker"]
    assert any("[queues]" in line["message"] for line in banner), banner
    # and the failed execution's line names its error's code
    error = Execution.objects.get(pk=crashed["id"]).error
    (failed,) = [
        line
        for line in json_lines(worker.output())
        if line.get("execution") == crashed["id"] and " failed (" in line["message"]
    ]
    assert failed["message"] == f"{crashed['id']} failed (test-crashing): {error['code']}"
    assert failed["error_code"] == error["code"]
    # then the refusal is one line (uvicorn's access line), and every web line is JSON
    web_lines = [line for line in web.output().splitlines() if line.strip()]
    mentions = [line for line in web_lines if "k-refused" in line or "executions" in line]
    assert len(mentions) == 1, mentions
    assert json.loads(mentions[0])["logger"] == "uvicorn.access"
    assert all(line.startswith("{") for line in web_lines), web_lines
    # and each transition of the execution is one INFO line that names it
    lines = json_lines(worker.output())
    transitions = [
        line["message"]
        for line in lines
        if line["logger"] == "executions.outbox" and line.get("execution") == body["id"]
    ]
    assert transitions == [
        f"{body['id']} running (test-counter)",
        f"{body['id']} succeeded (test-counter)",
    ]
    # logged while a stage ran: its run and stage too
    staged = [line for line in lines if line.get("stage") and line["execution"] != crashed["id"]]
    assert staged and all(line["execution"] == body["id"] and line["run"] for line in staged)
    # and a stage's task adds one line of Celery's (when it ended), not two
    tasks = [
        line["message"]
        for line in lines
        if "run_stage" in line["message"] and line["logger"] != "celery.worker"  # the banner's
    ]
    assert tasks and all(" succeeded in " in message for message in tasks)
