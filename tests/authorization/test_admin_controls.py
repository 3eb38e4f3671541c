"""The execution's admin page and its controls (docs/architecture.md, "States"; docs/contract.md):
the page shows the pending approval as a table of record sets before → after with its hash and
expiry, the runs with their stages and receipts, the events; each control (approve, rollback,
cancel, retry) is a confirmation page that only an operator on a writable instance reaches (anyone
else: 403), whose POST calls the service and records the reason; a refusal is a message, never a
500."""

from __future__ import annotations

from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from alfred.users import user_set
from executions.catalog import workflow_get
from executions.identity import logical_identity
from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    OutboxEvent,
    ReceiptStatus,
    Run,
    RunKind,
    RunStatus,
    StepReceipt,
)
from tests.support.factories import StageFactory

pytestmark = pytest.mark.django_db
PASSWORD = "Zq8!x7pLm2#v"
PLAN_HASH = "3f" * 32
ALIAS = {
    "hosted_zone_id": "Z2FDTNDATAQYW2",
    "dns_name": "d111111abcdef8.cloudfront.net",
    "evaluate_target_health": False,
}
CNAME = {
    "name": "api.example.com",
    "type": "CNAME",
    "ttl": 300,
    "values": ["old.example.net"],
    "alias": None,
    "set_identifier": None,
    "routing": {},
}
TXT = {**CNAME, "type": "TXT", "ttl": 60, "values": ['"v=spf1 -all"']}


def _alias(type_: str) -> dict[str, Any]:
    return {**CNAME, "type": type_, "ttl": None, "values": [], "alias": ALIAS}


def approval_payload(plan_hash: str = PLAN_HASH) -> dict[str, Any]:
    """What add-subdomain's apply waits on (``{"plan": _shown(plan), "plan_hash": ...}``): a
    CNAME replaced by the apex's alias records, a TXT left as it is."""
    before = [CNAME, TXT]
    after = [_alias("A"), _alias("AAAA"), TXT]
    return {
        "plan": {
            "zone": "example.com",
            "name": "api.example.com",
            "before": before,
            "after": after,
            "changes": [
                {"action": "DELETE", "record": CNAME},
                {"action": "UPSERT", "record": _alias("A")},
                {"action": "UPSERT", "record": _alias("AAAA")},
            ],
        },
        "plan_hash": plan_hash,
    }


BATCH = {
    "resource": "aws.route53.batch",
    "action": "apply",
    "undo": {"zone": "Z1"},
    "before": [CNAME],
    "after": [_alias("A"), _alias("AAAA")],
}


def _execution(status: str, subdomain: str = "api", **fields: Any) -> Execution:
    canonical = workflow_get("add-subdomain").canonicalize(
        {"zone": "example.com", "subdomain": subdomain}
    )
    terminal = status in (
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELED,
        ExecutionStatus.ROLLED_BACK,
    )
    return Execution.objects.create(
        workflow="add-subdomain",
        principal="prn_owner",
        input=canonical,
        logical_identity=logical_identity("add-subdomain", canonical),
        status=status,
        finished_at=timezone.now() if terminal else None,
        **fields,
    )


def _run(execution: Execution, number: int, kind: str, status: str) -> Run:
    run = Run.objects.create(execution=execution, number=number, kind=kind, status=status)
    execution.current_run = run
    execution.save(update_fields=["current_run"])
    return run


def _forward_run(execution: Execution, status: str, apply: str) -> Run:
    """An initial run: plan done, apply ``apply`` (with its batch receipt once past approval)."""
    run = _run(execution, 1, RunKind.INITIAL, status)
    StageFactory(run=run, name="plan", position=0, status="succeeded", output={"plan": "frozen"})
    StageFactory(run=run, name="apply", position=1, status=apply)
    StageFactory(run=run, name="verify", position=2, status="pending")
    StepReceipt.objects.create(
        run=run,
        stage="plan",
        step_key="read",
        sequence=1,
        status=ReceiptStatus.SUCCEEDED,
        output={"records": [CNAME]},
        fence=1,
    )
    if apply == "succeeded":
        StepReceipt.objects.create(
            run=run,
            stage="apply",
            step_key="batch",
            sequence=2,
            status=ReceiptStatus.SUCCEEDED,
            output={"handle": {"id": "C1"}},
            mutation=BATCH,
            fence=1,
        )
    return run


