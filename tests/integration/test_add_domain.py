"""add-domain end to end: a real Celery worker (one for the module), real PostgreSQL and
Redis, and the whole sandbox (tests/support/platform_world.py). Everything is counted from the
stand-ins' own records: Route53's change batches, moto's certificates, the commits on each
branch, ArgoCD's operations."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from executions.drift import drift_check_now
from executions.models import Drift, Execution, StepReceipt
from providers.config import ProviderConfig
from providers.gitops.concerns import (
    CALIPSO_CORS_PATH,
    DEIMOS_SERVER_NAMES_PATH,
    MYSTIQUE_VALUES_PATH,
    NGINX_VALUES_PATH,
)
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_add_certificate import certificates_of
from tests.integration.test_engine import assert_gapless
from tests.support import platform_world as world
from tests.support.helpers import submit
from workflows.steps.argocd import CONVERGE_TIMEOUT_SECONDS

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with world.sandbox_started() as started:
        yield started


@pytest.fixture(scope="module")
def module_worker(sandbox: Sandbox, django_db_setup: None) -> Iterator[WorkerProcess]:
    with world.platform_worker(sandbox, "domain") as worker:
        yield worker


@pytest.fixture
def platform(module_worker: WorkerProcess, sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.clear_faults()
    quiesce(60)


def _domain() -> str:
    return f"d{uuid.uuid4().hex[:8]}.example.com"


def terminal(execution_id: str, timeout: float = 90.0, *, rollback: bool = False) -> Execution:
    def done() -> Execution | None:
        execution = Execution.objects.select_related("current_run").get(pk=execution_id)
        run = execution.current_run
        ended = execution.terminal and run is not None and (run.kind == "rollback") == rollback
        return execution if ended else None

    try:
        return wait_for(done, timeout=timeout, interval=0.2)
    except AssertionError:
        execution = Execution.objects.get(pk=execution_id)
        stages = list(execution.current_run.stages.values_list("name", "status", "error"))
        receipts = list(
            StepReceipt.objects.filter(run_id=execution.current_run_id)
            .order_by("id")
            .values_list("stage", "step_key", "status")
        )
        raise AssertionError(f"{execution.status} {stages} {receipts}") from None


def _output(execution_id: str, stage: str) -> Any:
    execution = Execution.objects.get(pk=execution_id)
    return execution.current_run.stages.get(name=stage).output


def test_add_domain_with_kirby_routing_succeeds_end_to_end(api, platform):
    # given
    domain = _domain()
    started = time.time()

    # when
    body = submit(api, "add-domain", {"domain": domain, "kirby_mode": "enabled"}).json()
    execution = terminal(body["id"])

    # then: succeeded, one child certificate
    assert execution.status == "succeeded", execution.error
    children = list(Execution.objects.filter(parent_id=execution.id))
    assert [c.workflow for c in children] == ["add-certificate"]
    assert children[0].status == "succeeded"
    assert len(certificates_of(platform.aws, children[0].id)) == 1
    # one alias batch of the domain and its www name
    batches = world.batches_of(platform, execution.id)
    assert len(batches) == 1
    # two Helm commits with the documented subjects and trailers
    helm = world.helm_commits(platform, execution.id)
    assert sorted(c["subject"] for c in helm) == [
        f"feat(kirby-routing): add {domain}",
        f"feat(nginx-hosts): add {domain}",
    ]
    for commit in helm:
        assert commit["parsed"].operation == f"{execution.id}:{commit['parsed'].scope}"
        assert {e.entry for e in commit["parsed"].entries} == {domain, f"www.{domain}"}
    assert f"- {domain}" in world.helm_file(platform, NGINX_VALUES_PATH)
    assert f"- www.{domain}" in world.helm_file(platform, MYSTIQUE_VALUES_PATH)
    # the applications converged after the commits, not before
    routed = {c["scope"]: c for c in _output(execution.id, "routing")["commits"]}
    for scope, app in (("nginx-hosts", "nginx-ingress"), ("kirby-routing", "mystique")):
        sha = routed[scope]["commit"]
        judged = routed[scope]["converged"]["applications"]
        assert [j["application"] for j in judged] == [app]
        ops = [
            op for op in platform.argocd.operations(app) if op["revision"] == judged[0]["revision"]
        ]
        assert ops and all(op["started_at"] >= started for op in ops), sha
    # one booking commit touching both files, and the assistance
    booking = world.booking_commits(platform, execution.id)
    assert len(booking) == 1
    assert booking[0]["subject"] == f"feat(nginx-booking): add {domain}"
    paths = {e.path for e in booking[0]["parsed"].entries}
    assert paths == {CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH}
    assert _output(execution.id, "booking")["commit"] == booking[0]["sha"]
    [help_] = execution.assistance
    assert help_["kind"] == "platform_nginx_deployment"
    assert help_["commit"] == booking[0]["sha"]
    assert execution.result["verified"] is True
    assert_gapless(execution.id)


def test_a_domain_already_on_the_platform_books_nothing_and_asks_for_no_help(api, platform):
    # given: acme.com is in every file and aliases the edge
    before = platform.github.commit_count(world.BOOKING_REPO, world.BRANCH)

    # when
    body = submit(api, "add-domain", {"domain": "acme.com"}).json()
    execution = terminal(body["id"])

    # then
    assert execution.status == "succeeded", execution.error
    assert _output(execution.id, "booking")["noop"] is True
    assert execution.assistance == []
    assert platform.github.commit_count(world.BOOKING_REPO, world.BRANCH) == before
    assert world.helm_commits(platform, execution.id) == []
    assert world.batches_of(platform, execution.id) == []


def _zones_named(platform: Sandbox, name: str) -> list[Any]:
    route53 = platform.aws.route53
    return [z for z in route53._zones.values() if z.name.rstrip(".") == name]


def _served(platform: Sandbox, name: str) -> list[str]:
    """The alias targets of the A and AAAA record sets at ``name``, in any zone."""
    found = []
    for zone in list(platform.aws.route53._zones.values()):
        for kind in ("A", "AAAA"):
            rrset = zone.rrsets.get((f"{name}.", kind, None))
            if rrset is not None and rrset.alias is not None:
                found.append(f"{kind} {rrset.alias.dns_name}")
    return found


def _rollback(operator_api: Any, execution_id: str) -> Execution:
    response = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "test"}, format="json"
    )
    assert response.status_code == 202, response.content
    return terminal(execution_id, rollback=True)


def test_onboard_domain_creates_one_zone_reports_its_delegation_then_adds_the_domain(api, platform):
    # given: a domain with no hosted zone
    domain = f"o{uuid.uuid4().hex[:8]}.org"
    assert _zones_named(platform, domain) == []

    # when
    body = submit(api, "onboard-domain", {"domain": domain}).json()
    execution = terminal(body["id"])

    # then
    assert execution.status == "succeeded", execution.error
    [zone] = _zones_named(platform, domain)
    kinds = [a["kind"] for a in execution.assistance]
    assert kinds == ["registrar_delegation", "platform_nginx_deployment"]
    delegation = execution.assistance[0]
    assert delegation["name_servers"] and delegation["zone"] == zone.id
    assert [c.workflow for c in Execution.objects.filter(parent_id=execution.id)] == [
        "add-certificate"
    ]
    assert len(world.helm_commits(platform, execution.id)) == 1  # nginx hosts; no Kirby
    assert len(world.booking_commits(platform, execution.id)) == 1
    assert _served(platform, domain) and _served(platform, f"www.{domain}")
    assert execution.result["verified"] is True


def test_add_domain_rolls_back_exactly_what_it_owns_and_its_child_certificate(
    api, operator_api, platform
):
    # given: a domain added, then a hand-made entry beside its own in the same file
    domain = _domain()
    execution = terminal(
        submit(api, "add-domain", {"domain": domain, "kirby_mode": "enabled"}).json()["id"]
    )
    assert execution.status == "succeeded", execution.error
    child = Execution.objects.get(parent_id=execution.id)
    [certificate] = certificates_of(platform.aws, child.id)
    nginx = world.helm_file(platform, NGINX_VALUES_PATH)
    handmade = f"hand-{uuid.uuid4().hex[:6]}.example.org"
    platform.github.commit_files(
        world.HELM_REPO,
        world.BRANCH,
        {
            NGINX_VALUES_PATH: nginx.replace(
                f"    - {domain}\n", f"    - {domain}\n    - {handmade}\n"
            )
        },
        "chore: a teammate adds a host\n",
    )

    # when
    execution = _rollback(operator_api, execution.id)

    # then
    assert execution.status == "rolled_back", execution.error
    nginx = world.helm_file(platform, NGINX_VALUES_PATH)
    assert f"- {domain}\n" not in nginx and f"- www.{domain}\n" not in nginx
    assert f"- {handmade}" in nginx
    assert domain not in world.helm_file(platform, MYSTIQUE_VALUES_PATH)
    assert domain.replace(".", "\\\\.") not in world.booking_file(platform, CALIPSO_CORS_PATH)
    assert domain not in world.booking_file(platform, DEIMOS_SERVER_NAMES_PATH)
    subjects = sorted(
        c["subject"]
        for c in world.helm_commits(platform, execution.id)
        + world.booking_commits(platform, execution.id)
        if c["parsed"].type == "revert"
    )
    assert subjects == [
        f"revert(kirby-routing): remove {domain}",
        f"revert(nginx-booking): remove {domain}",
        f"revert(nginx-hosts): remove {domain}",
    ]
    assert _served(platform, domain) == [] and _served(platform, f"www.{domain}") == []
    child.refresh_from_db()
    assert child.status == "rolled_back"
    assert certificates_of(platform.aws, child.id) == []
    assert certificate["CertificateArn"]
    assert_gapless(execution.id)


def test_onboard_domain_rolls_back_to_no_zone(api, operator_api, platform):
    domain = f"o{uuid.uuid4().hex[:8]}.org"
    execution = terminal(submit(api, "onboard-domain", {"domain": domain}).json()["id"])
    assert execution.status == "succeeded", execution.error

    execution = _rollback(operator_api, execution.id)

    assert execution.status == "rolled_back", execution.error
    assert _zones_named(platform, domain) == []
    assert Execution.objects.get(parent_id=execution.id).status == "rolled_back"


def test_faults_during_a_run_repeat_no_commit_batch_or_zone(api, platform):
    # given: a lost CreateHostedZone response, a lost commit response (the first Helm
    # commit's), an application that converges late
    domain = f"o{uuid.uuid4().hex[:8]}.org"
    platform.aws.faults.arm("CreateHostedZone", "lose_response", times=1)
    platform.github.faults.arm("update_ref", "lose_response", times=1)
    platform.argocd.faults.arm("application:nginx-ingress", "never_converge", times=None)

    # when
    execution_id = submit(api, "onboard-domain", {"domain": domain}).json()["id"]
    wait_for(
        lambda: Execution.objects.filter(
            pk=execution_id,
            current_run__stages__name="routing",
            current_run__stages__status="waiting",
        ).exists(),
        timeout=60,
        interval=0.2,
    )
    time.sleep(2.0)  # still converging: polled again and again, holding no worker between
    # ... and someone else commits to the booking branch just before Alfred's commit lands
    platform.github.faults.arm("update_ref", "concurrent_ref_update", times=1)
    platform.argocd.faults.clear()
    execution = terminal(execution_id)

    # then
    assert execution.status == "succeeded", execution.error
    assert len(_zones_named(platform, domain)) == 1
    assert len(world.helm_commits(platform, execution.id)) == 1
    assert len(world.batches_of(platform, execution.id)) == 1
    [booking] = world.booking_commits(platform, execution.id)
    updates = platform.github.ref_updates(world.BOOKING_REPO)
    concurrent = [u for u in updates if u["source"] == "fault"]
    assert concurrent and booking["parents"] == [concurrent[-1]["new"]]
    assert not any(u["forced"] for u in platform.github.ref_updates())
    deimos = world.booking_file(platform, DEIMOS_SERVER_NAMES_PATH)
    assert domain in deimos and f"www.{domain}" in deimos
    routing = _output(execution.id, "routing")["commits"][0]
    assert routing["converged"]["applications"][0]["application"] == "nginx-ingress"
    wait = StepReceipt.objects.get(
        run__execution_id=execution.id, stage="routing", step_key="converged"
    )
    assert wait.output["polls"] >= 2


def _first_start(execution: Execution) -> datetime:
    """When the execution's first run claimed its first stage."""
    return min(
        s.started_at for s in execution.runs.order_by("number")[0].stages.all() if s.started_at
    )


