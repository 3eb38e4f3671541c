"""Approval policies (docs/contract.md, "Approval policies"): who may approve a plan, and how
many distinct operators must, through the API, the admin and the commands alike. The plans
wait on real checkpoints in the database (no worker: what is asked is who may answer; the
workflow's own end-to-end test applies a plan only at the second approval)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from alfred.tokens import token_create
from alfred.users import user_set
from executions.approvals import PolicyInvalid, policy_read
from executions.models import (
    Approval,
    AuditEntry,
    Execution,
    Hook,
    HookStatus,
    OutboxEvent,
    RunKind,
)
from executions.runtime.hooks import hook_open
from executions.runtime.records import run_again
from tests.support.helpers import assert_problem, paused_on_a_plan, submit

pytestmark = pytest.mark.django_db

PLAN = "a" * 64
NEW_PLAN = "b" * 64
ROOT = Path(__file__).resolve().parents[2]


def _operator(name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(name=name, role='operator')[1]}")
    return client


def _approve(client: APIClient, execution_id: str, plan_hash: str = PLAN) -> Any:
    return client.post(
        f"/api/v1/executions/{execution_id}/approve",
        {"plan_hash": plan_hash, "reason": "looked at it"},
        format="json",
    )


def _paused(client: APIClient, subdomain: str = "www") -> str:
    execution_id = submit(client, "add-subdomain", {"zone": "example.com", "subdomain": subdomain})
    execution_id = execution_id.json()["id"]
    paused_on_a_plan(execution_id, PLAN)
    return execution_id


def _policy(client: APIClient, execution_id: str) -> dict[str, Any]:
    return client.get(f"/api/v1/executions/{execution_id}").json()["pending_approval"]["policy"]


def _hook(execution_id: str) -> Hook:
    return Hook.objects.get(execution_id=execution_id, payload__plan_hash=PLAN)


def _checkpoint(execution_id: str, name: str, token: str) -> None:
    """A new checkpoint of the execution's current run, for the plan ``NEW_PLAN``, as a
    workflow's stage opens one."""
    execution = Execution.objects.get(pk=execution_id)
    hook_open(
        execution_id=execution_id,
        run_id=str(execution.current_run_id),
        stage=name,
        name=name,
        token=token,
        operator=True,
        payload={"plan_hash": NEW_PLAN, "plan": {}},
        expires_at=None,
        now=execution.updated_at,
    )


@pytest.fixture
def policy_file(settings: Any, tmp_path: Path) -> Callable[[str], Path]:
    """Puts a policy in force (its own path: the policy is read once per path)."""

    def write(text: str) -> Path:
        path = tmp_path / f"policy-{len(list(tmp_path.iterdir()))}.toml"
        path.write_text(text)
        settings.ALFRED_APPROVAL_POLICY = str(path)
        return path

    return write


def test_by_default_nobody_approves_their_own_request_and_another_operator_does(
    operator_api: APIClient,
) -> None:
    execution_id = _paused(operator_api)  # an operator's token asked for it

    refused = assert_problem(_approve(operator_api, execution_id), 403, "approver_not_permitted")
    assert "you asked for this execution" in refused["detail"]
    assert refused["rule"] == "default" and refused["approvals"] == "0 of 1 approvals"
    assert _hook(execution_id).status == HookStatus.PENDING
    assert not Approval.objects.exists()

    assert _approve(_operator("second"), execution_id).status_code == 202
    assert _hook(execution_id).status == HookStatus.SIGNALLED


