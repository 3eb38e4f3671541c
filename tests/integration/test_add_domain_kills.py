"""add-domain and onboard-domain with their worker SIGKILLed at every step boundary in turn —
before and after each stage, after a commit, a batch, a zone creation or deletion landed
before its receipt, on a poll of the ArgoCD wait — and inside their rollbacks: each still
ends as it would have, with no duplicate commit, batch, zone or certificate, and no event
twice that happens once.

The kill points sit at the adapters' network edge in the worker
(:mod:`tests.support.kill_points_platform`); all of an execution's points are armed at once, and
each fires once, so one execution passes every boundary killed. Everything is counted on the
stand-ins' side (tests/support/platform_world.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from executions.models import Execution
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_add_certificate import certificates_of
from tests.integration.test_add_domain import _served, _zones_named
from tests.integration.test_add_subdomain_kills import _assert_once, _killed
from tests.integration.test_add_subdomain_kills import _finished as _finished_within
from tests.support import platform_world as world
from tests.support.engine_workflows import KILL_POINTS, counters
from tests.support.helpers import submit
from tests.support.kill_points import SETTLE
from tests.support.kill_points_platform import ENABLE

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]

ADD_DOMAIN = ("plan", "certificate", "dns", "routing", "booking", "verify")
ONBOARD = ("plan", "hosted_zone", "certificate", "dns", "routing", "booking", "verify")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with world.sandbox_started() as started:
        yield started


@pytest.fixture(scope="module")
def module_worker(sandbox: Sandbox, django_db_setup: None) -> Iterator[WorkerProcess]:
    with world.platform_worker(sandbox, "domain-kills", **{ENABLE: "1", SETTLE: "1"}) as worker:
        yield worker


@pytest.fixture
def kills_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    counters().delete(KILL_POINTS)
    yield module_worker
    counters().delete(KILL_POINTS)
    quiesce(60)


def _finished(execution_id: str, worker: WorkerProcess, *, rollback: bool = False) -> Execution:
    """As add-subdomain's, with time for a run killed a dozen times and its child."""
    return _finished_within(execution_id, worker, rollback=rollback, timeout=120)


def _arm(domain: str, *points: str) -> None:
    counters().sadd(KILL_POINTS, *[f"{domain}:{point}" for point in points])


def _around(stages: tuple[str, ...]) -> list[str]:
    return [f"{when}:{stage}" for stage in stages for when in ("before", "after")]


def _roll_back(
    operator_api: Any, execution_id: str, worker: WorkerProcess, *, confirm: bool = False
) -> Execution:
    """Roll back; with ``confirm``, an operator approves the batch back that the rollback
    pauses for (a batch whose landing was recovered after its worker died is ``ownership:
    unproven``: its undo is shown as a plan first)."""
    answer = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "kill test"}, format="json"
    )
    assert answer.status_code == 202, answer.content
    if confirm:
        wait_for(
            lambda: Execution.objects.get(pk=execution_id).status == "paused",
            timeout=60,
            interval=0.2,
        )
        pending = operator_api.get(f"/api/v1/executions/{execution_id}").json()
        answer = operator_api.post(
            f"/api/v1/executions/{execution_id}/approve",
            {"plan_hash": pending["pending_approval"]["plan_hash"], "reason": "ours"},
            format="json",
        )
        assert answer.status_code == 202, answer.content
    return _finished(execution_id, worker, rollback=True)


def _assert_added_once(platform: Sandbox, execution: Execution, concerns: int) -> Execution:
    [child] = Execution.objects.filter(parent_id=execution.id)
    assert child.status == "succeeded"
    assert len(certificates_of(platform.aws, child.id)) == 1
    assert len(world.batches_of(platform, execution.id)) == 1
    helm = world.helm_commits(platform, execution.id)
    assert len(helm) == concerns and len({c["parsed"].scope for c in helm}) == concerns
    assert len(world.booking_commits(platform, execution.id)) == 1
    return child


def test_add_domain_killed_at_every_boundary_in_turn_then_in_its_rollback(
    api, operator_api, kills_worker, sandbox
):
    # given: one kill before and after every stage, after each commit and the batch landed,
    # and on a poll of the convergence wait
    domain = f"k{uuid.uuid4().hex[:8]}.example.com"
    _arm(
        domain,
        *_around(ADD_DOMAIN),
        "change:dns",
        "commit:routing",
        "argocd:routing",
        "commit:booking",
    )

    # when
    body = submit(api, "add-domain", {"domain": domain, "kirby_mode": "enabled"}).json()
    execution = _finished(body["id"], kills_worker)

    # then
    assert execution.status == "succeeded", execution.error
    _killed(kills_worker)
    child = _assert_added_once(sandbox, execution, concerns=2)
    _assert_once(execution.id, dict.fromkeys(ADD_DOMAIN, 1), "execution.succeeded")

    # and when: killed after each revert commit and the batch back landed, and between
    _arm(domain, "before:rollback", "commit:rollback", "change:rollback", "argocd:rollback")
    execution = _roll_back(operator_api, execution.id, kills_worker, confirm=True)

    # then: one revert per commit, one batch back, the child's certificate gone
    assert execution.status == "rolled_back", execution.error
    _killed(kills_worker)
    reverts = [
        c
        for c in world.helm_commits(sandbox, execution.id)
        + world.booking_commits(sandbox, execution.id)
        if c["parsed"].type == "revert"
    ]
    assert sorted(c["parsed"].scope for c in reverts) == [
        "kirby-routing",
        "nginx-booking",
        "nginx-hosts",
    ]
    comment = f"alfred rollback {execution.id}"
    back = [b for b in sandbox.aws.route53.change_batches if b.comment == comment]
    assert len(back) == 1
    assert _served(sandbox, domain) == []
    child.refresh_from_db()
    assert child.status == "rolled_back"
    assert certificates_of(sandbox.aws, child.id) == []
    _assert_once(
        execution.id,
        {**dict.fromkeys(ADD_DOMAIN, 1), "rollback": 1},
        "execution.succeeded",
        "execution.rolled_back",
    )


def test_onboard_domain_killed_at_every_boundary_in_turn_then_in_its_rollback(
    api, operator_api, kills_worker, sandbox
):
    # given
    domain = f"k{uuid.uuid4().hex[:8]}.org"
    _arm(domain, *_around(ONBOARD), "zone:hosted_zone", "change:dns", "commit:booking")

    # when
    body = submit(api, "onboard-domain", {"domain": domain}).json()
    execution = _finished(body["id"], kills_worker)

    # then: one zone, and everything add-domain does once
    assert execution.status == "succeeded", execution.error
    _killed(kills_worker)
    assert len(_zones_named(sandbox, domain)) == 1
    _assert_added_once(sandbox, execution, concerns=1)
    _assert_once(execution.id, dict.fromkeys(ONBOARD, 1), "execution.succeeded")

    # and when: killed after the zone's deletion landed
    _arm(domain, "unzone:rollback", "commit:rollback")
    execution = _roll_back(operator_api, execution.id, kills_worker, confirm=True)

    # then
    assert execution.status == "rolled_back", execution.error
    _killed(kills_worker)
    assert _zones_named(sandbox, domain) == []
