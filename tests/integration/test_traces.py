"""Traces as a collector receives them: a real web process and a real worker export over
OTLP/HTTP to a collector run by the test, during an add-subdomain on the AWS stand-in. One
trace holds the HTTP request, every stage, every step and every Route53 call; without an
endpoint nothing is exported."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from alfred.logs import SCAN_TASKS, SILENT_TASKS
from alfred.telemetry import ScansSampled
from executions.models import Execution, StepReceipt
from executions.runtime.registry import definition_get
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, wait_for
from tests.support import aws_world
from tests.support.live import WebServer

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@dataclass(frozen=True)
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf), keeping every span."""

    spans: list[Span] = field(default_factory=list)

    def start(self) -> Collector:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                for resource in request.resource_spans:
                    service = next(
                        a.value.string_value
                        for a in resource.resource.attributes
                        if a.key == "service.name"
                    )
                    for scope in resource.scope_spans:
                        collector.spans += [_span(service, s) for s in scope.spans]
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _span(service: str, span: Any) -> Span:
    attributes = {}
    for attribute in span.attributes:
        value = attribute.value
        attributes[attribute.key] = getattr(value, value.WhichOneof("value") or "string_value")
    return Span(
        service=service,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        name=span.name,
        attributes=attributes,
    )


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    found = Collector().start()
    yield found
    found.stop()


TRACED = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_TRACES_SAMPLER": "always_on",
    "ALFRED_TRACE_SCANS_RATIO": "0",
}


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def traced_worker(
    standin: AwsStandIn, collector: Collector, django_db_setup: None
) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(
        standin, "traced", OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, **TRACED
    ) as worker:
        yield worker


def test_one_trace_from_the_request_through_every_stage_step_and_route53_call(
    api, collector, traced_worker
):
    web = WebServer("traced-web", OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, **TRACED).start()
    try:
        # when an add-subdomain is asked for over HTTP and runs to its end on the worker
        answer = httpx.post(
            f"{web.base}/api/v1/workflows/add-subdomain/executions",
            headers={
                "Authorization": api._credentials["HTTP_AUTHORIZATION"],
                "Idempotency-Key": uuid.uuid4().hex,
            },
            json={"zone": "example.com", "subdomain": f"t{uuid.uuid4().hex[:8]}"},
        )
        assert answer.status_code == 202, answer.text
        execution_id = answer.json()["id"]
        wait_for(lambda: Execution.objects.get(pk=execution_id).terminal, timeout=60)
        execution = Execution.objects.get(pk=execution_id)
        assert execution.status == "succeeded", execution.error
        stages = definition_get("add-subdomain").stages
        steps = set(
            StepReceipt.objects.filter(run__execution_id=execution_id, kind="step").values_list(
                "step_key", flat=True
            )
        )

        def exported() -> list[Span]:
            names = {s.name for s in collector.spans}
            return (
                [s for s in collector.spans]
                if {f"stage {stage}" for stage in stages} <= names
                else []
            )

        wait_for(exported, timeout=15)
    finally:
        web.stop()

    # then the request's span starts the trace the execution recorded
    (request,) = [
        s
        for s in collector.spans
        if s.service == "alfred-web" and s.name.startswith("POST") and not s.parent_id
    ]
    trace = [s for s in collector.spans if s.trace_id == request.trace_id]
    assert execution.trace_context["traceparent"].split("-")[1] == request.trace_id
    # every stage, as a span of the worker's in that trace, naming the execution
    stage_spans = {s.name: s for s in trace if s.name.startswith("stage ")}
    assert set(stage_spans) == {f"stage {stage}" for stage in stages}
    for span in stage_spans.values():
        assert span.service == "alfred-worker"
        assert span.attributes["alfred.execution_id"] == execution_id
    # every step, inside its stage
    step_spans = [s for s in trace if s.name.startswith("step ")]
    assert {s.attributes["alfred.step"] for s in step_spans} == steps
    by_id = {s.span_id: s for s in trace}
    for span in step_spans:
        assert by_id[span.parent_id].name.startswith("stage ")
    # every Route53 call, inside a step or a wait's poll (botocore's spans)
    aws = [s for s in trace if s.attributes.get("rpc.service") == "Route 53"]
    assert {s.attributes["rpc.method"] for s in aws} >= {
        "ListResourceRecordSets",
        "ChangeResourceRecordSets",
        "GetChange",
    }
    for span in aws:
        parent = by_id[span.parent_id]
        assert parent.name.startswith(("step ", "wait ")), parent.name


def test_idle_scans_and_heartbeats_make_no_trace(collector, traced_worker):
    # given: the traced worker, whose embedded beat sends the timer scan and the relay every
    # second (and the recovery scan, the lane reconciler, its heartbeat every few seconds)
    wait_for(lambda: "ready" in traced_worker.output(), timeout=60)
    began = len(collector.spans)

    # when: some seconds pass with nothing to do
    time.sleep(6)

    # then: none of those ticks was exported as a trace of its own (ALFRED_TRACE_SCANS_RATIO=0)
    scans = [
        s
        for s in collector.spans[began:]
        if s.name.rsplit("/", 1)[-1] in SCAN_TASKS | SILENT_TASKS
        or (not s.parent_id and s.service == "alfred-worker")
    ]
    assert scans == [], sorted({s.name for s in scans})


def test_a_scan_is_a_trace_at_its_sampling_ratio():
    # given: the sampler with every scan kept, and with none
    base = ALWAYS_ON
    kept, dropped = ScansSampled(base, 1.0), ScansSampled(base, 0.0)
    name = "run/executions.tasks.timers_scan"

    # then: a scan with no parent is sampled at the ratio; any other span as the SDK's says
    assert kept.should_sample(None, 1, name).decision.is_sampled()
    assert not dropped.should_sample(None, 1, name).decision.is_sampled()
    assert dropped.should_sample(None, 1, "run/executions.tasks.run_stage").decision.is_sampled()


def test_an_access_line_carries_its_requests_trace_id(collector):
    # given: a traced web process writing JSON lines
    web = WebServer(
        "traced-access",
        ALFRED_LOG_FORMAT="json",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        **TRACED,
    ).start()
    try:
        # when: a request is answered
        assert httpx.get(f"{web.base}/healthz?traced", timeout=10).status_code == 200
        wait_for(lambda: "/healthz?traced" in web.output(), timeout=10)
    finally:
        web.stop()

    # then: uvicorn's access line names the trace, which is the request's exported trace
    (access,) = [
        json.loads(line) for line in web.output().splitlines() if "/healthz?traced" in line
    ]
    assert access["logger"] == "uvicorn.access"
    wait_for(lambda: any(s.trace_id == access["trace_id"] for s in collector.spans), timeout=10)
    (root,) = [s for s in collector.spans if s.trace_id == access["trace_id"] and not s.parent_id]
    assert root.service == "alfred-web" and root.name == "GET"
    assert root.attributes["http.response.status_code"] == 200
