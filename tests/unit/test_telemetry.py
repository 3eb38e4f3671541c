"""Tracing is off unless an OTLP endpoint is configured, and outside a span an execution
records no trace context (so its stages start traces of their own, or none)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider

from alfred.telemetry import tracing_configured
from executions.runtime.tracing import trace_context_now


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_tracing_is_on_only_with_an_endpoint(monkeypatch, environ, on):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert tracing_configured() is on


def test_the_trace_context_recorded_is_the_current_spans():
    assert trace_context_now() == {}
    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("request") as span:
        recorded = trace_context_now()
    _, trace_id, span_id, _ = recorded["traceparent"].split("-")
    assert trace_id == format(span.get_span_context().trace_id, "032x")
    assert span_id == format(span.get_span_context().span_id, "016x")
