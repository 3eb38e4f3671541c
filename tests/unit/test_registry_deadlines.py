"""A workflow's deadline is registered only when the first claim's statement can carry it
(``executions.runtime.handoff``: every registered deadline travels in one JSON parameter, so
one that JSON cannot say would stop every first claim, not only its own workflow's)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from executions.runtime import registry
from executions.runtime.registry import Definition, definition_deadlines, register


@pytest.fixture(autouse=True)
def _registry_restored() -> Iterator[None]:
    """The workflows registered here leave with the test (the registry is the process's)."""
    kept = dict(registry._DEFINITIONS)
    yield
    registry._DEFINITIONS.clear()
    registry._DEFINITIONS.update(kept)


def _definition(name: str, deadline: float | None) -> Definition:
    return Definition(
        name=name,
        stages=("only",),
        run_stage=lambda stage, ctx: None,
        canonicalize=dict,
        deadline_seconds=deadline,
    )


@pytest.mark.parametrize("deadline", [math.inf, math.nan, -1.0])
def test_a_deadline_json_cannot_carry_or_in_the_past_is_refused_at_registration(deadline):
    with pytest.raises(ValueError, match="deadline_seconds"):
        register(_definition("unit-bad-deadline", deadline))

    assert "unit-bad-deadline" not in definition_deadlines()


def test_a_finite_deadline_is_registered_and_none_means_no_deadline():
    register(_definition("unit-deadline", 90.0))
    register(_definition("unit-no-deadline", None))

    deadlines = definition_deadlines()

    assert deadlines["unit-deadline"] == 90.0
    assert "unit-no-deadline" not in deadlines
