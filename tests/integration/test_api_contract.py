"""The HTTP contract: problem+json for every error, auth and roles, the read API."""

from __future__ import annotations

import json
import re
from typing import cast

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from alfred.tokens import token_create, token_revoke
from executions.models import AuditEntry, Execution, Stage
from tests.support.helpers import LAMBDA, SUBDOMAIN, assert_problem, libpq_trace, submit

pytestmark = pytest.mark.django_db


# --- errors ---------------------------------------------------------------------------------


def test_unauthenticated_is_401_with_a_bearer_challenge():
    response = APIClient().get("/api/v1/executions")

    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="alfred"'


def test_an_unknown_or_revoked_token_is_401():
    _, raw = token_create(name="gone", role="integration")
    token_revoke(name="gone")
    client = APIClient()

    for token in (raw, "alf_not-a-token", "something-else"):
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert_problem(client.get("/api/v1/executions"), 401, "authentication_failed")


def test_an_integration_may_not_read_the_audit_log(api, operator_api):
    AuditEntry.objects.create(
        actor="ops",
        action="lane.recover",
        target_type="lane",
        target_id="aws-infrastructure",
        reason="stuck",
    )

    assert_problem(api.get("/api/v1/audit"), 403, "permission_denied")
    entries = operator_api.get("/api/v1/audit").json()["results"]
    assert [e["reason"] for e in entries] == ["stuck"]


def test_an_unknown_workflow_is_404(api):
    body = assert_problem(submit(api, "add-everything", {}), 404, "unknown_workflow")

    assert "add-subdomain" in body["workflows"]


def test_an_unknown_execution_is_404(api):
    assert_problem(api.get("/api/v1/executions/exe_nope"), 404, "not_found")
    assert_problem(api.get("/api/v1/executions/exe_nope/events"), 404, "not_found")
    assert_problem(api.get("/api/v1/nothing-here"), 404, "not_found")


@pytest.mark.parametrize(
    ("data", "content_type", "status", "code"),
    [
        ("zone=example.com", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
        ('{"zone": ', "application/json", 400, "malformed_request"),
    ],
)
def test_a_body_alfred_cannot_read_is_refused(api, data, content_type, status, code):
    response = api.post(
        "/api/v1/workflows/add-subdomain/executions",
        data=data,
        content_type=content_type,
        HTTP_IDEMPOTENCY_KEY="k-1",
    )

    assert_problem(response, status, code)
    assert not Execution.objects.exists()


def test_an_oversized_body_is_413(api, settings):
    settings.ALFRED_MAX_BODY_BYTES = 1024
    body = {**SUBDOMAIN, "ticket_ids": [f"OPS-{i}" for i in range(500)]}

    problem = assert_problem(submit(api, "add-subdomain", body), 413, "payload_too_large")

    assert problem["limit"] == 1024
    assert not Execution.objects.exists()


def test_invalid_input_is_422_with_field_errors(api):
    response = submit(
        api, "add-subdomain", {"zone": "example.com", "colour": "red", "dry_run": "yes"}
    )

    problem = assert_problem(response, 422, "invalid_input")
    fields = {e["field"] for e in problem["errors"]}
    assert fields == {"/subdomain", "/colour", "/dry_run"}
    assert not Execution.objects.exists()


def test_a_body_that_is_not_an_object_is_422(api):
    problem = assert_problem(submit(api, "add-subdomain", ["zone"]), 422, "invalid_input")

    assert problem["errors"][0]["field"] == ""


def test_a_read_only_instance_refuses_mutations_and_serves_reads(api):
    with override_settings(ALFRED_READ_ONLY=True):
        refused = submit(api, "add-subdomain", SUBDOMAIN)
        listing = api.get("/api/v1/executions")

    assert_problem(refused, 503, "read_only_instance")
    assert listing.status_code == 200
    assert not Execution.objects.exists()


# A body that cannot be read (415, 400) and one that does not fit (422), per control.
_MALFORMED_BODIES = [
    ("zone=example.com", "application/x-www-form-urlencoded"),
    ('{"plan_hash": ', "application/json"),
    ('{"plan_hash": "not-a-hash", "reason": 7}', "application/json"),
]


@pytest.mark.parametrize(("data", "content_type"), _MALFORMED_BODIES)
@pytest.mark.parametrize("control", ["approve", "rollback"])
def test_who_may_act_is_answered_before_what_is_wrong_with_the_body(
    api, operator_api, control, data, content_type
):
    # given: an integration's execution, and another integration
    execution = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    _, raw = token_create(name="rival", role="integration")
    rival = APIClient()
    rival.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    url = f"/api/v1/executions/{execution}/{control}"

    # when: each posts a body that is not one the control takes
    mine = api.post(url, data=data, content_type=content_type)
    theirs = rival.post(url, data=data, content_type=content_type)
    operators = operator_api.post(url, data=data, content_type=content_type)

    # then: the owner, an integration, may not use an operator's control at all: 403, not a
    # complaint about the body; another integration does not see the execution: 404; only
    # an operator hears about the body
    assert_problem(mine, 403, "permission_denied")
    assert_problem(theirs, 404, "not_found")
    assert operators.status_code in (400, 415, 422), operators.content
    assert Execution.objects.get(pk=execution).status == "queued"
    assert not AuditEntry.objects.filter(target_id=execution).exists()


def test_a_cancel_of_an_execution_the_caller_cannot_read_is_404_whatever_the_body(api):
    execution = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    _, raw = token_create(name="rival", role="integration")
    rival = APIClient()
    rival.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    response = rival.post(
        f"/api/v1/executions/{execution}/cancel",
        data='{"reason": ',
        content_type="application/json",
    )

    assert_problem(response, 404, "not_found")
    assert Execution.objects.get(pk=execution).status == "queued"


def test_a_read_only_instance_refuses_a_control_before_reading_its_body(operator_api, api):
    execution = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]

    with override_settings(ALFRED_READ_ONLY=True):
        response = operator_api.post(
            f"/api/v1/executions/{execution}/rollback", data="{", content_type="application/json"
        )

    assert_problem(response, 503, "read_only_instance")


