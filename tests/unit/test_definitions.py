"""Which recorded runs a definition reads the stage outputs of (``Definition.reads_outputs_of``):
what a continuation carries over after a deploy (docs/runbook.md, "A deploy changed a
workflow")."""

from __future__ import annotations

from typing import Any

import pytest

from executions.runtime.registry import Definition


def _definition(version: int, stages: tuple[str, ...], compatible: tuple[int, ...] = ()) -> Any:
    return Definition(
        name="w",
        stages=stages,
        run_stage=lambda stage, ctx: None,
        canonicalize=dict,
        version=version,
        outputs_compatible_with=compatible,
    )


V2 = ("plan", "apply", "announce", "verify")


@pytest.mark.parametrize(
    ("recorded", "compatible", "reads"),
    [
        ({"version": 2, "stages": list(V2)}, (), True),  # the same definition
        ({"version": 1, "stages": ["plan", "apply", "verify"]}, (), False),  # an earlier one
        ({"version": 1, "stages": ["plan", "apply", "verify"]}, (1,), True),  # declared so
        ({"version": 2, "stages": ["plan", "apply", "verify"]}, (), False),  # stages differ
        ({"version": 3, "stages": list(V2)}, (1,), False),  # another version, not declared
        (None, (), True),  # a run older than the record is taken as the current one
    ],
)
def test_a_definition_reads_outputs_only_of_its_own_runs_or_declared_compatible_ones(
    recorded, compatible, reads
):
    assert _definition(2, V2, compatible).reads_outputs_of(recorded) is reads
