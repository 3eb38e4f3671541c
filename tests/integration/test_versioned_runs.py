# ruff: noqa: F811 (pytest fixtures imported from the add-subdomain tests, used as arguments)
"""A deploy that changes a workflow while one of its executions waits: an add-subdomain
paused on its plan's approval, a worker restarted with add-subdomain version 2 (a stage
more), the plan approved. The run either wakes under the definition it started with (the
deploy kept it) or fails with definition_changed, which a retry runs under the new one; no
500, and the change batch is counted from the Route53 stand-in's journal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

import pytest

from executions.catalog import workflow_register
from executions.models import Execution, Run
from executions.runtime.registry import definition_get
from providers.sandbox.aws import AwsStandIn
from tests.conftest import quiesce
from tests.integration.test_add_subdomain import (  # noqa: F401 (fixtures)
    _batches,
    _create,
    _paused,
    _terminal,
    route53,
    standin,
)
from tests.support import aws_world
from tests.support.changed_workflows import V1
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

V1_STAGES = ["plan", "apply", "verify"]


def paused_under_v1(api: Any, standin: AwsStandIn, route53: Any) -> tuple[str, str]:
    """An add-subdomain paused on its plan (a CNAME at the name), run by a v1 worker."""
    zone_id = aws_world.zone_id_of(route53)
    name = f"v-{uuid.uuid4().hex[:10]}.example.com"
    _create(route53, zone_id, name, "CNAME", "legacy.example.net")
    with aws_world.aws_worker(standin, "v1"):
        body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
        plan_hash = _paused(api, body["id"])["pending_approval"]["plan_hash"]
        quiesce()
    run = Run.objects.get(execution_id=body["id"], number=1)
    assert run.definition == {"version": 1, "stages": V1_STAGES}
    return body["id"], plan_hash


@contextmanager
def deployed(standin: AwsStandIn, module: str) -> Iterator[None]:
    """The deploy: a worker, and this process (the web's part: a retry's run is made here),
    both running add-subdomain as ``module`` defines it."""
    (changed,) = import_module(module).WORKFLOWS
    with aws_world.aws_worker(
        standin, "v2", ALFRED_EXTRA_WORKFLOWS=f"tests.support.engine_workflows,{module}"
    ):
        workflow_register(changed)
        try:
            yield
        finally:
            workflow_register(V1)


def approve(operator_api: Any, execution_id: str, plan_hash: str) -> None:
    approved = operator_api.post(
        f"/api/v1/executions/{execution_id}/approve", {"plan_hash": plan_hash}, format="json"
    )
    assert approved.status_code == 202, approved.content


def test_the_stages_really_are_v1s_here():
    assert list(definition_get("add-subdomain").stages) == V1_STAGES


def test_a_run_whose_definition_is_gone_fails_definition_changed_keeping_its_approval_for_v2(
    api, operator_api, standin, route53
):
    # given an add-subdomain paused under version 1
    execution_id, plan_hash = paused_under_v1(api, standin, route53)
    # when a deploy replaces add-subdomain by version 2 (without version 1), and the plan is
    # approved
    with deployed(standin, "tests.support.changed_workflows"):
        approve(operator_api, execution_id, plan_hash)
        # then the run ends, failed with definition_changed, having changed nothing
        execution = _terminal(execution_id)
        assert execution.status == "failed"
        assert execution.error["code"] == "definition_changed"
        assert execution.error["started_under"] == {"version": 1, "stages": V1_STAGES}
        assert execution.error["current"]["version"] == 2
        assert _batches(standin, execution_id) == []
        read = api.get(f"/api/v1/executions/{execution_id}")
        assert read.status_code == 200 and read.json()["error"]["code"] == "definition_changed"
        # and the failure says the approval it woke with is not spent: recorded, kept
        (kept,) = execution.error["approvals"]
        assert kept["plan_hash"] == plan_hash and kept["stage"] == "apply" and kept["by"]
        assert "approval it woke with is kept" in execution.error["message"]
        # and a retry runs under version 2 and applies that approval (the plan unchanged)
        # without asking for it again
        retried = operator_api.post(f"/api/v1/executions/{execution_id}/retry")
        assert retried.status_code == 202, retried.content
        finished = _terminal(execution_id)
        assert finished.status == "succeeded", finished.error
        run = finished.current_run
        assert run is not None and run.definition["version"] == 2
        assert [s.name for s in run.stages.order_by("position")] == [
            "plan",
            "apply",
            "announce",
            "verify",
        ]
        assert len(_batches(standin, execution_id)) == 1
        quiesce()


def test_a_run_wakes_under_the_definition_it_started_with_when_the_deploy_keeps_it(
    api, operator_api, standin, route53
):
    execution_id, plan_hash = paused_under_v1(api, standin, route53)
    with deployed(standin, "tests.support.changed_workflows_keeping_v1"):
        approve(operator_api, execution_id, plan_hash)
        execution = _terminal(execution_id)
        assert execution.status == "succeeded", execution.error
        run = execution.current_run
        assert run is not None and run.definition == {"version": 1, "stages": V1_STAGES}
        assert [s.name for s in run.stages.order_by("position")] == V1_STAGES
        assert len(_batches(standin, execution_id)) == 1
        quiesce()


def test_a_continuation_under_a_new_version_plans_again_instead_of_taking_the_old_plan(
    api, operator_api, standin, route53
):
    # given: an add-subdomain that planned under version 1 and failed in apply (its approval
    # met a deploy of version 2 that does not keep version 1)
    execution_id, plan_hash = paused_under_v1(api, standin, route53)
    with deployed(standin, "tests.support.changed_workflows"):
        approve(operator_api, execution_id, plan_hash)
        failed = _terminal(execution_id)
        assert failed.error["code"] == "definition_changed"
        body = Execution.objects.get(pk=execution_id).input

        # when: the same operation is asked for again under a new key (a continuation)
        again = submit(api, "add-subdomain", body)

        # then: run 2 runs under version 2 and plans again: version 1's plan is not taken as
        # version 2's (it ran, it was not carried over)
        assert again.status_code == 202, again.content
        assert again.json()["acceptance"]["outcome"] == "continued"
        finished = _terminal(execution_id)
        assert finished.status == "succeeded", finished.error
        run = finished.current_run
        assert run is not None and run.kind == "continuation"
        assert run.definition["version"] == 2
        plan = run.stages.get(name="plan")
        assert plan.started_at is not None, "the plan was carried over from version 1's run"
        assert plan.output["plan_hash"] == plan_hash
        assert len(_batches(standin, execution_id)) == 1
        quiesce()


def test_a_continuation_under_a_version_declaring_the_old_outputs_compatible_carries_them(
    api, operator_api, standin, route53
):
    # given: the same add-subdomain failed definition_changed, under a version 2 that declares
    # version 1's outputs compatible
    execution_id, plan_hash = paused_under_v1(api, standin, route53)
    with deployed(standin, "tests.support.changed_workflows_reading_v1"):
        approve(operator_api, execution_id, plan_hash)
        assert _terminal(execution_id).error["code"] == "definition_changed"
        first_plan = Run.objects.get(execution_id=execution_id, number=1).stages.get(name="plan")

        # when: asked for again
        again = submit(api, "add-subdomain", Execution.objects.get(pk=execution_id).input)

        # then: run 2 skips the plan (version 1's, carried over) and applies it
        assert again.json()["acceptance"]["outcome"] == "continued", again.content
        finished = _terminal(execution_id)
        assert finished.status == "succeeded", finished.error
        plan = finished.current_run.stages.get(name="plan")
        assert plan.started_at is None and plan.output == first_plan.output
        assert len(_batches(standin, execution_id)) == 1
        quiesce()