def test_three_queued_domains_run_one_after_another_children_inside(api, platform):
    # when
    ids = [submit(api, "add-domain", {"domain": _domain()}).json()["id"] for _ in range(3)]
    executions = [terminal(i, timeout=120) for i in ids]

    # then: each root ran after the one before had finished, its child inside its window
    assert [e.status for e in executions] == ["succeeded"] * 3
    windows = []
    for execution in executions:
        started = _first_start(execution)
        child = Execution.objects.get(parent_id=execution.id)
        assert child.finished_at is not None and execution.finished_at is not None
        assert started <= _first_start(child) <= child.finished_at <= execution.finished_at
        windows.append((started, execution.finished_at))
    for (_, finished), (next_started, _) in itertools.pairwise(windows):
        assert finished <= next_started


def test_dry_runs_plan_from_the_real_providers_and_change_nothing(api, platform):
    # given
    domain = _domain()
    onboarded = f"o{uuid.uuid4().hex[:8]}.org"
    commits = {
        repo: platform.github.commit_count(repo, world.BRANCH)
        for repo in (world.HELM_REPO, world.BOOKING_REPO)
    }
    batches = len(platform.aws.route53.change_batches)

    # when
    added = submit(
        api, "add-domain", {"domain": domain, "kirby_mode": "enabled", "dry_run": True}
    ).json()
    zone = submit(api, "onboard-domain", {"domain": onboarded, "dry_run": True}).json()
    executions = [terminal(added["id"]), terminal(zone["id"])]

    # then: both succeed as simulations, and no provider changed
    for execution in executions:
        assert execution.status == "succeeded", execution.error
        assert execution.result["verified"] == "simulated"
        assert execution.assistance == []
    routed = _output(added["id"], "routing")["commits"]
    assert [c["simulated"] for c in routed] == [True, True]
    assert {e["entry"] for e in routed[0]["entries"]} == {domain, f"www.{domain}"}
    assert all(
        platform.github.commit_count(repo, world.BRANCH) == count for repo, count in commits.items()
    )
    assert len(platform.aws.route53.change_batches) == batches
    assert _zones_named(platform, onboarded) == []
    [child] = Execution.objects.filter(parent_id=added["id"])
    assert child.status == "succeeded" and child.input["dry_run"] is True
    assert certificates_of(platform.aws, child.id) == []