def _hook(execution: Execution, run: Run, status: str, **fields: Any) -> Hook:
    return Hook.objects.create(
        execution=execution,
        run=run,
        stage="apply",
        name="approve",
        token=f"approve-{execution.pk}",
        operator=True,
        payload=approval_payload(),
        status=status,
        **fields,
    )


def _event(execution: Execution, type_: str, payload: dict[str, Any]) -> None:
    execution.last_sequence += 1
    execution.save(update_fields=["last_sequence"])
    OutboxEvent.objects.create(
        execution=execution,
        sequence=execution.last_sequence,
        key=f"{execution.pk}:{execution.last_sequence}",
        type=type_,
        payload=payload,
    )


def _rollback_run(execution: Execution, status: str, error: dict[str, Any] | None) -> Run:
    run = _run(execution, 2, RunKind.ROLLBACK, status)
    StageFactory(
        run=run,
        name="rollback",
        position=0,
        status="succeeded" if error is None else "failed",
        output=None if error else {"restored": [{"resource": "aws.route53.batch"}]},
        error=error,
    )
    StepReceipt.objects.create(
        run=run,
        stage="rollback",
        step_key="undo:1:read",
        sequence=1,
        status=ReceiptStatus.SUCCEEDED,
        output={"records": [_alias("A")]},
        fence=1,
    )
    return run


@pytest.fixture
def users() -> None:
    user_set(username="operator", role="operator", password=PASSWORD)
    user_set(username="viewer", role="viewer", password=PASSWORD)


@pytest.fixture
def paused(users: None) -> Execution:
    """Paused on add-subdomain's approval checkpoint; it expires in a week."""
    execution = _execution(ExecutionStatus.PAUSED)
    run = _forward_run(execution, RunStatus.WAITING, apply="waiting")
    _hook(execution, run, HookStatus.PENDING, expires_at=timezone.now() + timedelta(days=7))
    _event(execution, "execution.paused", {"hook": "approve", "note": "<script>x</script>"})
    return execution


@pytest.fixture
def approved(users: None) -> Execution:
    execution = _execution(ExecutionStatus.SUCCEEDED, "approved")
    run = _forward_run(execution, RunStatus.SUCCEEDED, apply="succeeded")
    _hook(execution, run, HookStatus.SIGNALLED, resolved_at=timezone.now())
    _event(execution, "hook.signalled", {"hook": "approve", "by": "user:1"})
    _event(execution, "execution.succeeded", {})
    return execution


@pytest.fixture
def rolled_back(users: None) -> Execution:
    execution = _execution(ExecutionStatus.ROLLED_BACK, "rolledback")
    _forward_run(execution, RunStatus.SUCCEEDED, apply="succeeded")
    _rollback_run(execution, RunStatus.SUCCEEDED, error=None)
    _event(execution, "execution.rolled_back", {})
    return execution


DRIFTED = {
    "code": "drifted",
    "message": "aws.route53.batch changed since Alfred's change; not undone",
    "differences": [{"name": "api.example.com", "type": "A", "expected": "alias"}],
}


@pytest.fixture
def failed_in_rollback(users: None) -> Execution:
    execution = _execution(ExecutionStatus.FAILED, "drifted", error=DRIFTED)
    _forward_run(execution, RunStatus.SUCCEEDED, apply="succeeded")
    _rollback_run(execution, RunStatus.FAILED, error=DRIFTED)
    _event(execution, "execution.failed", {"error": DRIFTED})
    return execution


