"""OpenTelemetry traces: off unless an OTLP endpoint is configured.

Set ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and the web
process and each worker process export spans over OTLP/HTTP, with the SDK's own settings
(``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS``
…). Spans come from the instrumentations of Django (each request), Celery (each task), psycopg
(each statement), botocore (each AWS call) and httpx (ArgoCD, webhooks), and from the engine
(``engine.runtime.tracing``: a span per stage and per step).

One trace per execution, however long it lives: acceptance records the request's trace
context on the execution (``Execution.trace_context``), and every stage of every run, days
later on another worker after a timer or an approval, is a child of it; a child execution
takes its parent's stage as its own parent. The Celery message carries the context too, but
a wake from the timer scan or the recovery scan starts from the scan's task, not the
request: the row is what ties them.

Workers set the SDK up in each pool process (``worker_process_init``: its exporter's thread
would not survive the fork) and flush it when the process ends.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace

log = logging.getLogger(__name__)

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
    _provider = TracerProvider(resource=Resource.create({"service.name": name}))
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