def _retry_and_recover(api: Any, operator_api: Any, execution_id: str) -> Execution:
    """Retry a failed root, then (its failure past planning blocked its lane for an
    operator) recover the lane to it: the runbook's order."""
    retried = api.post(f"/api/v1/executions/{execution_id}/retry", {}, format="json")
    assert retried.status_code == 202, retried.content
    recovered = operator_api.post(
        "/api/v1/lanes/aws-infrastructure/recover",
        {"expected_owner": execution_id, "reason": "the sync was looked at"},
        format="json",
    )
    assert recovered.status_code == 202, recovered.content
    return terminal(execution_id)


def test_a_child_input_the_child_refuses_fails_the_parent_as_such(api, platform):
    # given: a domain of 250 characters, valid; its www name (254) is not, and the
    # certificate's child add-certificate is asked for both
    labels = ["a" * 63, "b" * 63, "c" * 63, "d" * (250 - 3 * 64 - len(".example.com"))]
    domain = ".".join(labels) + ".example.com"
    assert len(domain) == 250

    # when
    execution = terminal(submit(api, "add-domain", {"domain": domain}).json()["id"])

    # then: the parent's failure, named, with the child's field errors; no child created
    assert execution.status == "failed"
    assert execution.error["code"] == "child_input_invalid", execution.error
    assert execution.error["errors"][0]["field"] == "/alternative_names/0"
    assert not Execution.objects.filter(parent_id=execution.id).exists()


