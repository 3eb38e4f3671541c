"""The engine's spans (``alfred.telemetry`` says when they are exported and where): one per
stage, a child of the execution's trace context, and one per step inside it. Without the SDK
set up they cost a context switch each and record nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.trace import Span

tracer = trace.get_tracer("alfred.engine")


def trace_context_now() -> dict[str, str]:
    """The current span's context as W3C headers (``traceparent``), empty outside a span: what
    an execution records at its acceptance, so that every stage it ever runs joins its trace."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@contextmanager
def stage_span(
    trace_context: Mapping[str, str], *, workflow: str, execution_id: str, run_id: str, stage: str
) -> Iterator[Span]:
    parent = propagate.extract(dict(trace_context)) if trace_context else None
    attributes: dict[str, str | int] = {
        "alfred.workflow": workflow,
        "alfred.execution_id": execution_id,
        "alfred.run_id": run_id,
        "alfred.stage": stage,
    }
    with tracer.start_as_current_span(
        f"stage {stage}", context=parent, attributes=attributes
    ) as span:
        yield span


@contextmanager
def step_span(key: str, attempt: int) -> Iterator[Span]:
    attributes: dict[str, str | int] = {"alfred.step": key, "alfred.attempt": attempt}
    with tracer.start_as_current_span(f"step {key}", attributes=attributes) as span:
        yield span


@contextmanager
def wait_span(key: str) -> Iterator[Span]:
    """One poll of a durable wait (``ctx.wait_until``): its probe reads a provider."""
    with tracer.start_as_current_span(f"wait {key}", attributes={"alfred.wait": key}) as span:
        yield span
