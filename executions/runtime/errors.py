"""How a step or a stage ends other than by returning (docs/architecture.md, "Life of an
execution").

- ``RetryableError``: try the step again later, with capped exponential backoff and jitter,
  as a durable timer (no worker waits).
- ``FatalError``: stop; the stage, the run and the execution fail.
- ``ReadinessFailure``: a precondition is unmet, found by the planning stage: a structured,
  schema-valid failure that is safe to retry later and lets the lane go.
- ``Suspend``: internal; the stage waits for a timer, a hook or a child and frees the worker.

Anything else raised by a stage is an unclassified failure; its projection keeps the type,
the message and the frames (file, line, function), never local values.
"""

from __future__ import annotations

import traceback
from typing import Any

from jsonschema import Draft202012Validator

READINESS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ReadinessFailure",
    "type": "object",
    "required": ["code", "message", "checks"],
    "additionalProperties": False,
    "properties": {
        "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "message": {"type": "string", "minLength": 1},
        "checks": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "ok"],
                "properties": {
                    "name": {"type": "string"},
                    "ok": {"type": "boolean"},
                    "detail": {"type": "string"},
                },
            },
        },
    },
}
_READINESS = Draft202012Validator(READINESS_SCHEMA)


class EngineError(Exception):
    code = "failed"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details

    def projection(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class FatalError(EngineError):
    code = "fatal"


class RetryableError(EngineError):
    """Try the step again later. ``retry_after``: the least the retry must wait, in seconds,
    when the failing party says so (a provider's Retry-After; a request that may still be in
    flight until a client timeout has passed). The step's backoff applies when it is longer."""

    code = "retryable"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        **details: Any,
    ) -> None:
        if retry_after is not None:
            details["retry_after"] = retry_after
        super().__init__(message, code=code, **details)
        self.retry_after = retry_after


class ReadinessFailure(EngineError):
    """An unmet precondition, as ``{"code", "message", "checks": [{"name", "ok", ...}]}``."""

    code = "not_ready"

    def __init__(self, message: str, *, code: str, checks: list[dict[str, Any]]) -> None:
        super().__init__(message, code=code)
        self.checks = checks
        self.evidence = {"code": code, "message": message, "checks": checks}
        errors = sorted(_READINESS.iter_errors(self.evidence), key=str)
        if errors:
            raise ValueError(f"invalid readiness evidence: {errors[0].message}")

    def projection(self) -> dict[str, Any]:
        return {"code": "readiness_failure", "message": self.message, "readiness": self.evidence}


def readiness_is_valid(evidence: Any) -> bool:
    return isinstance(evidence, dict) and _READINESS.is_valid(evidence)


class Canceled(EngineError):
    """The run was asked to stop; raised at the next step boundary."""

    code = "canceled"


class LeaseLost(Exception):
    """Another worker holds this run now (our fence is stale): stop without writing."""


class Suspend(Exception):
    """The stage waits (timer, hook, child); the worker is released."""

    def __init__(self, reason: str, *, operator: bool = False, hold: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.operator = operator  # paused for an operator's answer (status paused)
        self.hold = hold  # held by a gate until someone lifts it (a change freeze)


def unclassified(exc: BaseException) -> dict[str, Any]:
    """A safe projection of an unexpected exception: no locals, no argument values."""
    frames = traceback.extract_tb(exc.__traceback__)[-8:]
    return {
        "code": "unclassified",
        "type": type(exc).__name__,
        "message": str(exc)[:500],
        "frames": [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} in {f.name}" for f in frames],
    }
