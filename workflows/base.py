"""What a workflow declares: its input contract, its canonical form, its lane and its stages.

A workflow module defines one :class:`Workflow` subclass instance; ``registry.py`` lists the
five, and the app registers them (``executions.catalog``) at start. Acceptance
(``executions.acceptance``) is the only caller of ``validate``/``canonicalize``/``lane``:
validation and canonicalization happen before the acceptance transaction opens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from alfred.problems import shown
from executions.catalog import ApprovalView, FieldError, InvalidInput, LaneClaim
from executions.runtime.errors import FatalError
from executions.runtime.registry import Definition
from executions.runtime.stage import StageContext
from workflows import views


def _pointer(path: Any) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else ""


_REQUIRED_MESSAGE = re.compile(r"^'(.+)' is a required property$")


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _schema_message(error: ValidationError) -> str:
    """Alfred's message for a JSON Schema error. jsonschema's own messages quote the instance
    (``"[... 9000 items] is too long"``): they are neither bounded nor in the API's words.
    Only the schema's values (bounds, enums, patterns) are shown."""
    keyword = str(error.validator)
    value: Any = error.validator_value
    if keyword == "type":
        types = [str(t) for t in (value if isinstance(value, list) else [value])]
        return "must be " + " or ".join(_TYPE_NAMES.get(t, t) for t in types)
    if keyword == "required":
        return "is required"
    if keyword == "enum":
        return "must be one of " + ", ".join(json.dumps(choice) for choice in value)
    if keyword == "const":
        return f"must be {json.dumps(value)}"
    if keyword == "pattern":
        # A regular expression tells a person little: the schema says what it stands for.
        return _expected(error.schema) or "is not in the expected form"
    if keyword == "format":
        return f"must be a valid {value}"
    messages = {
        "maxLength": f"must be at most {value} characters",
        "minLength": f"must be at least {value} characters",
        "maxItems": f"must have at most {value} items",
        "minItems": f"must have at least {value} items",
        "uniqueItems": "must not repeat an item",
        "minimum": f"must be at least {value}",
        "maximum": f"must be at most {value}",
        "exclusiveMinimum": f"must be more than {value}",
        "exclusiveMaximum": f"must be less than {value}",
        "anyOf": "matches none of the allowed forms",
        "oneOf": "must match exactly one of the allowed forms",
    }
    return messages.get(keyword, f"breaks the schema's {keyword} rule")


# The annotation beside every ``pattern`` (and on an ``anyOf`` of forms): what the value must be,
# in words with an example ("a ticket ID: ..., e.g. OPS-123"). An ``x-`` name, so the schema
# stays a valid OpenAPI 3.0 schema object too (executions.api.schema); JSON Schema ignores it.
EXPECTED = "x-expected"


def expected(what: str, example: str) -> dict[str, str]:
    """The ``x-expected`` annotation: ``what`` the value must be, and an example of it."""
    return {EXPECTED: f"{what}, e.g. {example}"}


def _expected(schema: Any) -> str | None:
    text = schema.get(EXPECTED) if isinstance(schema, Mapping) else None
    return f"must be {text}" if text else None


def _located(error: ValidationError) -> list[FieldError]:
    """The errors at their place: for a missing or an unexpected property, the property
    itself (``/domain``), not the object that lacks or carries it."""
    base = list(error.absolute_path)
    instance = error.instance if isinstance(error.instance, dict) else {}
    if error.validator == "required":
        # jsonschema reports each missing property as its own error and names it only in
        # the message: "'zone' is a required property".
        match = _REQUIRED_MESSAGE.match(error.message)
        pointer = _pointer([*base, match.group(1)]) if match else _pointer(base)
        return [FieldError(pointer, "is required")]
    if error.validator == "additionalProperties" and instance:
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(k for k in instance if k not in allowed)
        known = "the properties are " + ", ".join(allowed)
        return [
            FieldError(_pointer([*base, name]), f"unknown property {shown(name)}; {known}")
            for name in extra
        ] or [FieldError(_pointer(base), f"unknown property; {known}")]
    return [FieldError(_pointer(base), _schema_message(error))]


# What a served schema states instead of a property's ``pattern``. The validator ignores it
# (an unknown keyword); :func:`documented` puts it in place for the schema the API serves.
DOCUMENTED_PATTERN = "x-documented-pattern"


