"""What a workflow declares: its input contract, its canonical form, its lane and its stages.

A workflow module defines one :class:`Workflow` subclass instance; ``registry.py`` lists the
five, and the app registers them (``executions.catalog``) at start. Acceptance
(``executions.acceptance``) calls ``validate``/``canonicalize``/``lane`` before its transaction
opens; the runtime canonicalizes a child's input (``ctx.child``) through the definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import ModuleType
from typing import Any, ClassVar

from executions.catalog import ApprovalView, FieldError, Finding, InvalidInput, LaneClaim
from executions.runtime.errors import FatalError
from executions.runtime.registry import Definition
from executions.runtime.stage import StageContext
from workflows import views
from workflows.inputs import WorkflowInput, documented, output_check
from workflows.watch import Recorded

__all__ = ["FieldError", "InvalidInput", "LaneClaim", "Workflow", "WorkflowInput"]


class Workflow:
    name: ClassVar[str]
    title: ClassVar[str]
    description: ClassVar[str]
    # The input, declared as a model (workflows.inputs): its schema, its validation, its
    # canonical form and what stage code reads as ``ctx.input``.
    Input: ClassVar[type[WorkflowInput]]
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
    # A run still going after this long fails with code timed_out (None: no deadline); the
    # time it spends paused for an operator does not count (an approval's expiry bounds it).
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

    @property
    def input_schema(self) -> dict[str, Any]:
        """The input's JSON Schema, generated from :attr:`Input` (validation's patterns)."""
        return self.Input.json_schema()

    @property
    def served_schema(self) -> dict[str, Any]:
        """The input schema as the API serves it (:func:`documented`)."""
        served: dict[str, Any] = documented(self.input_schema)
        return served

    def validate(self, data: Any) -> None:
        """Raise :class:`InvalidInput` with every field error (JSON Pointers)."""
        self.Input.parsed(data)

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical input for valid ``data``: every default filled in, every value in its
        one normal form (the model's validators return it). Two requests that mean the same
        operation have equal canonical inputs; the logical identity is the hash of this form."""
        return self.Input.parsed(data).canonical()

    def _child_canonical(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical input of this workflow started as a child (``ctx.child``): input a
        parent built that this workflow refuses is the parent's failure, named as such
        (``child_input_invalid``, with the fields), not an unclassified crash."""
        try:
            return self.canonicalize(data)
        except InvalidInput as refused:
            raise FatalError(
                f"the input built for a child {self.name} is invalid: {refused}",
                code="child_input_invalid",
                errors=[error.as_dict() for error in refused.errors],
            ) from None

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
        side effect goes through ``ctx.step``. An output declared as a TypedDict (the stage
        function's return annotation) is checked before the engine records it: a later stage,
        a continuation or a later version reads what the type says, or the stage fails
        ``stage_output_invalid`` and nothing wrong is recorded."""
        function = getattr(self.stage_code, stage, None) or getattr(self, f"stage_{stage}", None)
        if function is None:
            raise FatalError(
                f"stage {stage!r} of {self.name} is not implemented yet", code="not_implemented"
            )
        output = function(ctx)
        output_check(function, output)
        return output

    @property
    def watched(self) -> bool:
        """Whether its stages declare a drift check (``drift`` beside ``verify``)."""
        return callable(getattr(self.stage_code, "drift", None))

    def drift_check(
        self,
        execution_id: str,
        data: Mapping[str, Any],
        outputs: Mapping[str, Any],
        now: datetime,
    ) -> list[Finding]:
        """Its ``drift`` on a succeeded execution (``workflows.watch``): reads only."""
        check = getattr(self.stage_code, "drift", None)
        if check is None:
            return []
        stored = self.Input.stored(data)
        found: list[Finding] = check(Recorded(execution_id, stored, outputs, now))
        return found

    def redo_input(
        self, data: Mapping[str, Any], outputs: Mapping[str, Any], findings: list[Any]
    ) -> dict[str, Any]:
        """Its ``redo_input`` beside its drift check, if it declares one (``workflows.watch``);
        else the execution's own input."""
        redo = getattr(self.stage_code, "redo_input", None)
        if redo is None:
            return dict(data)
        given: dict[str, Any] = redo(dict(data), outputs, findings)
        return given

    def definition(self) -> Definition:
        """What the engine runs of it (``executions.runtime.registry``)."""
        return Definition(
            name=self.name,
            stages=self.stages,
            run_stage=self.run_stage,
            canonicalize=self._child_canonical,
            load_input=self.Input.stored,
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