def _login(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def _page(execution: Execution) -> str:
    return reverse("admin:executions_execution_change", args=[quote(execution.pk)])


def _control(execution: Execution, control: str) -> str:
    return reverse(f"admin:executions_execution_{control}", args=[quote(execution.pk)])


class _Cells(HTMLParser):
    """The text of each cell of the rows whose ``<tr>`` has ``row_class`` among its classes."""

    def __init__(self, row_class: str) -> None:
        super().__init__()
        self.row_class = row_class
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "tr" and self.row_class in classes:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "div" and self._cell:
            self._cell.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()).strip(" |"))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _rows(html: str, row_class: str) -> list[list[str]]:
    parser = _Cells(row_class)
    parser.feed(html)
    return parser.rows


ALIAS_SHOWN = "alias → d111111abcdef8.cloudfront.net (zone Z2FDTNDATAQYW2)"
PLAN_TABLE = [
    # name, type, before TTL, before values/alias, after TTL, after values/alias, change
    ["api.example.com", "CNAME", "300", "old.example.net", "—", "(none)", "deleted"],
    ["api.example.com", "TXT", "60", '"v=spf1 -all"', "60", '"v=spf1 -all"', "unchanged"],
    ["api.example.com", "A", "—", "(none)", "—", ALIAS_SHOWN, "added"],
    ["api.example.com", "AAAA", "—", "(none)", "—", ALIAS_SHOWN, "added"],
]


# -- the page --------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_a_paused_execution_shows_its_plan_as_record_sets_before_and_after(paused, role):
    # when
    response = _login(role).get(_page(paused))

    # then: the plan as a table, its hash and its expiry; the approve link for operators only
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="pending-approval"' in html
    assert _rows(html, "plan-row") == PLAN_TABLE
    assert f'<code class="plan-hash">{PLAN_HASH}</code>' in html
    [[expiry]] = _rows(html, "approval-expiry")
    assert f"{Hook.objects.get().expires_at:%Y}" in expiry and "(in 6 days, 23 hours)" in expiry
    for change in ("DELETE api.example.com CNAME", "UPSERT api.example.com A"):
        assert f"<code>{change}</code>" in html
    approve = _control(paused, "approve")
    assert (f'href="{approve}"' in html) is (role == "operator")
    assert (f'href="{_control(paused, "cancel")}"' in html) is (role == "operator")


def test_json_on_the_page_is_pretty_printed_and_escaped(paused):
    html = _login("viewer").get(_page(paused)).content.decode()

    assert "&quot;note&quot;: &quot;&lt;script&gt;x&lt;/script&gt;&quot;" in html
    assert "<script>x</script>" not in html
    assert "<pre>{\n  &quot;plan&quot;: &quot;frozen&quot;\n}</pre>" in html  # a stage's output


def test_a_pending_approval_without_an_expiry_says_so(paused):
    Hook.objects.update(expires_at=None)

    html = _login("operator").get(_page(paused)).content.decode()

    assert _rows(html, "approval-expiry") == [["no expiry"]]


def test_an_approved_execution_shows_no_pending_approval_and_its_mutation(approved):
    html = _login("operator").get(_page(approved)).content.decode()

    assert 'id="pending-approval"' not in html
    assert "<strong>apply</strong> aws.route53.batch" in html
    assert "Run #1 · initial · succeeded (current)" in html
    # the timeline: the stage's row, then its step: key, status, kind, attempts
    assert _rows(html, "stage-apply")[0][1:4] == ["apply", "succeeded", "stage"]
    assert _rows(html, "receipt-apply")[0][1:5] == ["batch", "succeeded", "step", "1"]
    assert "hook.signalled" in html
    assert f'href="{_control(approved, "rollback")}"' in html


