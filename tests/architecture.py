"""The house's dependency rule, read from the source (docs/architecture.md): every import of
every module, a function's own included. ``python -m tests.architecture`` prints the graph of
the rooms and every breach, and exits 1 on any; ``tests/unit/test_architecture.py`` holds it.

The rooms, bottom to top; a module imports only its own room and the rooms below it:

    providers   adapters of AWS, GitHub and ArgoCD: no Django model, nothing of Alfred's
    alfred      the kernel every app shares (database helpers, ids, problems, principals,
                tokens, metrics, logs, the Celery app, the admin's base)
    lanes       the concurrency lanes: imports nothing of the engine, and no provider
    executions  the engine: executions and the durable runtime (executions.runtime: knows
                no lane, no workflow, no provider; of the rest of executions only the
                records it writes); imports no provider
    workflows   the five, over workflows.steps: of the workflows only the steps import
                providers (and every workflow the pure providers.hostnames)
    delivery    event streams, webhooks, receivers (beside workflows: neither imports the
                other)
    root        what puts the house together: settings, urls, the ASGI/WSGI applications,
                the local stack's launcher

Besides: no import circle between modules, and no first-party import inside a function
(Django's ``AppConfig.ready`` excepted: it runs once the models are loaded, which is when an
app may connect what the rooms below call without importing it).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("providers", "alfred", "lanes", "executions", "workflows", "delivery")
# The composition root: modules of the alfred package that stand above every room.
COMPOSITION_ROOT = ("alfred.settings", "alfred.settings_test", "alfred.urls", "alfred.asgi",
                    "alfred.wsgi", "alfred.devstack")  # fmt: skip
# Each room's level; rooms on one level (workflows, delivery) may not import each other.
LEVELS = {
    "providers": 0,
    "alfred": 1,
    "lanes": 2,
    "executions": 3,
    "workflows": 4,
    "delivery": 4,
    "root": 5,
}
# What the runtime builds on, of the rest of executions: the records it writes.
RUNTIME_SEES = ("executions.runtime", "executions.models", "executions.outbox", "executions.links",
                "executions.identity", "executions.events")  # fmt: skip


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the first-party module imported
    line: int
    in_function: str | None  # the function it is imported in, if any


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` names (``pkg.mod.Class`` → ``pkg.mod``), if first-party."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path]) -> Iterator[Import]:
    for source, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for function, node in _walk(tree, None):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, known)
                if target is not None and target != source:
                    yield Import(source, target, node.lineno, function)


def _walk(node: ast.AST, function: str | None) -> Iterator[tuple[str | None, ast.AST]]:
    for child in ast.iter_child_nodes(node):
        yield function, child
        inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else None
        yield from _walk(child, inner or function)


def room(module: str) -> str:
    if module.startswith(COMPOSITION_ROOT):
        return "root"
    return module.split(".")[0]


def breaches(found: list[Import]) -> list[str]:
    out = []
    for i in found:
        source, target = room(i.source), room(i.target)
        where = f"{i.source}:{i.line} imports {i.target}"
        if source != target and (
            LEVELS[target] > LEVELS[source]
            or (LEVELS[target] == LEVELS[source] and source != target)
        ):
            out.append(f"{where}: {source} is below {target} or beside it")
        if (
            i.source.startswith("executions.runtime")
            and target == "executions"
            and not i.target.startswith(RUNTIME_SEES)
        ):
            out.append(f"{where}: the runtime builds on the engine's records only")
        if i.source.startswith("executions.runtime") and target == "lanes":
            out.append(f"{where}: the runtime knows no lane")
        if target == "providers" and source in ("lanes", "executions", "delivery"):
            out.append(f"{where}: providers are called by the workflows' steps only")
        if (
            source == "workflows"
            and target == "providers"
            and not i.source.startswith("workflows.steps")
            and i.target != "providers.hostnames"
        ):
            out.append(f"{where}: a workflow reaches providers through workflows.steps")
        if i.in_function is not None and i.in_function != "ready":
            out.append(f"{where} inside {i.in_function}(): import it at the top")
    return sorted(set(out))


def django_in_providers(known: dict[str, Path]) -> list[str]:
    """Providers hold no Django model: they import nothing of django.db."""
    out = []
    for module, path in known.items():
        if room(module) != "providers":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            out += [f"{module} imports {n}" for n in names if n.startswith("django.db")]
    return sorted(out)


def circles(found: list[Import]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        graph.setdefault(i.source, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def graph_lines(found: list[Import]) -> list[str]:
    edges = Counter(
        (room(i.source), room(i.target)) for i in found if room(i.source) != room(i.target)
    )
    lines = []
    for name in sorted(LEVELS, key=lambda r: (-LEVELS[r], r)):
        below = [f"{t} ({n})" for (s, t), n in sorted(edges.items()) if s == name]
        lines.append(f"{name:<10} → {', '.join(below) or 'nothing of Alfred'}")
    return lines


def main() -> int:
    known = modules()
    found = list(imports(known))
    print("The rooms, top to bottom, and what each imports (imports counted):")
    print("\n".join(f"  {line}" for line in graph_lines(found)))
    problems = breaches(found) + django_in_providers(known)
    problems += ["a circle: " + " ⇄ ".join(c) for c in circles(found)]
    print(f"\n{len(known)} modules, {len(found)} first-party imports: ", end="")
    if not problems:
        print("no upward import, no circle, no import inside a function.")
        return 0
    print(f"{len(problems)} breaches:")
    print("\n".join(f"  {p}" for p in problems))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
