"""The admin's rollback confirmation lists what the rollback run then does, in its order,
children included: an add-domain with its child add-certificate, run end to end on a real
worker and the sandbox (tests/support/platform_world.py), its page read as the operator sees it, and
the rollback confirmed from that page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from alfred.users import user_set
from executions.models import Execution, RunKind, StepReceipt
from executions.runtime.rollback import CHILD
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess, quiesce
from tests.integration.test_add_domain import terminal
from tests.support import platform_world as world
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]

ROW = re.compile(
    r'<tr class="alfred-undo[^"]*" data-execution="([^"]+)" data-receipt="(\d+)" '
    r'data-resource="([^"]*)"'
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with world.sandbox_started() as started:
        yield started


@pytest.fixture(scope="module")
def module_worker(sandbox: Sandbox, django_db_setup: None) -> Iterator[WorkerProcess]:
    with world.platform_worker(sandbox, "admin-rollback") as worker:
        yield worker


@pytest.fixture
def platform(module_worker: WorkerProcess, sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    quiesce(60)


def _operator() -> Client:
    user_set(username="operator", role="operator", password="Zq8!x7pLm2#v")
    client = Client()
    client.force_login(get_user_model().objects.get(username="operator"))
    return client


def _done(execution_id: str) -> list[tuple[str, int, str]]:
    """What the rollback runs did, in their order: the execution's rollback run's steps, and
    where it rolled a child back, the steps of the child's rollback run right after it."""
    done: list[tuple[str, int, str]] = []
    undone = StepReceipt.objects.filter(
        run__execution_id=execution_id,
        run__kind=RunKind.ROLLBACK,
        stage="rollback",
        step_key__startswith="undone:",
    ).order_by("id")
    for receipt in undone:
        note = receipt.output
        done.append((execution_id, note["receipt"], note["resource"]))
        if note["resource"] == CHILD:
            done += _done(note["result"]["child"])
    return done


def test_the_rollback_page_lists_what_the_rollback_run_then_does_child_included(api, platform):
    # given: an add-domain that succeeded, with its child add-certificate
    domain = f"r{uuid.uuid4().hex[:8]}.example.com"
    body = submit(api, "add-domain", {"domain": domain, "kirby_mode": "enabled"}).json()
    execution = terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    [child] = Execution.objects.filter(parent_id=execution.id)
    operator = _operator()
    page_url = reverse("admin:executions_execution_rollback", args=[execution.id])

    # when: the operator opens the rollback page, then confirms the rollback from it
    page = operator.get(page_url)
    assert page.status_code == 200
    listed = [(e, int(r), resource) for e, r, resource in ROW.findall(page.content.decode())]
    bulk = operator.post(
        reverse("admin:executions_execution_changelist"),
        {"action": "rollback", "_selected_action": [execution.id]},
    )
    confirmed = operator.post(page_url, {"reason": "the domain moves elsewhere"})
    assert confirmed.status_code == 302
    execution = terminal(execution.id, rollback=True)

    # then: the page listed exactly what the runs did, in their order
    assert execution.status == "rolled_back", execution.error
    assert listed == _done(execution.id)
    # the booking commit, made last, is undone first; the child comes after its parent's
    # own steps, and its certificate's deletion is on the page
    parents = [(r, resource) for e, r, resource in listed if e == execution.id]
    assert StepReceipt.objects.get(pk=parents[0][0]).stage == "booking", listed
    assert parents[-1][1] == CHILD, listed
    childs = [resource for e, _, resource in listed if e == child.id]
    assert "aws.acm.certificate" in childs, childs
    # the changelist's bulk rollback says the same steps, in the same order
    steps = re.findall(r"<li>([^<]+)</li>", bulk.content.decode().split('class="alfred-steps"')[1])
    assert len(steps) == len(listed)
    assert [("roll back the child" in s) for s in steps] == [r == CHILD for _, _, r in listed]