def test_a_sync_that_never_finishes_fails_after_the_convergence_wait_not_the_deadline(
    api, platform, durable_clock
):
    # given: nginx-ingress's sync of the Helm commit runs and runs
    platform.argocd.faults.arm("application:nginx-ingress", "never_converge", times=None)
    try:
        execution_id = submit(api, "add-domain", {"domain": _domain()}).json()["id"]
        wait_for(
            lambda: StepReceipt.objects.filter(
                run__execution_id=execution_id, step_key="converged", status="waiting"
            ).exists(),
            timeout=60,
        )

        # when: the convergence wait's 30 minutes pass (the durable clock moved on)
        durable_clock.advance(execution_id, CONVERGE_TIMEOUT_SECONDS)

        # then
        execution = terminal(execution_id)
    finally:
        platform.argocd.faults.clear()
    assert execution.status == "failed"
    assert execution.error["code"] == "wait_timed_out", execution.error
    assert len(world.helm_commits(platform, execution.id)) == 1  # committed once, kept


def test_a_retry_after_a_failed_sync_repeats_nothing_and_waits_for_the_fixed_sync(
    api, operator_api, platform
):
    # given: the nginx-ingress sync of the Helm commit fails
    from providers.argocd import ArgoCD
    from providers.sandbox.stack import ARGOCD_TOKEN

    domain = _domain()
    platform.argocd.faults.arm(
        "application:nginx-ingress", "never_converge", times=None, phase="Failed"
    )
    execution = terminal(submit(api, "add-domain", {"domain": domain}).json()["id"])
    assert execution.status == "failed"
    assert execution.error["code"] == "argocd_sync_failed"
    [commit] = world.helm_commits(platform, execution.id)
    platform.argocd.faults.clear()

    # when: a retry while the sync is still failed, then again once someone synced it
    execution = _retry_and_recover(api, operator_api, execution.id)
    assert execution.error["code"] == "argocd_sync_failed"
    with ArgoCD(platform.argocd.url, ARGOCD_TOKEN) as argocd:
        argocd.sync("nginx-ingress", commit["sha"], operation="operator: sync by hand")
    execution = _retry_and_recover(api, operator_api, execution.id)

    # then: one child and one certificate, one Helm commit, one batch, across three runs
    assert execution.status == "succeeded", execution.error
    assert execution.runs.count() == 3
    [child] = Execution.objects.filter(parent_id=execution.id)
    assert len(certificates_of(platform.aws, child.id)) == 1
    assert world.helm_commits(platform, execution.id) == [commit]
    assert len(world.batches_of(platform, execution.id)) == 1
    assert len(world.booking_commits(platform, execution.id)) == 1