# --- reads ----------------------------------------------------------------------------------


def test_executions_are_listed_newest_first_with_filters_and_cursor_pages(api):
    ids = [
        submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": f"s{i}"}).json()["id"]
        for i in range(5)
    ]
    lambda_id = submit(api, "update-lambda-version", LAMBDA).json()["id"]

    first = api.get("/api/v1/executions?workflow=add-subdomain&limit=2").json()
    second = api.get(first["next"]).json()
    by_status = api.get("/api/v1/executions?status=queued&workflow=update-lambda-version").json()

    assert [e["id"] for e in first["results"]] == ids[::-1][:2]
    assert [e["id"] for e in second["results"]] == ids[::-1][2:4]
    assert [e["id"] for e in by_status["results"]] == [lambda_id]
    assert_problem(api.get("/api/v1/executions?status=sleeping"), 400, "malformed_request")


def test_the_execution_resource(api):
    created = submit(api, "update-lambda-version", LAMBDA).json()

    body = api.get(f"/api/v1/executions/{created['id']}").json()

    assert body["id"] == created["id"]
    # the answer to the POST (drawn from what the acceptance inserted) is what a read finds
    assert {k: v for k, v in created.items() if k != "acceptance"} == {
        k: v for k, v in body.items() if k != "acceptance"
    }
    assert body["workflow"] == "update-lambda-version"
    assert body["input"] == {
        "target": "checkout-api",
        "environment": "production",
        "version": "42",
        "ticket_ids": [],
        "dry_run": False,
    }
    assert body["lane"] == {
        "key": "lambda:checkout-api:production",
        "role": "owner",
        "state": "held",
        "position": None,
    }
    assert body["acceptance"] is None  # only in the answer to the POST
    assert body["pending_approval"] is None
    assert body["children"] == [] and body["parent"] is None and body["predecessor"] is None
    assert set(body["links"]) == {"self", "events", "stream", "cancel"}


