"""The dependency rule of docs/architecture.md holds (``tests.architecture`` reads it from the
source), and the check would see a breach: each kind is planted and found."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import architecture
from tests.architecture import ROOT, Import, breaches, circles


def test_the_house_has_no_upward_import_no_circle_and_no_import_in_a_function():
    known = architecture.modules()
    found = list(architecture.imports(known))
    assert {architecture.room(module) for module in known} == set(architecture.LEVELS)
    assert breaches(found) == []
    assert circles(found) == []
    assert architecture.django_in_providers(known) == []


def test_main_prints_the_graph_and_passes(capsys):
    assert architecture.main() == 0
    printed = capsys.readouterr().out
    assert "executions → alfred" in printed
    assert "providers  → nothing of Alfred" in printed


def _one(source: str, target: str, function: str | None = None) -> list[str]:
    return breaches([Import(source, target, 1, function)])


def test_an_upward_or_sideways_import_is_a_breach():
    assert _one("lanes.services", "executions.models")  # a lane knows no execution
    assert _one("executions.acceptance", "workflows.registry")  # the engine knows no workflow
    assert _one("delivery.relay", "workflows.base")  # side by side
    assert _one("alfred.problems", "executions.models")  # the kernel knows no app
    assert _one("providers.aws.route53", "alfred.db")
    assert _one("executions.api.urls", "alfred.urls")  # nothing imports the root
    assert not _one("alfred.urls", "delivery.urls")
    assert not _one("delivery.relay", "executions.models")


def test_the_runtime_builds_on_the_records_only():
    assert _one("executions.runtime.runner", "executions.lanes.reconciler")
    assert _one("executions.runtime.runner", "executions.acceptance")
    assert _one("executions.runtime.runner", "lanes.services")  # the runtime knows no lane
    assert _one("executions.runtime.runner", "providers.aws.acm")
    assert not _one("executions.runtime.runner", "executions.outbox")
    assert not _one("executions.runtime.runner", "alfred.db")


def test_a_workflow_reaches_providers_through_the_steps_only():
    assert _one("workflows.add_domain.stages", "providers.aws.route53")
    assert not _one("workflows.steps.route53", "providers.aws.route53")
    assert not _one("workflows.fields", "providers.hostnames")


def test_only_the_steps_call_providers():
    assert _one("executions.acceptance", "providers.aws.acm")
    assert _one("lanes.services", "providers.config")
    assert _one("delivery.receivers", "providers.gitops.github")
    assert not _one("alfred.apps", "providers.observe")  # the kernel's metrics observe calls


def test_an_import_inside_a_function_is_a_breach_but_in_an_apps_ready():
    assert _one("executions.runtime.runner", "executions.runtime.dispatch", function="_suspend")
    assert not _one("executions.apps", "executions.runtime.registry", function="ready")


def test_a_circle_is_found():
    found = [
        Import("workflows.steps.gitops", "workflows.steps.argocd", 1, None),
        Import("workflows.steps.argocd", "workflows.steps.gitops", 1, None),
        Import("workflows.steps.argocd", "workflows.steps.errors", 1, None),
    ]
    assert circles(found) == [["workflows.steps.argocd", "workflows.steps.gitops"]]


# The words of the workflows and of their providers: none belongs in the engine (docs/
# architecture.md, "The house"), which learns what it shows of a workflow from the catalogue.
WORKFLOW_VOCABULARY = re.compile(
    r"add-subdomain|add-domain|onboard-domain|add-certificate|update-lambda-version"
    r"|add_subdomain|add_domain|onboard_domain|add_certificate|update_lambda_version"
    r"|[Rr]oute ?53|\bACM\b|\bacm\b|Lambda|[Gg]it[Hh]ub|[Aa]rgo ?CD|argocd|\b[Zz]ones?\b"
    r"|[Ss]ubdomains?|hosted.zone|[Cc]loud[Ff]ront|\bDNS\b|\b[Cc]ertificates?\b|[Kk]irby"
    r"|\b[Ff]leets?\b|\b[Dd]omains?\b|\bnginx\b|\bRecord sets?\b"
)
ENGINE = ROOT / "executions"
ENGINE_TEMPLATES = ROOT / "templates" / "admin" / "executions"


def _engine_sources() -> list[Path]:
    code = [p for p in ENGINE.rglob("*.py") if "migrations" not in p.parts]
    return code + sorted(ENGINE_TEMPLATES.rglob("*.html"))


def test_the_engine_names_no_workflow_and_no_provider():
    """Its code (comments and messages included) and its admin templates: what an execution
    acts on, how its plan reads and what its search looks in come from the workflow, through
    the catalogue (``executions.catalog.Workflow``)."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for path in _engine_sources()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for match in [WORKFLOW_VOCABULARY.search(line)]
        if match
    ]
    assert len(_engine_sources()) > 60
    assert found == []


def test_the_vocabulary_check_finds_a_workflow_word():
    assert WORKFLOW_VOCABULARY.search('subject = data["zone"]  # the Route53 zone')
    assert not WORKFLOW_VOCABULARY.search("timezone.now(); lambda x: x; the executions' lanes")


def _ready_calls(apps_py: Path) -> set[str]:
    """What an app's ``ready()`` calls (``name`` or ``object.method``), and the modules it
    imports for their side effect alone (``import name``: imported, never used)."""
    tree = ast.parse(apps_py.read_text())
    ready = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "ready"
    )
    used = {n.id for n in ast.walk(ready) if isinstance(n, ast.Name)}
    found: set[str] = set()
    for node in ast.walk(ready):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name):
                found.add(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                found.add(f"{func.value.id}.{func.attr}")
        elif isinstance(node, ast.ImportFrom):
            found |= {f"import {a.name}" for a in node.names if (a.asname or a.name) not in used}
    return found


def test_every_hook_up_is_in_the_architecture_documents_table():
    """docs/architecture.md, "The house": what each ``ready()`` connects, listed where a
    newcomer looks; a hook-up added or removed in code and not in the table fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- hook-ups: start -->")[1].split("<!-- hook-ups: end -->")[0]
    documented = {
        (cells[1], cells[2].strip("`"))
        for line in table.splitlines()
        if (cells := [c.strip() for c in line.split("|")]) and len(cells) > 3
        if cells[1] not in ("App", "---")
    }
    in_code = {
        (path.parent.name, call)
        for path in sorted(ROOT.glob("*/apps.py"))
        for call in _ready_calls(path)
    }
    assert len(in_code) >= 12
    assert documented == in_code
