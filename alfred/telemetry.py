"""OpenTelemetry traces: off unless an OTLP endpoint is configured.

Set ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and the web
process and each worker process export spans over OTLP/HTTP, with the SDK's own settings
(``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS``
…). Spans come from the instrumentations of Django (each request), Celery (each task), psycopg
(each statement), botocore (each AWS call) and httpx (ArgoCD, webhooks), and from the engine
(``executions.runtime.tracing``: a span per stage and per step).

One trace per execution, however long it lives: acceptance records the request's trace
context on the execution (``Execution.trace_context``), and every stage of every run, days
later on another worker after a timer or an approval, is a child of it; a child execution
takes its parent's stage as its own parent. The Celery message carries the context too, but
a wake from the timer scan or the recovery scan starts from the scan's task, not the
request: the row is what ties them.

The periodic scans are not traced, but sampled (``ALFRED_TRACE_SCANS_RATIO``, 0.01 by
default; 0: never): the timer scan and the relay run every second, the recovery scan and the
lane reconciler every few, each worker sends itself a heartbeat every ten, and on an idle stack
they made three traces in four, each the same few statements finding nothing. What a scan
sets going is traced where it matters: a stage it wakes is a child of its execution's trace
(above), not of the scan's. The rule is a sampler (:class:`ScansSampled`) in front of the
SDK's own (``OTEL_TRACES_SAMPLER``): a span with no parent, named for a scan's task, is kept
at that ratio; its statements follow it (parent-based).

Workers set the SDK up in each pool process (``worker_process_init``: its exporter's thread
would not survive the fork) and flush it when the process ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import (
    Decision,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from alfred.logs import SCAN_TASKS, SILENT_TASKS

log = logging.getLogger(__name__)

# Celery's instrumentation names a task's spans "run/<task>" and "apply_async/<task>".
_SCAN_SUFFIXES = tuple(f"/{task}" for task in sorted(SCAN_TASKS | SILENT_TASKS))


class ScansSampled(Sampler):
    """The periodic scans' traces at ``ratio``; every other span as ``base`` decides."""

    def __init__(self, base: Sampler, ratio: float) -> None:
        self.base, self.ratio = base, ratio
        self.scans = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if not parent.is_valid and name.endswith(_SCAN_SUFFIXES):
            if self.ratio <= 0:
                return SamplingResult(Decision.DROP)
            return self.scans.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        return self.base.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"ScansSampled{{{self.ratio}, {self.base.get_description()}}}"


_provider: Any = None


def tracing_configured() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def telemetry_setup(service: str) -> bool:
    """The SDK and the instrumentations, once per process, if an endpoint is configured:
    whether tracing is on. ``service``: the default ``service.name`` (``OTEL_SERVICE_NAME``
    wins)."""
    global _provider
    if _provider is not None or not tracing_configured():
        return _provider is not None
    # Imported only when on: the SDK and the instrumentations cost start-up time otherwise.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or service
    base = TracerProvider().sampler  # the SDK's, from OTEL_TRACES_SAMPLER
    ratio = float(os.environ.get("ALFRED_TRACE_SCANS_RATIO", "0.01"))
    _provider = TracerProvider(
        resource=Resource.create({"service.name": name}), sampler=ScansSampled(base, ratio)
    )
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(_provider)
    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument(skip_dep_check=True)
    BotocoreInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument()
    log.info("tracing on: %s exports to %s", name, _endpoint())
    return True


def telemetry_flush() -> None:
    """Export what the process still holds (a pool process that ends, a web that stops)."""
    if _provider is not None:
        _provider.force_flush()


def _endpoint() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or ""
    )