def test_what_an_execution_shows_besides_its_row(api):
    """Its stages, the operator checkpoint it waits on, its children and its place on its
    lane: read together (one round trip), each as the ORM would read it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from alfred.ids import new_id
    from executions.models import Hook, HookStatus
    from tests.support.factories import ExecutionFactory

    # given: a domain queued second behind another on the shared lane
    submit(api, "add-domain", {"domain": "one.example"})
    second = submit(api, "add-domain", {"domain": "two.example"}).json()
    execution = Execution.objects.select_related("current_run").get(pk=second["id"])
    run = execution.current_run
    assert run is not None
    # and: four checkpoints, of which only the newest pending operator one is shown (the
    # ones made after it are not for an operator, or answered)
    for name, operator, status in [
        ("older", True, HookStatus.PENDING),
        ("newest", True, HookStatus.PENDING),
        ("callback", False, HookStatus.PENDING),
        ("answered", True, HookStatus.SIGNALLED),
    ]:
        Hook.objects.create(
            execution=execution,
            run=run,
            stage="plan",
            name=name,
            token=f"token-{name}",
            operator=operator,
            status=status,
            payload={"plan": {"changes": [name]}, "plan_hash": f"sha256:{name}"},
        )
    newest = Hook.objects.get(name="newest")
    assert Hook.objects.filter(execution=execution).awaiting_operator().first() == newest
    # and: two children, the later id made first
    children = sorted([new_id("exe"), new_id("exe")])
    for child in reversed(children):
        ExecutionFactory(id=child, parent=execution, principal=execution.principal)

    # when
    with CaptureQueriesContext(connection) as queries, libpq_trace() as trace:
        body = api.get(f"/api/v1/executions/{second['id']}").json()

    # then
    assert body["lane"] == {
        "key": "aws-infrastructure",
        "role": "queued",
        "state": "held",
        "position": 1,
    }
    assert [s["name"] for s in body["stages"]] == list(
        Stage.objects.filter(run=run).order_by("position").values_list("name", flat=True)
    )
    assert body["pending_approval"] == {
        "hook": newest.id,
        "stage": "plan",
        "plan": {"changes": ["newest"]},
        "plan_hash": "sha256:newest",
        "requested_at": newest.created_at.isoformat().replace("+00:00", "Z"),
        "expires_at": None,
        "force_required": False,
        "policy": {
            "rule": "default",
            "asks": "1 approval from distinct operators; not the requester",
            "approvals_required": 1,
            "approvals": [],
            "no_longer_counted": [],
            "summary": "0 of 1 approvals",
            "requester_may_approve": False,
            "earlier_approvers_may_approve": True,
            "approvers": ["operators"],
            "blocked": None,
        },
    }
    assert body["children"] == children
    # the token; then the execution with its stages, checkpoint, children and lane; then
    # where the checkpoint's approval stands (what was given, the requesters' keys: the
    # default rule lets every operator in, so no approver is read)
    assert len(queries) == 8 and trace.round_trips == 3


def test_the_stages_shown_are_those_of_the_run_shown_when_a_new_run_lands_between(api):
    from executions.models import RunKind
    from executions.runtime.records import run_again
    from executions.selectors import execution_parts

    # given: an execution as read, then a retry's run committed before its parts are read
    shown = Execution.objects.get(pk=submit(api, "add-subdomain", SUBDOMAIN).json()["id"])
    first_run = shown.current_run_id
    run_again(Execution.objects.get(pk=shown.id), kind=RunKind.RETRY, stages=("plan", "verify"))

    # when
    parts = execution_parts(shown)

    # then: the first run's stages, not the retry's
    assert {stage.run_id for stage in parts.stages} == {first_run}
    assert [stage.name for stage in parts.stages] == [
        name
        for name in Stage.objects.filter(run_id=first_run)
        .order_by("position")
        .values_list("name", flat=True)
    ]


@pytest.mark.parametrize("role", ["integration", "operator", "viewer"])
def test_reading_one_execution_sees_what_the_list_sees(role):
    """The reads of one execution check visibility in SQL; the list builds on the queryset
    (executions_visible). For each caller, the same executions: owned, held by a delivery
    key, another's."""
    from alfred.principals import Caller
    from executions.models import DeliveryKey
    from executions.selectors import (
        execution_detail,
        execution_events_visible,
        executions_visible,
    )
    from tests.support.factories import ExecutionFactory

    me = "token:me"
    owned, keyed, foreign = (
        cast(Execution, ExecutionFactory(principal=p)) for p in (me, "token:b", "token:c")
    )
    DeliveryKey.objects.create(
        principal=me, key="k", fingerprint="f", execution=keyed, outcome="reused"
    )
    caller = Caller(principal=me, role=role)

    for execution in (owned, keyed, foreign):
        listed = executions_visible(caller).filter(pk=execution.pk).exists()
        try:
            execution_detail(execution.pk, caller)
            execution_events_visible(execution.pk, caller, after=0, limit=10)
            read = True
        except Execution.DoesNotExist:
            read = False
        assert read == listed, execution
    assert executions_visible(caller).count() == (3 if role != "integration" else 2)


