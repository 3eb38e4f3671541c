"""Typed workflow data (docs/architecture.md, "Typed workflow data"): each of the five declares
its input as a model and each stage's output as a TypedDict; stage code reads ``ctx.input`` as
that model (mypy checks it in ``make test``), a stored input loads without being judged again,
and an output its type does not allow is refused before the engine records it."""

from __future__ import annotations

from typing import Any, get_args, get_type_hints

import pytest
from typing_extensions import TypedDict, is_typeddict

from executions.catalog import workflow_get
from executions.runtime.errors import FatalError
from executions.runtime.stage import StageContext
from workflows.add_subdomain.input import AddSubdomainInput
from workflows.inputs import output_check

FIVE = ["add-subdomain", "add-certificate", "add-domain", "onboard-domain", "update-lambda-version"]


@pytest.mark.parametrize("name", FIVE)
def test_every_stage_reads_its_workflows_input_type_and_declares_its_output(name):
    workflow = workflow_get(name)
    for stage in workflow.stages:
        function = getattr(workflow.stage_code, stage)  # type: ignore[attr-defined]
        hints = get_type_hints(function)

        context = hints["ctx"]
        assert context.__origin__ is StageContext, (stage, context)
        # onboard-domain runs add-domain's later stages: its input is add-domain's, and more
        assert issubclass(workflow.Input, get_args(context)[0]), (stage, context)  # type: ignore[attr-defined]
        assert is_typeddict(hints["return"]), (stage, hints["return"])


def test_a_stored_input_loads_as_it_was_stored_without_being_judged_again():
    # given: an input accepted under older rules: a zone today's would refuse, a property the
    # model no longer has, and one it added since (ticket_ids) missing
    stored = {"zone": "under_score.example", "subdomain": "api.under_score.example", "old": 1}

    # when
    loaded = AddSubdomainInput.stored(stored)

    # then
    assert loaded.zone == "under_score.example" and loaded.subdomain.startswith("api.")
    assert loaded.ticket_ids == [] and loaded.dry_run is False
    assert not hasattr(loaded, "old")


class Shape(TypedDict):
    name: str
    count: int
    note: str | None


def shaped(ctx: StageContext[Any]) -> Shape:
    raise NotImplementedError


def untyped(ctx: StageContext[Any]) -> dict[str, Any]:
    raise NotImplementedError


def test_an_output_its_type_allows_passes_and_one_it_does_not_is_refused_by_place():
    output_check(shaped, {"name": "a", "count": 1, "note": None, "more": ["kept"]})
    output_check(shaped, {"name": "a", "count": 1, "note": "n"})
    with pytest.raises(FatalError, match="/count"):
        output_check(shaped, {"name": "a", "count": "1", "note": None})  # not coerced

    with pytest.raises(FatalError) as caught:
        output_check(shaped, {"name": 7, "note": "secret-value"})

    assert caught.value.code == "stage_output_invalid"
    assert "/name (string_type)" in str(caught.value)
    assert "/count (missing)" in str(caught.value)
    assert "secret-value" not in str(caught.value)


def test_an_output_without_a_typeddict_is_not_judged():
    output_check(untyped, ["anything"])
