"""The dependency rules of DESIGN §1, read from the source (every import, a function's own
included): the engine imports no workflow and no provider, providers import no Django
model and nothing of Alfred's apps, lanes import no workflow and no provider, and the
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


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, path in _modules(package).items()
        for imported in _imports(path)
        if imported.startswith(forbidden)
    )


def test_the_engine_knows_no_workflow_and_no_provider():
    assert _offenders("executions.engine", ("executions.workflows", "providers", "lanes")) == []


def test_providers_know_no_django_model_and_none_of_alfreds_apps():
    forbidden = ("django.db", "executions", "lanes", "alfred")
    assert _offenders("providers", forbidden) == []


def test_lanes_know_no_workflow_and_no_provider():
    assert _offenders("lanes", ("executions.workflows", "providers")) == []


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