def test_events_are_read_in_pages_after_a_sequence(api):
    from executions.events import EventType
    from executions.outbox import event_emit

    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    for i in range(4):
        event_emit(
            execution_id=execution_id,
            type=EventType.ASSISTANCE,
            key=f"{execution_id}:t{i}",
            payload={"kind": "test", "i": i},
        )

    first = api.get(f"/api/v1/executions/{execution_id}/events?limit=3").json()
    rest = api.get(f"/api/v1/executions/{execution_id}/events?after={first['next_after']}").json()

    assert [e["sequence"] for e in first["events"]] == [1, 2, 3]
    assert first["has_more"] is True
    assert [e["sequence"] for e in rest["events"]] == [4, 5]
    assert rest["has_more"] is False
    assert_problem(
        api.get(f"/api/v1/executions/{execution_id}/events?after=-1"), 400, "malformed_request"
    )


def test_a_re_emitted_event_key_is_a_no_op(api):
    from executions.events import EventType
    from executions.outbox import event_emit

    ASSISTANCE = EventType.ASSISTANCE

    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]

    tick = {"kind": "test"}
    first = event_emit(execution_id=execution_id, type=ASSISTANCE, key="same", payload=tick)
    again = event_emit(execution_id=execution_id, type=ASSISTANCE, key="same", payload=tick)
    after = event_emit(execution_id=execution_id, type=ASSISTANCE, key="next", payload=tick)

    assert (first, again, after) == (2, None, 3)