def test_the_drift_watch_finds_a_routing_entry_removed_by_hand(api, platform, settings):
    # given: a domain added, in place
    domain = _domain()
    execution = terminal(submit(api, "add-domain", {"domain": domain}).json()["id"])
    assert execution.status == "succeeded", execution.error
    settings.ALFRED_PROVIDERS = ProviderConfig.from_env(platform.environ())
    assert drift_check_now(execution.id) == "in_place"
    commits = len(world.helm_commits(platform, execution.id))

    # when: a teammate removes its host from the nginx values
    nginx = world.helm_file(platform, NGINX_VALUES_PATH)
    platform.github.commit_files(
        world.HELM_REPO,
        world.BRANCH,
        {NGINX_VALUES_PATH: nginx.replace(f"    - {domain}\n", "")},
        "chore: a teammate tidies the hosts\n",
    )

    # then: the watch names the concern, the repository and the entry that is gone, and
    # commits nothing itself
    assert drift_check_now(execution.id) == "drifted"
    (finding,) = Drift.objects.get(execution=execution, status="open").findings
    assert finding["what"] == f"nginx-hosts entries of {domain} on {world.HELM_REPO}@{world.BRANCH}"
    assert domain in str(finding["expected"]) and finding["found"] is None
    assert len(world.helm_commits(platform, execution.id)) == commits
