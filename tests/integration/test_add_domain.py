"""add-domain end to end: a real Celery worker (one for the module), real PostgreSQL and
Redis, and the whole sandbox (tests/platform_world.py). Everything is counted from the
stand-ins' own records: Route53's change batches, moto's certificates, the commits on each
branch, ArgoCD's operations."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from executions.models import Execution
from providers.gitops.concerns import (
    CALIPSO_CORS_PATH,
    DEIMOS_SERVER_NAMES_PATH,
    MYSTIQUE_VALUES_PATH,
    NGINX_VALUES_PATH,
)
from providers.sandbox.stack import Sandbox
from tests import platform_world as world
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.helpers import submit
from tests.integration.test_add_certificate import certificates_of
from tests.integration.test_engine import assert_gapless

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

    return wait_for(done, timeout=timeout, interval=0.2)


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
            op
            for op in platform.argocd.operations(app)
            if op["revision"] == judged[0]["revision"]
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