@pytest.mark.django_db(transaction=True)  # NOTIFY is delivered at commit
def test_events_emitted_together_skip_known_keys_number_gaplessly_and_owe_deliveries(api):
    import psycopg
    from django.db import transaction

    from executions.events import EventType
    from executions.models import Execution, OutboxEvent, WebhookDelivery, WebhookEndpoint
    from executions.outbox import CHANNEL, Event, event_emit, events_emit
    from tests.conftest import subprocess_database_url

    A, B = EventType.ASSISTANCE, EventType.LANE_RECOVERY_REQUIRED  # an endpoint wants B

    def a(n: int) -> dict[str, object]:
        return {"kind": "test", "n": n}

    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    wants_b = WebhookEndpoint.objects.create(
        url="https://hooks.example.com/b", secret="s", event_types=[B]
    )
    event_emit(execution_id=execution_id, type=A, key="known", payload=a(0))  # sequence 2

    with psycopg.connect(subprocess_database_url(), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        with transaction.atomic():
            Execution.objects.select_for_update().get(pk=execution_id)  # the writers' lock
            sequences = events_emit(
                execution_id,
                [
                    Event(A, "first", a(1)),
                    Event(A, "known", a(2)),  # emitted before: left out
                    Event(B, "second", {"lane": "l", "reason": "3"}),
                ],
            )
            again = events_emit(execution_id, [Event(A, "first", a(9))])
        notified = [n.payload for n in listener.notifies(timeout=2, stop_after=2)]

    assert (sequences, again) == ([3, 4], [])
    rows = OutboxEvent.objects.filter(execution_id=execution_id).order_by("sequence")
    assert [(e.sequence, e.key, e.payload) for e in rows][1:] == [
        (2, "known", a(0)),
        (3, "first", a(1)),
        (4, "second", {"lane": "l", "reason": "3"}),
    ]
    assert Execution.objects.get(pk=execution_id).last_sequence == 4
    assert notified == [f"{execution_id} 3", f"{execution_id} 4"]
    owed = WebhookDelivery.objects.filter(endpoint=wants_b).values_list("event__key", flat=True)
    assert list(owed) == ["second"]
    assert event_emit(execution_id=execution_id, type=A, key="next", payload=a(5)) == 5


def test_the_workflows_and_their_schemas(api):
    # (the tests' own workflows, ALFRED_EXTRA_WORKFLOWS, follow the five)
    body = [w for w in api.get("/api/v1/workflows").json() if not w["name"].startswith("test-")]

    assert [w["name"] for w in body] == [
        "onboard-domain",
        "add-domain",
        "add-certificate",
        "update-lambda-version",
        "add-subdomain",
    ]
    for workflow in body:
        assert workflow["input_schema"]["type"] == "object"
        assert workflow["stages"][0] == "plan"
        assert workflow["links"]["executions"].endswith(f"/{workflow['name']}/executions")


def test_the_openapi_schema_declares_the_contract(api):
    response = api.get("/api/schema/?format=json")
    schema = json.loads(response.content)

    create = schema["paths"]["/api/v1/workflows/add-subdomain/executions"]["post"]
    key = next(p for p in create["parameters"] if p["name"] == "Idempotency-Key")
    assert key["in"] == "header" and key["required"] is True
    assert (key["schema"]["minLength"], key["schema"]["maxLength"]) == (1, 255)
    for status in ("400", "401", "403", "404", "409", "413", "415", "422", "503"):
        assert "application/problem+json" in create["responses"][status]["content"], status
    assert "lane_conflict" in create["responses"]["409"]["description"]
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_a_request_without_a_header_the_document_requires_is_refused_as_such_past_the_rate(
    operator_api, settings
):
    """What Schemathesis's missing_required_header check holds (ST203), with the throttles
    on as `make run` has them: every operation of the OpenAPI document that requires a header
    refuses a request without it with a 4xx about the request (Schemathesis's own list), not
    a 429 telling the caller to send it again, even once the caller's budget is spent."""
    settings.ALFRED_THROTTLE_RATES = {"trigger": "1/min", "control": "1/min"}
    schema = json.loads(operator_api.get("/api/schema/?format=json").content)
    required = [
        (path, method, parameter["name"], operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "header" and parameter.get("required")
    ]
    triggers = [r for r in required if r[0].startswith("/api/v1/workflows/")]
    five = ["add-subdomain", "add-certificate", "add-domain", "onboard-domain"]
    assert {f"/api/v1/workflows/{w}/executions" for w in [*five, "update-lambda-version"]} <= {
        path for path, _, name, _ in triggers if name == "Idempotency-Key"
    }
    # given: the caller's trigger budget is spent
    assert submit(operator_api, "add-subdomain", SUBDOMAIN).status_code == 202
    assert_problem(submit(operator_api, "add-domain", {"domain": "a.example"}), 429, "throttled")

    for path, method, name, operation in required:
        # when: a request that sends every required header but that one
        example = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        examples: list[dict] = list(example.get("examples", {}).values())
        body = examples[0]["value"] if examples else {}
        headers = {
            f"HTTP_{p['name'].upper().replace('-', '_')}": "x-1"
            for p in operation["parameters"]
            if p["in"] == "header" and p.get("required") and p["name"] != name
        }
        response = getattr(operator_api, method)(path, body, format="json", **headers)

        # then
        assert response.status_code in (400, 401, 403, 406, 415, 422), (path, name, response)
        if (path, method, name, operation) in triggers:
            assert_problem(response, 400, "idempotency_key_missing")


_HOST_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 58]) + ".io"
_WEBHOOK_URLS = [
    # taken, and fit the pattern
    "https://hooks.example.com/alfred",
    "http://a.bc",
    "https://a.example.com.:8080/x?y=1#z",
    "https://a.example.com:65535/x",
    "https://a.example.com:99999/x",  # past 65535: Django's validator takes five digits
    "https://a.example.com:0/x",
    "https://xn--bcher-kva.example/hook",
    f"https://{'a' * 63}.example.com/",
    f"https://{_HOST_253}/",
    "https://a.example.com/a%20b;c=d?q=a/b?c#f",
    # refused, and do not fit it: what Schemathesis sent as schema-valid (ST202), labels of
    # 64 characters, a host of 254, a one-letter or numeric top-level label, another scheme,
    # an underscore, whitespace
    "https://" + ".".join(["0" * 63, *["a" * 63] * 31]) + ".aaaaaaa",
    f"https://{'a' * 64}.example.com/",
    f"https://{_HOST_253}x/",
    "https://x.y/",
    "https://a.0/",
    "ftp://files.example.com/",
    "https://a_b.example.com/",
    "https://a.example.com/ x",
    # ... and no URI (`format: uri`): what Schemathesis then sent and saw saved (ST201) and
    # answered (ST108), an IRI, a broken escape
    "https://hooks.example.com/#$\u00f1:}\u00d5\u0001\u0093(",
    "https://b\u00fccher.example/hook",
    "https://a.example.com/a%zz",
]


