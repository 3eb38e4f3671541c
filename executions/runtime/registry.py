"""What the engine runs, registered by name at start: the workflows' definitions (by
``workflows.apps`` through ``executions.catalog``), the compensations of their mutations (by
``workflows.steps.compensations`` when it is imported) and the claim guards (by
``executions.apps``). The engine imports no workflow and no provider: a rollback finds the undo of
a mutation receipt here, by the receipt's ``resource`` and ``action``. This module imports
nothing else of the engine's but its errors and the stage's types, so nothing the engine
builds on it can form a circle."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from executions.runtime.errors import FatalError
from executions.runtime.stage import StageContext


@dataclass(frozen=True)
class Definition:
    name: str
    stages: tuple[str, ...]
    run_stage: Callable[[str, StageContext], Any]  # (stage, its context) -> its output
    canonicalize: Callable[[Mapping[str, Any]], dict[str, Any]]
    # A run's stored canonical input as its stage code reads it (``ctx.input``): the
    # workflow's typed input (``workflows.inputs``); by default the mapping itself.
    load_input: Callable[[Mapping[str, Any]], Any] = dict
    deadline_seconds: float | None = None
    # The workflow's own count of its changes: a run records it with its stage list, and
    # is run later only by a definition of the same version and stages.
    version: int = 1
    # Earlier versions whose stages' outputs this one reads as its own (the workflow's
    # ``outputs_compatible_with``): a continuation carries their outputs over.
    outputs_compatible_with: tuple[int, ...] = ()
    # The Celery queue of each stage that names one (stage, queue); the rest go to
    # DEFAULT_QUEUE. Where the next stage's queue differs, the worker does not run it on:
    # it hands the run over with a message to that queue (docs/architecture.md, "Queues").
    queues: tuple[tuple[str, str], ...] = ()
    # The time limit, in seconds, of each stage that declares one (stage, seconds): such a
    # stage runs in a message of its own, which Celery stops at the limit (docs/architecture.md,
    # "Queues"); the stage fails ``stage_time_limit``.
    time_limits: tuple[tuple[str, float], ...] = ()

    def queue_of(self, stage: str) -> str:
        return dict(self.queues).get(stage, DEFAULT_QUEUE)

    def time_limit_of(self, stage: str) -> float | None:
        return dict(self.time_limits).get(stage)

    def runs_on_after(self, stage: str, following: str) -> bool:
        """Whether the worker that ran ``stage`` runs ``following`` on, in the same task:
        same queue, and neither of the two bounded by a time limit of its own."""
        return (
            self.queue_of(following) == self.queue_of(stage)
            and self.time_limit_of(stage) is None
            and self.time_limit_of(following) is None
        )

    def recorded(self) -> dict[str, Any]:
        """What a run records of the definition it starts under (``Run.definition``)."""
        return {"version": self.version, "stages": list(self.stages)}

    def reads_outputs_of(self, recorded: Mapping[str, Any] | None) -> bool:
        """Whether a stage output that a run started under ``recorded`` (its
        ``Run.definition``) persisted is valid input for this definition's later stages: the
        run was of this very definition (version and stages), or of a version declared
        compatible. A run older than the record counts as the current one, as
        :func:`definition_of_run` takes it. Anything else was written by other code, for
        other code: a continuation runs that stage again rather than feed it on."""
        if recorded is None:
            return True
        version = recorded.get("version")
        if version in self.outputs_compatible_with:
            return True
        return version == self.version and tuple(recorded.get("stages") or ()) == self.stages


_DEFINITIONS: dict[str, Definition] = {}
DEFAULT_QUEUE = "stages"
# After a stage's time limit (its soft one: the stage is told), the seconds before Celery
# kills the process running it (the hard one: a stage that did not stop).
STAGE_KILL_GRACE_SECONDS = 30.0


def stage_queue(workflow: str | None, stage: str) -> str:
    """The Celery queue ``stage`` of ``workflow`` is sent to (a stage no current definition
    names, a rollback's for one, goes to DEFAULT_QUEUE)."""
    definition = _DEFINITIONS.get(workflow or "")
    return definition.queue_of(stage) if definition is not None else DEFAULT_QUEUE


def stage_queues_all() -> set[str]:
    """Every queue a workflow's stage declares."""
    return {queue for definition in _DEFINITIONS.values() for _, queue in definition.queues}


def stage_time_limit(workflow: str | None, stage: str) -> float | None:
    definition = _DEFINITIONS.get(workflow or "")
    return definition.time_limit_of(stage) if definition is not None else None


def stage_routing_declared() -> bool:
    """Whether any workflow sends a stage to a queue of its own or bounds one by a time limit
    (when none does, publishing needs to know no workflow)."""
    return any(d.queues or d.time_limits for d in _DEFINITIONS.values())


# Earlier versions a deploy still serves, by (name, version): a run started under one wakes
# under it (the workflow keeps it in ``previous`` until no such run is active).
_EARLIER: dict[tuple[str, int], Definition] = {}

# Checks a claim must pass besides the runtime's own (the engine app registers one from
# executions.lanes: a run may start only under its lane's ownership). Each gets the execution
# (its row locked by the claim) and returns why it may not run now, or None.
ClaimGuard = Callable[[Any], "str | None"]
_CLAIM_GUARDS: list[ClaimGuard] = []
# A guard's test in SQL, for a claim made in one statement (``executions.runtime.handoff``):
# given the name of the statement's row of the execution (its columns, locked) and the SQL
# that names its id in the run's row (locked after it: a lock the test takes, in a condition
# that names both, comes after both), a condition true when the guard admits the execution
# (its named parameters prefixed with the guard's own name), with its parameters; false for
# an execution whose test cannot be said in SQL (then the claim is made the slow way). None
# when the guard has no such test at all.
ClaimGuardSql = Callable[[str, str], "tuple[str, dict[str, Any]] | None"]
_CLAIM_GUARDS_SQL: dict[ClaimGuard, ClaimGuardSql] = {}


def claim_guard_register(guard: ClaimGuard, sql: ClaimGuardSql | None = None) -> None:
    if guard not in _CLAIM_GUARDS:
        _CLAIM_GUARDS.append(guard)
    if sql is not None:
        _CLAIM_GUARDS_SQL[guard] = sql


def claim_admits_sql(execution: str, owner: str) -> tuple[str, dict[str, Any]] | None:
    """Every guard's test for the execution whose row the SQL names ``execution`` (its id in
    the run's row named by ``owner``) as one SQL condition, with its parameters; None when
    some guard cannot say its test in SQL."""
    conditions, params = ["TRUE"], {}
    for guard in _CLAIM_GUARDS:
        form = _CLAIM_GUARDS_SQL.get(guard)
        said = form(execution, owner) if form is not None else None
        if said is None:
            return None
        conditions.append(said[0])
        params.update(said[1])
    return " AND ".join(conditions), params


def claim_refusal(execution: Any) -> str | None:
    for guard in _CLAIM_GUARDS:
        reason = guard(execution)
        if reason is not None:
            return reason
    return None


@dataclass(frozen=True)
class Hold:
    """Why a stage may not make a mutation now (a change freeze, ``executions.freezes``):
    ``reason`` for people (the execution's waiting reason), ``topic`` the news that wakes it
    early (the hold lifted), ``until`` when to look again."""

    reason: str
    topic: str
    until: datetime


# Asked before a stage's mutating step runs (not replayed, not in a dry run): given the
# execution's id, its workflow and the run's id, a Hold when the mutation must wait, else None.
MutationGate = Callable[[str, str, str], "Hold | None"]
_MUTATION_GATES: list[MutationGate] = []


def mutation_gate_register(gate: MutationGate) -> None:
    if gate not in _MUTATION_GATES:
        _MUTATION_GATES.append(gate)


def mutation_hold(execution_id: str, workflow: str, run_id: str) -> Hold | None:
    for gate in _MUTATION_GATES:
        hold = gate(execution_id, workflow, run_id)
        if hold is not None:
            return hold
    return None


def register(definition: Definition, *earlier: Definition) -> None:
    """The current definition of a workflow, and the earlier ones it still serves."""
    deadline = definition.deadline_seconds
    if deadline is not None and not (math.isfinite(deadline) and deadline >= 0):
        # the first claim sends every deadline in one JSON parameter (``handoff``)
        raise ValueError(f"workflow {definition.name}: deadline_seconds must be finite, >= 0")
    _DEFINITIONS[definition.name] = definition
    for known in [key for key in _EARLIER if key[0] == definition.name]:
        del _EARLIER[known]
    for old in earlier:
        _EARLIER[(old.name, old.version)] = old


def definition_deadlines() -> dict[str, float]:
    """Each registered workflow's deadline in seconds, for those that have one."""
    return {name: d.deadline_seconds for name, d in _DEFINITIONS.items() if d.deadline_seconds}


def definition_get(name: str) -> Definition:
    try:
        return _DEFINITIONS[name]
    except KeyError:
        raise FatalError(
            f"no workflow named {name!r} is registered", code="unknown_workflow"
        ) from None


def definition_served(name: str, recorded: Mapping[str, Any] | None) -> Definition | None:
    """The definition that runs a run started under ``recorded`` (see
    :func:`definition_of_run`), or None when this code serves it no more: the workflow is
    gone, or neither its current definition nor one it keeps in ``previous`` is the run's.
    What the deploy gate (``manage.py alfred_deploy_check``) asks of every active run."""
    current = _DEFINITIONS.get(name)
    if current is None:
        return None
    if recorded is None:
        return current
    version, stages = recorded.get("version"), tuple(recorded.get("stages") or ())
    for candidate in (current, _EARLIER.get((name, version))) if isinstance(version, int) else ():
        if candidate is not None and candidate.version == version and candidate.stages == stages:
            return candidate
    return None


def definition_of_run(name: str, recorded: Mapping[str, Any] | None) -> Definition:
    """The definition a run started under (``recorded``: its ``Run.definition``; None for a
    run older than the record, taken as the current): the current one if its version and
    stages are the run's, else an earlier one the workflow still serves. Otherwise
    FatalError ``definition_changed``: the code the run was written for is gone, and running
    the new code on the old run's receipts could do anything."""
    current = definition_get(name)
    served = definition_served(name, recorded)
    if served is not None:
        return served
    recorded = dict(recorded or {})
    version, stages = recorded.get("version"), tuple(recorded.get("stages") or ())
    raise FatalError(
        f"{name} changed since this run started (version {version}: {' → '.join(stages)}; now "
        f"version {current.version}: {' → '.join(current.stages)}). Retry the execution to "
        "run it under the current definition, or roll it back (docs/runbook.md, "
        '"A deploy changed a workflow").',
        code="definition_changed",
        started_under=recorded,
        current=current.recorded(),
    )


# A compensation: (the stage's Context, the mutation receipt) -> what it restored. It undoes
# exactly what the receipt says, and fails with code ``drifted`` when the resource is no
# longer in the receipt's ``after`` state.
Compensation = Callable[[StageContext, Mapping[str, Any]], Any]
_COMPENSATIONS: dict[tuple[str, str], Compensation] = {}


def compensation_register(resource: str, action: str, undo: Compensation) -> None:
    """Declare how a mutation receipt of ``resource``/``action`` is undone. Registered once:
    two undos for one kind of mutation would make rollback depend on import order."""
    known = _COMPENSATIONS.get((resource, action))
    if known is not None and known is not undo:
        raise ValueError(f"a compensation for {resource}/{action} is registered already")
    _COMPENSATIONS[(resource, action)] = undo


def compensation_get(resource: str, action: str) -> Compensation:
    try:
        return _COMPENSATIONS[(resource, action)]
    except KeyError:
        raise FatalError(
            f"no compensation is registered for {resource}/{action}",
            code="no_compensation",
            resource=resource,
            action=action,
        ) from None
