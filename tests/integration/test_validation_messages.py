"""Validation messages say what is expected, with an example, never a regular expression:
every pattern-validated field of the five workflows' inputs (found by walking their schemas,
so a new pattern without its words fails here) and of the other API inputs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from executions.catalog import workflow_get
from executions.models import Execution, WebhookEndpoint
from tests.support.factories import ExecutionFactory
from tests.support.helpers import assert_problem, submit
from workflows.inputs import EXPECTED

pytestmark = pytest.mark.django_db

WORKFLOWS = [
    "add-subdomain",
    "add-certificate",
    "add-domain",
    "onboard-domain",
    "update-lambda-version",
]
# A value no pattern of the API admits: two words.
BROKEN = "two words"


def _patterned(schema: dict[str, Any]) -> Iterator[tuple[str, bool, dict[str, Any]]]:
    """(property, whether the pattern is on its items, the schema that says what is expected)
    for every property whose value, or whose items, a pattern checks."""
    for name, prop in schema["properties"].items():
        if "pattern" in prop:
            yield name, False, prop
        elif "pattern" in prop.get("items", {}):
            yield name, True, prop["items"]
        elif any("pattern" in form for form in prop.get("anyOf", [])):
            yield name, False, prop


def _example(expected: str) -> str:
    return expected.rsplit(", e.g. ", 1)[1]


CASES = [
    (workflow, name, on_items, described)
    for workflow in WORKFLOWS
    for name, on_items, described in _patterned(workflow_get(workflow).input_schema)
]


def test_every_pattern_of_the_five_inputs_is_covered():
    # a field per pattern, and none left out of CASES: hostnames, tickets, ARN, slugs, version
    assert {(w, n) for w, n, _, _ in CASES} >= {
        ("add-subdomain", "zone"),
        ("add-subdomain", "subdomain"),
        ("add-subdomain", "ticket_ids"),
        ("add-certificate", "alternative_names"),
        ("add-certificate", "certificate_arn"),
        ("add-domain", "domain"),
        ("onboard-domain", "domain"),
        ("update-lambda-version", "target"),
        ("update-lambda-version", "environment"),
        ("update-lambda-version", "version"),
    }


@pytest.mark.parametrize(("workflow", "name", "on_items", "described"), CASES)
def test_a_value_off_its_pattern_is_told_what_is_expected_with_an_example(
    api, workflow, name, on_items, described
):
    # given: the workflow's first example, with one patterned field broken
    schema = workflow_get(workflow).input_schema
    body = {**schema["examples"][0], name: [BROKEN] if on_items else BROKEN}
    pointer = f"/{name}/0" if on_items else f"/{name}"

    # when
    problem = assert_problem(submit(api, workflow, body), 422, "invalid_input")

    # then: the message is the words the schema gives, with an example that is itself valid
    message = {e["field"]: e["message"] for e in problem["errors"]}[pointer]
    assert message == f"must be {described[EXPECTED]}"
    assert "pattern" not in message and "^" not in message and "\\s" not in message
    example = _example(described[EXPECTED])
    fixed = {**body, name: [example] if on_items else example}
    assert submit(api, workflow, fixed).status_code == 202, example


def _token(role: str) -> Any:
    from rest_framework.test import APIClient

    from alfred.tokens import token_create

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(name=role, role=role)[1]}")
    return client


def _message(response: Any, field: str) -> str:
    problem = assert_problem(response, 422, "invalid_input")
    return {e["field"]: e["message"] for e in problem["errors"]}[field]


def _assert_expected(message: str, pattern: str) -> None:
    assert "does not match" not in message and "pattern" not in message
    assert message.startswith("Expected ") and ", e.g. " in message
    example = message.rsplit(", e.g. ", 1)[1].removesuffix(".")
    assert re.search(pattern, example), example


def test_a_plan_hash_off_its_pattern_is_told_what_is_expected():
    from executions.api.serializers import CONTROL_REQUESTS

    execution: Execution = ExecutionFactory.create(status="paused")
    response = _token("operator").post(
        f"/api/v1/executions/{execution.id}/approve", {"plan_hash": "abc"}, format="json"
    )

    field = CONTROL_REQUESTS["approve"]().fields["plan_hash"]
    (pattern,) = [v.regex.pattern for v in field.validators if hasattr(v, "regex")]
    _assert_expected(_message(response, "/plan_hash"), pattern)


@pytest.mark.parametrize("field", ["expected_owner", "to"])
def test_an_execution_id_off_its_pattern_is_told_what_is_expected(field):
    from lanes.api import EXECUTION_ID

    body = {"expected_owner": None, "reason": "stuck", field: "exe_nope"}
    response = _token("operator").post(
        "/api/v1/lanes/aws-infrastructure/recover", body, format="json"
    )

    _assert_expected(_message(response, f"/{field}"), EXECUTION_ID)


@pytest.mark.parametrize("event_type", ["Execution Failed", "nope", "execution.exploded"])
def test_an_unknown_event_type_is_refused_naming_the_valid_ones(event_type):
    from executions.events import PUBLIC_EVENT_TYPES

    body = {"url": "https://hooks.example.com/alfred", "event_types": [event_type]}
    response = _token("operator").post("/api/v1/webhooks/endpoints", body, format="json")

    assert response.status_code == 422
    message = _message(response, "/event_types/0")
    _assert_expected(message, "^(" + "|".join(map(re.escape, PUBLIC_EVENT_TYPES)) + ")$")
    assert "GET /api/v1/webhooks/event-types" in message
    assert not WebhookEndpoint.objects.exists()


def test_the_event_types_are_listed_and_declared_as_an_enum():
    from executions.events import EVENT_CATALOGUE

    listed = _token("integration").get("/api/v1/webhooks/event-types")
    assert listed.status_code == 200
    assert [row["type"] for row in listed.json()] == list(EVENT_CATALOGUE)
    assert all(row["description"] for row in listed.json())
    operator = _token("operator")
    schema = operator.get("/api/schema/?format=json").json()
    schemas = schema["components"]["schemas"]
    items = schemas["WebhookEndpointRequest"]["properties"]["event_types"]["items"]
    assert items == {"$ref": "#/components/schemas/EventTypeEnum"}
    assert sorted(schemas["EventTypeEnum"]["enum"]) == sorted(EVENT_CATALOGUE)
    created = operator.post(
        "/api/v1/webhooks/endpoints",
        {"url": "https://hooks.example.com/alfred", "event_types": ["execution.failed"]},
        format="json",
    )
    assert created.status_code == 201 and created.json()["event_types"] == ["execution.failed"]