def documented(schema: Any) -> Any:
    """``schema`` as the API serves it: each property's documented pattern in place of the
    one it is validated with. Why two: the server takes more than a pattern can say (a Unicode
    name IDNA accepts, a name relative to or inside a zone), and a pattern that said less
    would promise acceptance of names it then refuses (a single label, an all-digit top-level
    label, a name past 253 characters). A served pattern states a form every value of which
    is accepted; a client that needs more sends it and the server judges (422 with the field)."""
    if isinstance(schema, list):
        return [documented(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    served = {key: documented(value) for key, value in schema.items() if key != DOCUMENTED_PATTERN}
    if DOCUMENTED_PATTERN in schema:
        served["pattern"] = schema[DOCUMENTED_PATTERN]
    return served


class Workflow:
    name: ClassVar[str]
    title: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    stages: ClassVar[tuple[str, ...]]
    # A failed or canceled execution asked for again (new key, same identity) is continued:
    # a new run on the same execution that skips stages whose output is persisted and valid.
    supports_continuation: ClassVar[bool] = True
    # Whether every execution queues on a lane (``lane`` returns a claim for any input): its
    # answer then names the lane, which the OpenAPI document links to the lane's operations.
    queues_on_a_lane: ClassVar[bool] = True
    # The Celery queue of a stage that must run on workers of its own (a stage that needs
    # a network path, credentials or a machine the others lack); every other stage goes to
    # the default queue, "stages". A stage whose queue differs from the one before it is
    # handed over by a message to its queue (docs/architecture.md, "Queues"): a worker
    # consuming that queue must run somewhere.
    stage_queues: ClassVar[Mapping[str, str]] = {}
    # A stage's time limit in seconds: it runs in a message of its own, which Celery stops
    # there (the stage fails stage_time_limit; the process is killed if it does not stop).
    stage_time_limits: ClassVar[Mapping[str, float]] = {}
    # The stages a continuation may skip when an earlier run persisted their output (None:
    # any but the last, verify). A workflow whose plan freezes compare-and-swap tokens
    # (update-lambda-version's RevisionIds) plans again instead: stale tokens would only be
    # refused.
    continuation_skips: ClassVar[tuple[str, ...] | None] = None
    # Whether a later execution on the same lane, claimed with another token, replaces what a
    # succeeded one did (update-lambda-version: the alias moved to another version). Such a
    # succeeded execution no longer stands in for a new request of its operation: a new
    # execution repeats it (docs/workflows.md, "Asked for again after success"). False: a
    # later execution on the lane only adds what is missing, it never undoes another's work.
    replaced_by_another_token: ClassVar[bool] = False
    # A run still going after this long fails with code timed_out (None: no deadline).
    deadline_seconds: ClassVar[float | None] = 24 * 3600
    # Raised by one with every change of ``stages`` or of what a stage does with what an
    # earlier one recorded (a step's key, a receipt's shape). Each run records the version it
    # started under and is run only by that definition: ``previous`` keeps earlier ones
    # served (an instance each, with their own stage code) while their runs may still wake;
    # a run whose definition is gone fails with code definition_changed (docs/runbook.md).
    version: ClassVar[int] = 1
    previous: ClassVar[tuple[Workflow, ...]] = ()
    # Earlier versions whose stage outputs this version reads as its own. A continuation
    # (a failed or canceled execution asked for again) skips only stages whose output a run of
    # the same definition, or of a version listed here, persisted; any other stage runs again
    # (docs/runbook.md, "A deploy changed a workflow"). List a version only when every stage
    # both have reads the other's outputs unchanged.
    outputs_compatible_with: ClassVar[tuple[int, ...]] = ()

    _validator: ClassVar[Draft202012Validator | None] = None

    @classmethod
    def validator(cls) -> Draft202012Validator:
        validator = cls.__dict__.get("_validator")
        if validator is None:
            Draft202012Validator.check_schema(cls.input_schema)
            validator = Draft202012Validator(
                cls.input_schema, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            cls._validator = validator
        return validator

    @property
    def served_schema(self) -> dict[str, Any]:
        """The input schema as the API serves it (:func:`documented`)."""
        served: dict[str, Any] = documented(self.input_schema)
        return served

    def validate(self, data: Any) -> None:
        """Raise :class:`InvalidInput` with every field error (JSON Pointers), schema first,
        then the workflow's own semantic checks in :meth:`check_semantics`."""
        errors = sorted(
            self.validator().iter_errors(data), key=lambda e: (list(e.absolute_path), e.message)
        )
        if errors:
            seen: dict[str, FieldError] = {}
            for err in errors:
                # For a oneOf/anyOf mismatch, what the forms stand for when the schema says
                # so; else the most relevant sub-error.
                described = _expected(err.schema) if err.context else None
                if described is not None:
                    pointer = _pointer(err.absolute_path)
                    seen.setdefault(pointer, FieldError(pointer, described))
                    continue
                chosen = best_match([err]) if err.context else err
                for located in _located(chosen):
                    seen.setdefault(located.field, located)
            raise InvalidInput(list(seen.values()))
        semantic = self.check_semantics(data)
        if semantic:
            raise InvalidInput(semantic)

    def check_semantics(self, data: Mapping[str, Any]) -> list[FieldError]:
        """Checks JSON Schema cannot express (override per workflow)."""
        return []

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical input for schema-valid ``data``: every default filled in, every
        value in its one normal form. Two requests that mean the same operation have equal
        canonical inputs; the logical identity is the hash of this form."""
        raise NotImplementedError

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        raise NotImplementedError

    def continue_after_success(
        self, canonical: Mapping[str, Any], stage_outputs: Mapping[str, Any]
    ) -> bool:
        """For a succeeded execution asked for again: True when its completed stage state says
        contract work remains, so a continuation run is queued instead of returning it.
        ``stage_outputs`` maps each stage to its latest succeeded output across all runs."""
        return False

    def __init__(self, stage_code: ModuleType | None = None) -> None:
        # The module holding the stages as plain functions of ``ctx`` (``stages.py``), each
        # named as its stage; without one, the ``stage_<name>`` methods (the tests' workflows).
        self.stage_code = stage_code

    def run_stage(self, stage: str, ctx: StageContext) -> Any:
        """Run one stage. Its return value (JSON) is the stage's output; everything with a
        side effect goes through ``ctx.step``."""
        function = getattr(self.stage_code, stage, None) or getattr(self, f"stage_{stage}", None)
        if function is None:
            raise FatalError(
                f"stage {stage!r} of {self.name} is not implemented yet", code="not_implemented"
            )
        return function(ctx)

    def definition(self) -> Definition:
        """What the engine runs of it (``executions.runtime.registry``)."""
        return Definition(
            name=self.name,
            stages=self.stages,
            run_stage=self.run_stage,
            canonicalize=self.canonicalize,
            deadline_seconds=self.deadline_seconds,
            version=self.version,
            outputs_compatible_with=self.outputs_compatible_with,
            queues=tuple(sorted(self.stage_queues.items())),
            time_limits=tuple(sorted(self.stage_time_limits.items())),
        )

    def definitions(self) -> tuple[Definition, ...]:
        """The current definition, then the earlier ones it still serves."""
        return (self.definition(), *(old.definition() for old in self.previous))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "stages": list(self.stages),
            "version": self.version,
            "lane": self.lane_description,
            "input_schema": self.served_schema,
        }

    lane_description: ClassVar[str] = ""

    def subject(self, data: Mapping[str, Any]) -> str:
        """What an execution with input ``data`` acts on, as an operator names it (override
        per workflow; the admin's list and page show it)."""
        return ""

    def approval_view(self, payload: Mapping[str, Any]) -> ApprovalView:
        """How a pending approval's plan is shown (``workflows.views``: by its shape)."""
        return views.approval_view(payload)

    @property
    def searched_fields(self) -> tuple[str, ...]:
        """The input's free-form names the admin's search looks in: its string properties
        and lists of strings, but not choices (an enum) and not flags."""
        found = []
        for name, prop in self.input_schema["properties"].items():
            item = prop.get("items", {}) if prop.get("type") == "array" else prop
            types = item.get("type")
            if "string" in (types if isinstance(types, list) else [types]) and "enum" not in item:
                found.append(name)
        return tuple(found)