def test_a_webhook_url_fits_the_documents_pattern_exactly_when_the_api_takes_it(
    operator_api, settings
):
    """What Schemathesis's positive_data_acceptance holds (ST202) for a webhook endpoint's
    URL, and negative_data_rejection for what the pattern leaves out, on these URLs: the
    document's pattern (as served) admits a URL exactly when the API saves it."""
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    assert len(_HOST_253) == 253
    schema = json.loads(operator_api.get("/api/schema/?format=json").content)
    pattern = schema["components"]["schemas"]["WebhookEndpointRequest"]["properties"]["url"][
        "pattern"
    ]

    for url in _WEBHOOK_URLS:
        response = operator_api.post("/api/v1/webhooks/endpoints", {"url": url}, format="json")

        fits = re.search(pattern, url) is not None
        assert response.status_code == (201 if fits else 422), (url, response.content)


def test_each_workflow_has_its_own_trigger_operation_with_its_input_schema(api):
    from executions import selectors
    from executions.catalog import workflow_get

    schema = json.loads(api.get("/api/schema/?format=json").content)

    assert "/api/v1/workflows/{workflow}/executions" not in schema["paths"]
    for name in selectors.workflow_names():
        create = schema["paths"][f"/api/v1/workflows/{name}/executions"]["post"]
        body = create["requestBody"]["content"]["application/json"]
        declared = schema["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]
        served = workflow_get(name).input_schema
        assert declared["required"] == served["required"], name
        assert set(declared["properties"]) == set(served["properties"]), name
        assert declared["additionalProperties"] is False, name
        assert create["requestBody"]["required"] is True
        assert [e["value"] for e in body["examples"].values()] == served["examples"], name


def test_the_links_lead_from_an_answer_to_the_operations_that_take_what_it_names(api, operator_api):
    schema = json.loads(api.get("/api/schema/?format=json").content)
    operations = {
        operation["operationId"]: operation
        for item in schema["paths"].values()
        for operation in item.values()
    }

    # every link names an operation and one of its path parameters, and takes the value from
    # a place its answer's schema has
    followed: dict[str, set[str]] = {}
    for source in operations.values():
        for response in source["responses"].values():
            for name, link in response.get("links", {}).items():
                target = operations[link["operationId"]]
                taken = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
                assert set(link["parameters"]) <= taken, link
                (expression,) = link["parameters"].values()
                answer = response["content"]["application/json"]["schema"]
                assert _schema_at(schema, answer, expression) is not None, (name, expression)
                followed.setdefault(source["operationId"], set()).add(name)
    assert {
        "executions_create_add_domain",
        "executions_create_add_subdomain",
        "lanes_list",
        "webhook_endpoints_create",
        "webhook_deliveries_list",
    } <= set(followed)
    # an add-subdomain never queues on a lane: no link to one from its answer
    assert "LanesRecoverByKey" in followed["executions_create_add_domain"]
    assert "LanesRecoverByKey" not in followed["executions_create_add_subdomain"]

    # and followed on real answers: a new domain's id and lane key name it and its lane
    links = operations["executions_create_add_domain"]["responses"]["202"]["links"]
    body = submit(api, "add-domain", {"domain": "links.example"}).json()
    execution_id = _pointed(body, links["ExecutionsRetrieveByExecutionId"]["parameters"])
    assert api.get(f"/api/v1/executions/{execution_id}").status_code == 200
    key = _pointed(body, links["LanesRetrieveByKey"]["parameters"])
    assert operator_api.get(f"/api/v1/lanes/{key}").json()["owner"] == body["id"]
    lanes = operator_api.get("/api/v1/lanes").json()
    listed = operations["lanes_list"]["responses"]["200"]["links"]["LanesRetrieveByKey"]
    assert _pointed(lanes, listed["parameters"]) == key


def _schema_at(document: dict, schema: dict, expression: str) -> dict | None:
    """The schema of the value at ``expression`` (``$response.body#/a/0/b``) in an answer of
    ``schema``, following ``$ref`` and ``allOf``; None where the schema has no such place."""
    node: dict | None = schema
    for part in expression.removeprefix("$response.body#/").split("/"):
        while node is not None and ("$ref" in node or "allOf" in node):
            ref = node["$ref"] if "$ref" in node else node["allOf"][0]["$ref"]
            node = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
        if node is None:
            return None
        node = node.get("items") if part.isdigit() else node.get("properties", {}).get(part)
    return node


def _pointed(answer: object, parameters: dict[str, str]) -> object:
    """The value a link's one parameter takes from ``answer`` (``$response.body#/a/0/b``)."""
    (expression,) = parameters.values()
    node = answer
    for part in expression.removeprefix("$response.body#/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def test_every_refusal_an_operation_can_answer_is_declared(api):
    schema = json.loads(api.get("/api/schema/?format=json").content)

    for path, item in schema["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            if operation.get("parameters") and any(
                p["in"] in ("query", "header") for p in operation["parameters"]
            ):
                assert "400" in responses, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415", "422"} <= set(responses), (method, path)
    audit = schema["paths"]["/api/v1/audit"]["get"]
    limit = next(p for p in audit["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 200)
    cursor = next(p for p in audit["parameters"] if p["name"] == "cursor")
    assert cursor["schema"]["pattern"].startswith("^")


def test_problem_json_in_accept_gets_json_not_406(api):
    response = api.get("/api/v1/executions", HTTP_ACCEPT="application/problem+json")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    refused = api.get("/api/v1/executions?limit=0", HTTP_ACCEPT="application/problem+json")
    assert_problem(refused, 400, "malformed_request")


def test_the_api_docs_page_is_served_without_internet(client):
    response = client.get("/api/docs/")

    assert response.status_code == 200
    assert b"swagger-ui" in response.content
    assert b"cdn." not in response.content


def test_the_contract_page_documents_every_problem_code():
    from pathlib import Path

    from alfred.problems import CODES

    page = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()
    errors = page[page.index("\n## Errors") :]
    rows = {
        line.split("|")[1].strip().strip("`"): int(line.split("|")[2])
        for line in errors[: errors.index("\n## ", 1)].splitlines()
        if line.startswith("| `") and line.split("|")[2].strip().isdigit()
    }
    assert rows == {code: status for code, (status, _) in CODES.items()}


def test_every_missing_required_field_is_named(api):
    problem = assert_problem(submit(api, "add-subdomain", {}), 422, "invalid_input")

    assert {e["field"] for e in problem["errors"]} == {"/zone", "/subdomain"}


def test_an_unknown_workflow_is_404_before_the_key_is_checked(api):
    response = api.post("/api/v1/workflows/nope/executions", {}, format="json")

    assert_problem(response, 404, "unknown_workflow")


def test_bad_paging_parameters_are_400(api):
    assert_problem(api.get("/api/v1/executions?cursor=garbage"), 400, "malformed_request")
    assert_problem(api.get("/api/v1/executions?limit=abc"), 400, "malformed_request")
    assert_problem(api.get("/api/v1/executions?limit=0"), 400, "malformed_request")


def test_api_errors_stay_problems_with_debug_on(api, settings):
    settings.DEBUG = True

    response = api.get("/api/v1/no-such-thing")

    assert_problem(response, 404, "not_found")


def test_the_lane_endpoints_declare_problem_responses(api):
    schema = json.loads(api.get("/api/schema/?format=json").content)

    detail = schema["paths"]["/api/v1/lanes/{key}"]["get"]["responses"]
    create = schema["paths"]["/api/v1/workflows/add-domain/executions"]["post"]["responses"]
    assert "application/problem+json" in detail["404"]["content"]
    assert "application/problem+json" in detail["401"]["content"]
    assert set(create["202"]["headers"]) == {"Location", "Idempotent-Replayed"}
