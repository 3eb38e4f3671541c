"""Which controls an execution allows now (executions.controls.execution_controls): one rule
per control, read by the resource's links and the admin page and checked by the service, so
what is offered is exactly what is done."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from alfred.principals import Caller, Role
from alfred.tokens import token_create
from alfred.users import user_set
from executions.controls import (
    CONTROLS,
    InvalidState,
    execution_cancel,
    execution_controls,
    execution_retry,
)
from executions.models import TERMINAL_STATUSES, Execution, ExecutionStatus, RunStatus
from tests.support.helpers import SUBDOMAIN, submit

pytestmark = pytest.mark.django_db
PASSWORD = "Zq8!x7pLm2#v"

# The rule, written out: cancel while not terminal, retry when failed or canceled (its owner
# or an operator); for operators only, rollback once succeeded, failed or canceled (approve
# and reject need a pending checkpoint, which these executions do not have: test_add_subdomain,
# test_reject; accept_drift and redo an open drift: test_drift_watch).
EXPECTED = {
    ExecutionStatus.QUEUED: {"cancel"},
    ExecutionStatus.RUNNING: {"cancel"},
    ExecutionStatus.WAITING: {"cancel"},
    ExecutionStatus.PAUSED: {"cancel"},
    ExecutionStatus.SUCCEEDED: set(),
    ExecutionStatus.FAILED: {"retry"},
    ExecutionStatus.CANCELED: {"retry"},
    ExecutionStatus.ROLLED_BACK: set(),
}
OPERATOR_ONLY = {
    ExecutionStatus.SUCCEEDED: {"rollback"},
    ExecutionStatus.FAILED: {"rollback"},
    ExecutionStatus.CANCELED: {"rollback"},
}
BODIES = {
    "approve": {"plan_hash": "a" * 64},
    "reject": {"plan_hash": "a" * 64},
    "rollback": {"reason": "test"},
    "accept_drift": {"reason": "test"},
}
RUN_STATUS = {
    ExecutionStatus.QUEUED: RunStatus.PENDING,
    ExecutionStatus.RUNNING: RunStatus.RUNNING,
    ExecutionStatus.WAITING: RunStatus.WAITING,
    ExecutionStatus.PAUSED: RunStatus.WAITING,
    ExecutionStatus.SUCCEEDED: RunStatus.SUCCEEDED,
    ExecutionStatus.FAILED: RunStatus.FAILED,
    ExecutionStatus.CANCELED: RunStatus.CANCELED,
    ExecutionStatus.ROLLED_BACK: RunStatus.SUCCEEDED,
}


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _in_status(api: APIClient, status: str) -> Execution:
    """An execution of ``api``'s principal, put in ``status`` (its run to match)."""
    body = {**SUBDOMAIN, "subdomain": f"s-{status.replace('_', '-')}"}
    execution = Execution.objects.get(pk=submit(api, "add-subdomain", body).json()["id"])
    terminal = status in TERMINAL_STATUSES
    Execution.objects.filter(pk=execution.pk).update(
        status=status, finished_at=timezone.now() if terminal else None
    )
    execution.runs.update(status=RUN_STATUS[status])
    execution.refresh_from_db()
    return execution


@pytest.mark.parametrize("status", list(ExecutionStatus))
def test_the_links_offer_exactly_the_controls_the_rule_allows_to_whom_may_act(status):
    # given: an execution of the owner in this status; an operator, another integration and
    # a viewer
    _, owner_raw = token_create(name="owner", role="integration")
    _, other_raw = token_create(name="other", role="integration")
    _, operator_raw = token_create(name="ops", role="operator")
    _, viewer_raw = token_create(name="watcher", role="viewer")
    execution = _in_status(_bearer(owner_raw), status)
    expected = EXPECTED[status]

    # when: each reads it (the operator and the viewer also in the list)
    def links(raw: str) -> set[str]:
        return set(_bearer(raw).get(f"/api/v1/executions/{execution.id}").json()["links"])

    listed = _bearer(operator_raw).get("/api/v1/executions").json()["results"]

    # then: the owner and the operator get the controls of the state, the others none
    assert links(owner_raw) == {"self", "events", "stream", *expected}
    operator_expected = {*expected, *OPERATOR_ONLY.get(status, set())}
    assert links(operator_raw) == {"self", "events", "stream", *operator_expected}
    assert links(viewer_raw) == {"self", "events", "stream"}
    assert set(listed[0]["links"]) == {"self", "events", "stream", *operator_expected}
    owner = Caller(execution.principal, Role.INTEGRATION)
    assert execution_controls(execution, owner) == expected
    assert execution_controls(execution, Caller("prn_other", Role.INTEGRATION)) == frozenset()
    assert execution_controls(execution, Caller("prn_viewer", Role.VIEWER)) == frozenset()
    assert _bearer(other_raw).get(f"/api/v1/executions/{execution.id}").status_code == 404


@pytest.mark.parametrize("status", list(ExecutionStatus))
@pytest.mark.parametrize("control", [c.name for c in CONTROLS])
def test_a_control_does_exactly_what_it_is_offered_for(api, status, control):
    # given: an execution in this status, and what the controls offer its owner
    execution = _in_status(api, status)
    owner = Caller(execution.principal, Role.INTEGRATION)
    offered = control in execution_controls(execution, owner)

    # when: the owner uses the control through the API
    body = BODIES.get(control, {})
    response = api.post(f"/api/v1/executions/{execution.id}/{control}", body, format="json")

    # then: accepted where offered, refused by the state (409) where not; the operators'
    # controls refused to the owner (403)
    if control in BODIES:
        assert response.status_code == 403, response.content
    elif offered:
        assert response.status_code == 202, response.content
    else:
        assert response.status_code == 409, response.content
        rolled_back = control == "retry" and status == ExecutionStatus.ROLLED_BACK
        code = "not_retryable" if rolled_back else "invalid_state"
        assert response.json()["code"] == code


def test_the_services_refuse_what_the_rule_refuses_whoever_calls():
    # given: a succeeded execution and an operator (who may act on anything)
    _, raw = token_create(name="owner", role="integration")
    execution = _in_status(_bearer(raw), ExecutionStatus.SUCCEEDED)
    operator = Caller("cli:test", Role.OPERATOR, "test")
    assert execution_controls(execution, operator) == frozenset({"rollback"})

    # when / then: neither control moves it
    with pytest.raises(InvalidState):
        execution_cancel(execution_id=execution.id, caller=operator, reason="")
    with pytest.raises(InvalidState):
        execution_retry(execution_id=execution.id, caller=operator)
    assert Execution.objects.get(pk=execution.id).status == ExecutionStatus.SUCCEEDED


def test_the_admin_page_shows_the_controls_this_user_may_use():
    # given: a failed execution; an operator and a viewer logged in to the admin
    _, raw = token_create(name="owner", role="integration")
    execution = _in_status(_bearer(raw), ExecutionStatus.FAILED)
    user_set(username="operator", role="operator", password=PASSWORD)
    user_set(username="viewer", role="viewer", password=PASSWORD)
    page = f"/admin/executions/execution/{execution.id}/change/"

    def shown(username: str) -> str:
        client = Client()
        assert client.login(username=username, password=PASSWORD)
        response = client.get(page)
        assert response.status_code == 200
        return response.content.decode()

    # when / then: the operator is offered retry, the viewer nothing
    as_operator, as_viewer = shown("operator"), shown("viewer")
    assert "Allowed controls" in as_operator and "Allowed controls" in as_viewer
    assert '<div class="readonly">retry, rollback</div>' in as_operator
    assert '<div class="readonly">none</div>' in as_viewer