def test_two_distinct_operators_each_bound_to_the_hash_and_each_audited(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    policy_file("[default]\napprovals = 2\nrequester_may_approve = false\n")
    execution_id = _paused(api)
    alice, bob = _operator("alice"), _operator("bob")

    assert _approve(alice, execution_id).status_code == 202
    standing = _policy(api, execution_id)
    assert standing["summary"] == "1 of 2 approvals (alice)"
    assert [a["name"] for a in standing["approvals"]] == ["alice"]
    assert standing["blocked"] is None
    assert _hook(execution_id).status == HookStatus.PENDING
    assert Execution.objects.get(pk=execution_id).status == "paused"
    waiting = api.get(f"/api/v1/executions/{execution_id}").json()["waiting_for"]
    assert "1 of 2 approvals (alice)" in waiting["detail"]

    again = assert_problem(_approve(alice, execution_id), 409, "already_approved")
    assert again["approvals"] == "1 of 2 approvals (alice)"
    assert "needs 1 more from another operator" in again["detail"]
    assert_problem(_approve(bob, execution_id, NEW_PLAN), 409, "stale_plan")

    assert _approve(bob, execution_id).status_code == 202
    hook = _hook(execution_id)
    assert hook.status == HookStatus.SIGNALLED
    answer = hook.signals.get().payload
    assert answer["plan_hash"] == PLAN and len(answer["approvers"]) == 2
    assert set(Approval.objects.values_list("plan_hash", flat=True)) == {PLAN}

    audit = AuditEntry.objects.filter(action="execution.approve").order_by("created_at")
    assert [(a.data["actor_name"], a.data["approval"], a.data["policy"]) for a in audit] == [
        ("alice", "1 of 2", "default"),
        ("bob", "2 of 2", "default"),
    ]
    recorded = OutboxEvent.objects.filter(execution_id=execution_id, type="approval.recorded")
    assert [(e.payload["approvals"], e.payload["required"]) for e in recorded] == [(1, 2), (2, 2)]
    assert OutboxEvent.objects.filter(execution_id=execution_id, type="hook.signalled").count() == 1


def test_a_changed_plan_starts_the_count_again(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    policy_file("[default]\napprovals = 2\n")
    execution_id = _paused(api)
    alice = _operator("alice")
    assert _approve(alice, execution_id).status_code == 202

    # what the plan read changed: the workflow opens a new checkpoint
    _checkpoint(execution_id, "approve", f"approve-{execution_id}-2")

    assert _policy(api, execution_id)["summary"] == "0 of 2 approvals"
    assert_problem(_approve(alice, execution_id), 409, "stale_plan")
    assert _approve(alice, execution_id, NEW_PLAN).status_code == 202
    assert _policy(api, execution_id)["summary"] == "1 of 2 approvals (alice)"


def test_an_earlier_approver_may_be_shut_out_of_the_next_plan(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    policy_file("[default]\napprovals = 1\nearlier_approvers_may_approve = false\n")
    execution_id = _paused(api)
    alice = _operator("alice")
    assert _approve(alice, execution_id).status_code == 202  # the first checkpoint answered

    _checkpoint(execution_id, "confirm", f"confirm-{execution_id}")  # a later checkpoint
    refused = assert_problem(_approve(alice, execution_id, NEW_PLAN), 403, "approver_not_permitted")
    assert "you approved an earlier plan" in refused["detail"]
    assert _approve(_operator("bob"), execution_id, NEW_PLAN).status_code == 202


def test_a_rule_for_a_subject_names_its_approvers(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    user_set(username="carol", role="operator")
    user_set(username="dave", role="operator")
    Group.objects.create(name="dns-owners").user_set.add(
        get_user_model().objects.get(username="carol")
    )
    policy_file(
        """
[[rules]]
name = "apex"
workflows = ["add-subdomain"]
subjects = ["*.example.com"]
approvals = 1
approvers = ["group:dns-owners", "token:chatops"]
"""
    )
    listed = _paused(api, "listed")
    by_token = _paused(api, "token")
    other = submit(api, "add-subdomain", {"zone": "example.org", "subdomain": "x"}).json()["id"]
    paused_on_a_plan(other, PLAN)

    assert _policy(api, listed)["rule"] == "apex"
    assert _policy(api, other)["rule"] == "default"  # another zone: the default
    refused = assert_problem(_approve(_operator("ops"), listed), 403, "approver_not_permitted")
    assert "takes approvals from group:dns-owners, token:chatops only" in refused["detail"]
    # The command line is not on this rule's list either.
    with pytest.raises(CommandError, match="takes approvals from"):
        call_command("alfred_executions", "approve", listed, "--plan-hash", PLAN, "--actor", "x")
    # A member of the group, through the admin; the token the rule names, through the API:
    carol = Client()
    carol.force_login(get_user_model().objects.get(username="carol"))
    url = reverse("admin:executions_execution_approve", args=[quote(listed)])
    answer = carol.post(url, {"plan_hash": PLAN, "reason": "ok"}, follow=True)
    assert "approved the plan" in answer.content.decode()
    assert _hook(listed).status == HookStatus.SIGNALLED
    assert _approve(_operator("chatops"), by_token).status_code == 202
    # dave, an operator outside the group, approves what the default rule covers.
    dave = Client()
    dave.force_login(get_user_model().objects.get(username="dave"))
    url = reverse("admin:executions_execution_approve", args=[quote(other)])
    dave.post(url, {"plan_hash": PLAN, "reason": "ok"})
    assert _hook(other).status == HookStatus.SIGNALLED


def test_a_rule_nobody_can_meet_says_so_on_every_face(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    user_set(username="carol", role="operator")
    Group.objects.create(name="release").user_set.add(
        get_user_model().objects.get(username="carol")
    )
    path = policy_file('[default]\napprovals = 2\napprovers = ["group:release"]\n')
    execution_id = _paused(api)

    standing = _policy(api, execution_id)
    assert "needs 2 more approvals" in standing["blocked"]
    assert "only 1 may still give one (carol)" in standing["blocked"]
    waiting = api.get(f"/api/v1/executions/{execution_id}").json()["waiting_for"]
    assert "cannot be met as the policy stands" in waiting["detail"]

    err = StringIO()
    call_command("alfred_executions", "show", execution_id, stdout=StringIO(), stderr=err)
    assert "it cannot be met: the rule 'default' needs 2 more approvals" in err.getvalue()

    out = StringIO()
    with pytest.raises(CommandError, match=r"1 problem\(s\): rule .default.: it asks for 2"):
        call_command("alfred_policy", "check", str(path), stdout=out)
    assert "UNSATISFIABLE" in out.getvalue() and "may approve now: 1 (carol)" in out.getvalue()

    carol = Client()
    carol.force_login(get_user_model().objects.get(username="carol"))
    page = carol.get(reverse("admin:executions_execution_change", args=[quote(execution_id)]))
    text = page.content.decode()
    assert "Cannot be met" in text and "0 of 2" in text


def test_the_commands_say_how_far_an_approval_is_and_explain_the_rule(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    policy_file('[default]\napprovals = 2\n\n[[rules]]\nname = "api"\nsubjects = ["api.*"]\n')
    execution_id = _paused(api)

    out = StringIO()
    call_command(
        "alfred_executions", "approve", execution_id, "--plan-hash", PLAN, "--actor", "alice",
        "--wait", "0", stdout=out,
    )  # fmt: skip
    assert (
        "your approval of plan" in out.getvalue() and "(1 of 2 approvals (alice))" in out.getvalue()
    )
    assert "another operator approves it with the same --plan-hash" in out.getvalue()
    with pytest.raises(CommandError, match=r"approved the plan waiting on .* already"):
        call_command(
            "alfred_executions", "approve", execution_id, "--plan-hash", PLAN, "--actor", "alice"
        )

    explained = StringIO()
    call_command("alfred_policy", "explain", "--execution", execution_id, stdout=explained)
    assert "the rule 'default'" in explained.getvalue()
    assert "its pending plan: 1 of 2 approvals (alice)" in explained.getvalue()
    assert "may not approve it: you asked for this execution" in explained.getvalue()
    by_name = StringIO()
    call_command("alfred_policy", "explain", "add-subdomain", "api.example.com", stdout=by_name)
    assert "the rule 'api'" in by_name.getvalue()


def test_the_admin_tells_a_refused_operator_why_and_nothing_is_recorded(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    user_set(username="carol", role="operator")
    carol = Client()
    carol.force_login(get_user_model().objects.get(username="carol"))
    policy_file("[default]\napprovals = 1\n")
    # carol asked for the execution (as if through a session of her own): she is its requester.
    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "m"}).json()
    execution_id = execution_id["id"]
    carol_pk = get_user_model().objects.get(username="carol").pk
    Execution.objects.filter(pk=execution_id).update(principal=f"user:{carol_pk}")
    paused_on_a_plan(execution_id, PLAN)
    url = reverse("admin:executions_execution_approve", args=[quote(execution_id)])

    page = carol.get(url).content.decode()
    assert "You may not approve this plan: you asked for this execution" in page
    answer = carol.post(url, {"plan_hash": PLAN, "reason": "mine"}, follow=True)
    assert "you may not approve the plan" in answer.content.decode()
    assert not Approval.objects.exists()
    assert _hook(execution_id).status == HookStatus.PENDING


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[default]\napprovals = 0\n", "default.approvals: Input should be greater than"),
        ("[default]\napprovls = 2\n", "default.approvls: Extra inputs are not permitted"),
        ('[default]\napprovers = ["admins"]\n', "default.approvers.0: String should match"),
        ("[default\n", "Expected ']'"),
        (
            '[default]\napprovals = 3\napprovers = ["user:alice", "token:bot"]\n',
            "asks for 3 distinct approvers and names 2 (token:bot, user:alice): nobody",
        ),
        ('[[rules]]\nname = "x"\n[[rules]]\nname = "x"\n', "two rules are named 'x'"),
    ],
)
def test_a_policy_that_does_not_hold_is_refused_with_what_is_wrong(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyInvalid) as refused:
        policy_read(path)
    assert said in str(refused.value)


def test_a_process_does_not_start_on_a_policy_that_does_not_hold(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text(
        '[[rules]]\nname = "fine"\nworkflows = ["add-subdomain"]\n'
        '[[rules]]\nname = "typo"\nworkflows = ["add-subdomian"]\n'
    )
    env = {
        **os.environ,
        "ALFRED_APPROVAL_POLICY": str(bad),
        "DJANGO_SETTINGS_MODULE": "alfred.settings_test",
    }
    started = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert started.returncode != 0
    assert "rule 'typo' names no workflow Alfred runs: add-subdomian" in started.stderr
    assert "rule 'fine'" not in started.stderr
    # and the example, whose every rule names a workflow Alfred runs, starts
    env["ALFRED_APPROVAL_POLICY"] = str(ROOT / "deploy" / "approval-policy.example.toml")
    fine = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert fine.returncode == 0, fine.stderr


def test_the_example_policy_the_readme_offers_holds() -> None:
    example = policy_read(ROOT / "deploy" / "approval-policy.example.toml")
    assert example.problems(iter(["add-subdomain", "update-lambda-version"])) == []
    rule = example.rule_for("update-lambda-version", "checkout-api on production → version 3")
    assert (rule.name, rule.approvals) == ("production lambdas", 2)
    assert example.rule_for("update-lambda-version", "checkout-api on staging").name == "default"


def test_every_operator_stays_on_a_list_that_names_operators_beside_a_group(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    for n, approvers in enumerate(
        ('["operators", "token:chatops"]', '["token:chatops", "operators"]')
    ):
        policy_file(f"[default]\napprovers = {approvers}\n")
        execution_id = _paused(api, f"o{n}")
        assert _approve(_operator(f"ops-{n}"), execution_id).status_code == 202  # not chatops


def test_a_plan_asked_for_again_by_a_later_run_counts_again_from_nothing(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    policy_file("[default]\napprovals = 2\n")
    execution_id = _paused(api)
    alice = _operator("alice")
    assert _approve(alice, execution_id).status_code == 202
    assert _policy(api, execution_id)["summary"] == "1 of 2 approvals (alice)"

    # rejected, then retried: the new run makes the same plan, and reopens its checkpoint
    with transaction.atomic():
        execution = Execution.objects.select_for_update().get(pk=execution_id)
        run = run_again(execution, kind=RunKind.RETRY, stages=("apply",))
    Execution.objects.filter(pk=execution_id).update(status="paused")
    hook = _hook(execution_id)
    Hook.objects.filter(pk=hook.pk).update(status=HookStatus.CANCELED)
    hook_open(
        execution_id=execution_id,
        run_id=run.id,
        stage="apply",
        name=hook.name,
        token=hook.token,
        operator=True,
        payload=hook.payload,
        expires_at=None,
        now=timezone.now(),
    )

    assert _policy(api, execution_id)["summary"] == "0 of 2 approvals"
    assert _approve(alice, execution_id).status_code == 202  # hers counts in this run anew
    assert _policy(api, execution_id)["summary"] == "1 of 2 approvals (alice)"


def test_an_approval_whose_giver_left_the_list_no_longer_counts(
    api: APIClient, policy_file: Callable[[str], Path]
) -> None:
    user_set(username="carol", role="operator")
    user_set(username="dave", role="operator")
    group = Group.objects.create(name="release")
    group.user_set.add(*get_user_model().objects.filter(username__in=["carol", "dave"]))
    policy_file('[default]\napprovals = 2\napprovers = ["group:release", "token:bot"]\n')
    execution_id = _paused(api)
    carol = Client()
    carol.force_login(get_user_model().objects.get(username="carol"))
    url = reverse("admin:executions_execution_approve", args=[quote(execution_id)])
    carol.post(url, {"plan_hash": PLAN, "reason": "ok"})
    assert _policy(api, execution_id)["summary"] == "1 of 2 approvals (carol)"

    group.user_set.remove(get_user_model().objects.get(username="carol"))

    standing = _policy(api, execution_id)
    assert standing["summary"] == "0 of 2 approvals"
    assert [g["name"] for g in standing["no_longer_counted"]] == ["carol"]
    assert _approve(_operator("bot"), execution_id).status_code == 202
    assert _hook(execution_id).status == HookStatus.PENDING  # 1 of 2: carol's is void


def test_the_default_rule_takes_no_workflows_or_subjects(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[default]\nsubjects = ["*.example.com"]\n')
    with pytest.raises(PolicyInvalid, match="takes no workflows or subjects"):
        policy_read(path)