def test_a_rolled_back_execution_shows_both_runs_and_no_control(rolled_back):
    html = _login("operator").get(_page(rolled_back)).content.decode()

    assert "Run #2 · rollback · succeeded (current)" in html
    assert "Run #1 · initial · succeeded" in html
    assert html.index("Run #2") < html.index("Run #1")  # newest first
    assert _rows(html, "stage-rollback")[0][:3] == ["0", "rollback", "succeeded"]
    assert "execution.rolled_back" in html
    assert 'class="alfred-control' not in html  # a rolled-back execution is an audit record


def test_an_execution_failed_in_rollback_shows_the_drift_and_offers_rollback_again(
    failed_in_rollback,
):
    html = _login("operator").get(_page(failed_in_rollback)).content.decode()

    assert "Run #2 · rollback · failed (current)" in html
    stage = _rows(html, "stage-rollback")[0]
    assert stage[:3] == ["0", "rollback", "failed"] and '"code": "drifted"' in stage[7]
    assert f'href="{_control(failed_in_rollback, "rollback")}"' in html
    assert f'href="{_control(failed_in_rollback, "retry")}"' in html


@override_settings(ALFRED_READ_ONLY=True)
def test_a_read_only_instance_shows_the_plan_and_offers_no_control(paused):
    html = _login("operator").get(_page(paused)).content.decode()

    assert _rows(html, "plan-row") == PLAN_TABLE
    assert 'class="alfred-control' not in html and 'id="controls"' not in html


# -- who reaches a confirmation page ----------------------------------------------------------

CONFIRMATIONS = [
    ("paused", "approve"),
    ("paused", "cancel"),
    ("failed_in_rollback", "rollback"),
    ("failed_in_rollback", "retry"),
]


@pytest.mark.parametrize(("state", "control"), CONFIRMATIONS)
def test_an_operator_gets_each_confirmation_page(request, state, control):
    execution = request.getfixturevalue(state)

    response = _login("operator").get(_control(execution, control))

    html = response.content.decode()
    assert response.status_code == 200
    assert 'method="post"' in html and "csrfmiddlewaretoken" in html
    assert "What will happen" in html
    assert 'name="reason"' in html
    if control == "approve":
        assert f'name="plan_hash" value="{PLAN_HASH}"' in html
        assert _rows(html, "plan-row") == PLAN_TABLE
        assert 'name="force"' not in html  # asked only of a plan over the blast radius
    if control == "rollback":
        assert "<strong>apply</strong> aws.route53.batch" in html  # the mutation it undoes


@pytest.mark.parametrize(("state", "control"), CONFIRMATIONS)
def test_a_viewer_is_refused_every_confirmation_page_with_403(request, state, control):
    execution = request.getfixturevalue(state)
    before = Execution.objects.get(pk=execution.pk).status
    client = _login("viewer")

    shown = client.get(_control(execution, control))
    posted = client.post(_control(execution, control), {"reason": "x", "plan_hash": PLAN_HASH})

    assert shown.status_code == posted.status_code == 403
    assert Execution.objects.get(pk=execution.pk).status == before
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("state", "control"), CONFIRMATIONS)
def test_a_read_only_instance_refuses_every_confirmation_page(request, state, control):
    execution = request.getfixturevalue(state)
    client = _login("operator")

    with override_settings(ALFRED_READ_ONLY=True):
        shown = client.get(_control(execution, control))
        posted = client.post(_control(execution, control), {"reason": "x"})

    assert shown.status_code == 403
    assert posted.status_code == 503  # the middleware: no mutation reaches a view
    assert not AuditEntry.objects.exists()


def test_a_control_the_state_does_not_allow_sends_back_with_a_message(rolled_back):
    response = _login("operator").get(_control(rolled_back, "retry"), follow=True)

    assert response.redirect_chain == [(_page(rolled_back), 302)]
    assert f"Execution {rolled_back.pk}: retry is not possible now, it is rolled_back" in (
        response.content.decode()
    )


def test_an_unknown_execution_or_control_is_404(paused):
    client = _login("operator")

    assert client.get("/admin/executions/execution/exe_missing/approve/").status_code == 404
    assert client.get(_page(paused).replace("/change/", "/explode/")).status_code in (
        302,
        404,
    )


