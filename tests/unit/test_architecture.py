"""The dependency rules of DESIGN §1, read from the source (every import, a function's own
included): the engine imports no workflow and no provider, providers import no Django
model and nothing of Alfred's apps, lanes import no workflow and no provider — and of
executions only what two modules read at module level, never inside a function — and the
engine's modules import one another without a circle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    base = ROOT / package.replace(".", "/")
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in base.rglob("*.py")
    }


def _imports(path: Path, *, in_functions: bool = False) -> Iterator[str]:
    """Every module ``path`` imports, or (``in_functions``) those imported in a function."""
    tree = ast.parse(path.read_text())
    roots: list[ast.AST] = [tree]
    if in_functions:
        functions = (ast.FunctionDef, ast.AsyncFunctionDef)
        roots = [node for node in ast.walk(tree) if isinstance(node, functions)]
    for node in (found for root in roots for found in ast.walk(root)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _offenders(
    package: str, forbidden: tuple[str, ...], *, in_functions: bool = False
) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, path in _modules(package).items()
        for imported in set(_imports(path, in_functions=in_functions))
        if imported.startswith(forbidden)
    )


def test_the_engine_knows_no_workflow_and_no_provider():
    assert _offenders("executions.engine", ("executions.workflows", "providers", "lanes")) == []


def test_providers_know_no_django_model_and_none_of_alfreds_apps():
    forbidden = ("django.db", "executions", "lanes", "alfred")
    assert _offenders("providers", forbidden) == []


def test_workflows_reach_providers_only_through_the_steps_layer():
    # the input rules share the pure hostname rules (providers.hostnames); nothing else of
    # providers is imported outside executions.workflows.steps
    offenders = [
        o
        for o in _offenders("executions.workflows", ("providers",))
        if not o.startswith("executions.workflows.steps")
        and not o.endswith(("imports providers", "imports providers.hostnames"))
    ]
    assert offenders == []


def test_lanes_know_no_workflow_and_no_provider():
    assert _offenders("lanes", ("executions.workflows", "providers")) == []


# What of executions a lanes module may import, at module level: the reconciler observes an
# owner's execution, run and stages to decide; the API shares the executions' free-text field.
LANES_SEE_OF_EXECUTIONS = {
    "lanes.reconciler": ("executions.models", "executions.engine.errors"),
}


def test_lanes_reach_executions_through_their_port_not_by_importing_them():
    # Everything else — locking the executions a lane names, the events and runs a lane
    # change means — goes through lanes.effects, which the executions app installs: the
    # dependency points executions → lanes, and no import hides in a function.
    assert _offenders("lanes", ("executions",), in_functions=True) == []
    assert (
        sorted(
            f"{module} imports {imported}"
            for module, path in _modules("lanes").items()
            for imported in set(_imports(path))
            if imported.startswith("executions")
            and not imported.startswith(LANES_SEE_OF_EXECUTIONS.get(module, ()))
        )
        == []
    )


def test_the_engine_has_no_import_circle():
    modules = _modules("executions.engine")
    graph = {
        module: {i for i in _imports(path) if i in modules and i != module}
        for module, path in modules.items()
    }
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        for target in sorted(graph[module]):
            if target in trail:
                circles.append(" → ".join([*trail[trail.index(target) :], target]))
            elif len(trail) < len(graph):
                visit(target, [*trail, target])

    for module in graph:
        visit(module, [module])
    assert circles == []
