"""A retried owner of a blocked lane says what it waits for and who can act (issue 37, item
14): the retry of a failed update-lambda-version answers 202 ``queued`` and stays queued, its
lane ``recovery_required``, which only an operator clears. The execution's resource
(``waiting_for``), its admin list (the "Waits for" column, the ``recovery`` filter) and page
(the header's "Waiting for"), and ``alfred_executions show|list`` all say so and name the way
to recover the lane; once an operator has, nothing is awaited any more. No worker: the run
cannot start before the recovery, which is what is shown."""

from __future__ import annotations

import io
import shlex

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from alfred.users import user_set
from executions.lanes.reconciler import Action, lane_reconcile
from lanes.models import Lane, LaneState
from tests.integration.test_lane_reconciler import _finish
from tests.support.helpers import LAMBDA, paused_on_a_plan, submit

pytestmark = pytest.mark.django_db

KEY = "lambda:checkout-api:production"


@pytest.fixture
def retried(api) -> str:
    """The issue's case: a failed update-lambda-version whose lane is recovery_required,
    retried by its owner."""
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")
    decision = lane_reconcile(KEY)
    assert decision is not None and decision.action is Action.RECOVERY_REQUIRED
    response = api.post(f"/api/v1/executions/{owner}/retry", {}, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    return owner


def _operator() -> Client:
    user_set(username="operator", role="operator", password="Zq8!x7pLm2#v")
    client = Client()
    client.force_login(get_user_model().objects.get(username="operator"))
    return client


def test_the_resource_says_it_waits_for_an_operator_to_recover_its_lane(api, retried):
    waiting = api.get(f"/api/v1/executions/{retried}").json()["waiting_for"]

    assert waiting["code"] == "lane_recovery"
    assert waiting["who"] == "operator"
    assert waiting["lane"] == KEY
    assert f"The lane {KEY} it holds is recovery_required" in waiting["detail"]
    assert waiting["links"]["recover"] == f"/api/v1/lanes/{KEY}/recover"
    assert waiting["command"] == (
        f'manage.py alfred_lanes recover {KEY} --owner {retried} --reason "…"'
    )


def test_the_retrys_own_answer_says_so_too(api):
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")
    lane_reconcile(KEY)

    answer = api.post(f"/api/v1/executions/{owner}/retry", {}, format="json").json()

    assert answer["waiting_for"]["code"] == "lane_recovery"


def test_the_command_line_says_so_and_its_command_recovers_the_lane(api, retried):
    # show: the resource, and on stderr what it waits for
    out, err = io.StringIO(), io.StringIO()
    call_command("alfred_executions", "show", retried, stdout=out, stderr=err)
    assert '"code": "lane_recovery"' in out.getvalue()
    assert f"waits for (operator): The lane {KEY} it holds is recovery_required" in err.getvalue()

    # list: its last column, and the recovery filter
    out = io.StringIO()
    call_command(
        "alfred_executions", "list", "--awaiting", "recovery", stdout=out, stderr=io.StringIO()
    )
    (row,) = out.getvalue().splitlines()[1:]
    assert row.startswith(retried) and row.endswith("lane recovery (operator)")

    # the command it names releases the lane to the retried owner: nothing awaited any more
    command = api.get(f"/api/v1/executions/{retried}").json()["waiting_for"]["command"]
    args = shlex.split(command.replace("…", "checked"))[1:]
    call_command(*args, "--actor", "alice", stdout=io.StringIO())
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id) == (LaneState.HELD, retried)
    assert api.get(f"/api/v1/executions/{retried}").json()["waiting_for"] is None


def test_the_admin_list_and_page_say_so(retried):
    client = _operator()
    changelist = reverse("admin:executions_execution_changelist")

    listed = client.get(changelist, {"awaiting": "recovery"})
    assert [e.pk for e in listed.context["cl"].result_list] == [retried]
    assert "lane recovery (operator)" in listed.content.decode()

    page = client.get(reverse("admin:executions_execution_change", args=[quote(retried)]))
    html = page.content.decode()
    assert '<tr class="alfred-waiting waiting-lane_recovery"><th>Waiting for</th>' in html
    assert "who can act: <strong>operator</strong>" in html
    assert reverse("admin:lanes_lane_change", args=[quote(KEY)]) in html


def test_a_queued_execution_and_a_paused_one_say_who_they_wait_for(api, operator_api):
    # two add-domains: the first owns the aws-infrastructure lane, the second queues on it
    owner = submit(api, "add-domain", {"domain": "one.example"}).json()["id"]
    queued = submit(api, "add-domain", {"domain": "two.example"}).json()["id"]

    waiting = api.get(f"/api/v1/executions/{queued}").json()["waiting_for"]
    assert (waiting["code"], waiting["who"]) == ("lane", "lane owner")
    assert f"behind {owner}" in waiting["detail"]
    assert api.get(f"/api/v1/executions/{owner}").json()["waiting_for"] is None

    paused = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "w"}).json()["id"]
    paused_on_a_plan(paused)
    waiting = operator_api.get(f"/api/v1/executions/{paused}").json()["waiting_for"]
    assert (waiting["code"], waiting["who"]) == ("approval", "operator")
    assert waiting["links"]["reject"] == f"/api/v1/executions/{paused}/reject"


def test_the_failed_owner_itself_waits_for_nothing(api):
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")
    lane_reconcile(KEY)

    assert api.get(f"/api/v1/executions/{owner}").json()["waiting_for"] is None
    out = io.StringIO()
    call_command(
        "alfred_executions", "list", "--awaiting", "recovery", stdout=out, stderr=io.StringIO()
    )
    assert out.getvalue().splitlines()[1:] == []


def test_the_acceptances_own_answer_says_it_queues(api):
    # the answer to the POST knows the lane as its transaction left it (not its owner's id)
    submit(api, "add-domain", {"domain": "one.example"})

    answer = submit(api, "add-domain", {"domain": "two.example"}).json()

    assert answer["waiting_for"]["code"] == "lane"
    assert "behind None" not in answer["waiting_for"]["detail"]