# -- what a POST does --------------------------------------------------------------------------


def _audit(execution: Execution, action: str) -> AuditEntry:
    return AuditEntry.objects.get(target_id=execution.pk, action=action)


def test_approve_signals_the_checkpoint_for_the_hash_shown_and_records_the_reason(paused):
    response = _login("operator").post(
        _control(paused, "approve"),
        {"plan_hash": PLAN_HASH, "reason": "CHG-7: the CNAME is obsolete"},
        follow=True,
    )

    assert response.redirect_chain == [(_page(paused), 302)]
    assert f"approved the plan {PLAN_HASH}" in response.content.decode()
    assert Hook.objects.get(execution=paused).status == HookStatus.SIGNALLED
    entry = _audit(paused, "execution.approve")
    assert entry.reason == "CHG-7: the CNAME is obsolete"
    assert entry.data["plan_hash"] == PLAN_HASH and entry.actor.startswith("user:")


def test_a_plan_over_the_blast_radius_is_approved_only_with_force(paused):
    Hook.objects.filter(execution=paused).update(
        payload={**approval_payload(), "force_required": True}
    )
    client = _login("operator")

    page = client.get(_control(paused, "approve")).content.decode()
    refused = client.post(_control(paused, "approve"), {"plan_hash": PLAN_HASH, "reason": "ok"})

    assert "over the blast-radius limits" in page and 'name="force"' in page
    assert refused.status_code == 200
    assert "over the blast-radius thresholds: approve it with force" in refused.content.decode()
    assert Hook.objects.get(execution=paused).status == HookStatus.PENDING

    forced = client.post(
        _control(paused, "approve"),
        {"plan_hash": PLAN_HASH, "reason": "a planned migration", "force": "on"},
        follow=True,
    )

    assert forced.redirect_chain == [(_page(paused), 302)]
    hook = Hook.objects.get(execution=paused)
    assert hook.status == HookStatus.SIGNALLED
    assert hook.signals.get().payload["force"] is True
    assert _audit(paused, "execution.approve").data["force"] is True


def test_approving_a_stale_hash_shows_the_new_hash_and_the_page_again(paused):
    # given: the plan changed after the operator's page was drawn
    fresh = "7c" * 32
    Hook.objects.filter(execution=paused).update(payload=approval_payload(fresh))

    # when: the operator approves the hash they saw
    response = _login("operator").post(
        _control(paused, "approve"), {"plan_hash": PLAN_HASH, "reason": "ok"}
    )

    # then: refused with the new hash, the approval page again naming it; nothing approved
    html = response.content.decode()
    assert response.status_code == 200
    assert f"The plan changed since that page was shown: the plan waiting now has hash {fresh}" in (
        html
    )
    assert f'name="plan_hash" value="{fresh}"' in html
    assert _rows(html, "plan-row") == PLAN_TABLE
    assert Hook.objects.get(execution=paused).status == HookStatus.PENDING
    assert not AuditEntry.objects.exists()


def test_approving_an_expired_plan_is_a_message_not_a_500(paused):
    Hook.objects.update(expires_at=timezone.now() - timedelta(minutes=1))

    response = _login("operator").post(
        _control(paused, "approve"), {"plan_hash": PLAN_HASH, "reason": "late"}, follow=True
    )

    assert response.redirect_chain == [(_page(paused), 302)]
    assert "expired" in response.content.decode()
    assert Hook.objects.get(execution=paused).status == HookStatus.PENDING


def test_a_confirmation_without_a_reason_it_requires_is_the_form_again(failed_in_rollback):
    # rollback requires a reason (executions.controls.ROLLBACK), as on the API
    response = _login("operator").post(_control(failed_in_rollback, "rollback"), {"reason": "  "})

    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert not AuditEntry.objects.filter(action="execution.rollback").exists()


@pytest.mark.parametrize(
    "reason", ["x" * 1001, "ok\u202eko"], ids=["over-1000-characters", "bidi-override"]
)
def test_a_reason_the_api_would_refuse_is_the_form_again(paused, reason):
    response = _login("operator").post(
        _control(paused, "approve"), {"plan_hash": PLAN_HASH, "reason": reason}
    )

    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert Hook.objects.get(execution=paused).status == HookStatus.PENDING
    assert not AuditEntry.objects.filter(action="execution.approve").exists()


def test_cancel_rejects_the_pending_plan_and_records_the_reason(paused):
    response = _login("operator").post(
        _control(paused, "cancel"), {"reason": "CHG-7 withdrawn"}, follow=True
    )

    assert response.redirect_chain == [(_page(paused), 302)]
    assert f"Execution {paused.pk}: cancel recorded; now canceled" in response.content.decode()
    assert Execution.objects.get(pk=paused.pk).status == ExecutionStatus.CANCELED
    assert _audit(paused, "execution.cancel").reason == "CHG-7 withdrawn"


def test_rollback_queues_a_rollback_run_and_records_the_reason(failed_in_rollback):
    response = _login("operator").post(
        _control(failed_in_rollback, "rollback"),
        {"reason": "drift fixed by hand; undo again"},
        follow=True,
    )

    assert response.redirect_chain == [(_page(failed_in_rollback), 302)]
    execution = Execution.objects.select_related("current_run").get(pk=failed_in_rollback.pk)
    assert execution.status == ExecutionStatus.QUEUED
    assert execution.current_run is not None
    assert (execution.current_run.number, execution.current_run.kind) == (3, RunKind.ROLLBACK)
    assert _audit(execution, "execution.rollback").reason == "drift fixed by hand; undo again"


def test_retry_queues_a_retry_run_with_an_audit_entry(failed_in_rollback):
    response = _login("operator").post(
        _control(failed_in_rollback, "retry"), {"reason": "provider fixed"}, follow=True
    )

    assert response.redirect_chain == [(_page(failed_in_rollback), 302)]
    execution = Execution.objects.select_related("current_run").get(pk=failed_in_rollback.pk)
    assert execution.status == ExecutionStatus.QUEUED
    assert execution.current_run is not None and execution.current_run.kind == RunKind.RETRY
    entry = _audit(execution, "execution.retry")
    assert entry.reason == "provider fixed"
    assert entry.actor.startswith("user:")


def test_a_service_refusal_is_a_message_not_a_500(failed_in_rollback):
    # given: the persisted input no longer fits the workflow's schema
    Execution.objects.filter(pk=failed_in_rollback.pk).update(input={"zone": "example.com"})

    # when
    response = _login("operator").post(
        _control(failed_in_rollback, "retry"), {"reason": "try again"}, follow=True
    )

    # then
    assert response.redirect_chain == [(_page(failed_in_rollback), 302)]
    assert "subdomain" in response.content.decode()  # InvalidInput names the field
    assert Execution.objects.get(pk=failed_in_rollback.pk).status == ExecutionStatus.FAILED
    assert not AuditEntry.objects.exists()


def test_a_record_set_whose_values_change_is_one_replaced_row():
    from workflows.views import plan_rows

    plain = {**CNAME, "type": "A", "ttl": 60, "values": ["192.0.2.1", "192.0.2.2"]}
    weighted = {**plain, "set_identifier": "blue", "routing": {"Weight": 10}}

    rows = plan_rows({"before": [plain, weighted], "after": [_alias("A"), weighted]})

    assert [(r["type"], r["change"]) for r in rows] == [
        ("A", "replaced"),
        ("A", "unchanged"),
    ]
    assert rows[0]["before"]["data"] == ["192.0.2.1", "192.0.2.2"]
    assert rows[0]["after"] == {"ttl": "", "data": [ALIAS_SHOWN], "routing": ""}
    assert rows[1]["before"]["routing"] == '{"SetIdentifier": "blue", "Weight": 10}'
