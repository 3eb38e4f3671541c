"""Crafted input gets a clear 4xx problem with a stable code, never a 500, and a bounded body.

The rules (docs/contract.md, "Input rules"): strict JSON bodies (alfred.parsers), ids in
paths checked before any query, cursors checked against their ordering, free text without
control characters, one Idempotency-Key, full IDNA hostnames, and problem bodies bounded in
alfred.problems.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlencode

import pytest
from rest_framework.test import APIClient

from alfred.parsers import MAX_DEPTH
from executions.models import AuditEntry, Execution
from lanes.api import MAX_LANE_KEY_LENGTH
from lanes.models import Lane
from tests.support.helpers import CERTIFICATE, SUBDOMAIN, assert_problem, submit

pytestmark = pytest.mark.django_db

BOUND = 4096  # bytes: every problem body here must stay below it


def bounded_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert len(response.content) < BOUND, len(response.content)
    return assert_problem(response, status, code)


def post_raw(api: APIClient, path: str, raw: bytes, content_type: str = "application/json") -> Any:
    return api.post(path, data=raw, content_type=content_type, HTTP_IDEMPOTENCY_KEY="k-raw")


def create_path(workflow: str = "add-subdomain") -> str:
    return f"/api/v1/workflows/{workflow}/executions"


def cursor(position: str) -> str:
    """A cursor as the API writes one, with a position of our choosing."""
    return f"n0.{position}"


@pytest.fixture
def execution_id(api: APIClient) -> str:
    response = submit(api, "add-subdomain", SUBDOMAIN)
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


# --- 1. free text: cancel and lane recover reasons ------------------------------------------


@pytest.mark.parametrize(
    "reason",
    [
        "a\x00b",
        "esc \x1b[31m red",
        "carriage\rreturn",
        "rtl \u202e override",
        "x" * 1001,
        # what trimming would hide: a control character or the excess at an end
        "\x0bvertical tab first",
        "x" * 1000 + " ",
    ],
    ids=[
        "nul",
        "escape",
        "carriage-return",
        "bidi-override",
        "too-long",
        "leading-control",
        "too-long-with-a-trailing-space",
    ],
)
def test_a_cancel_reason_breaking_the_text_rule_is_422(api, execution_id, reason):
    # when
    response = api.post(
        f"/api/v1/executions/{execution_id}/cancel", {"reason": reason}, format="json"
    )

    # then: refused, not cut or stored
    problem = bounded_problem(response, 422, "invalid_input")
    assert problem["errors"][0]["field"] == "/reason"
    assert Execution.objects.get(pk=execution_id).status != "canceled"
    assert not AuditEntry.objects.filter(action="execution.cancel").exists()


def test_a_lone_surrogate_escape_in_a_reason_is_400(api, execution_id):
    # when: the JSON text itself carries "\ud800", which no UTF-8 string can hold
    response = post_raw(api, f"/api/v1/executions/{execution_id}/cancel", b'{"reason": "\\ud800"}')

    # then
    bounded_problem(response, 400, "malformed_request")
    assert not AuditEntry.objects.exists()


def test_a_cancel_reason_with_tab_and_newline_is_kept(api, execution_id):
    # when
    response = api.post(
        f"/api/v1/executions/{execution_id}/cancel",
        {"reason": "line one\n\tline two"},
        format="json",
    )

    # then
    assert response.status_code == 202, response.content
    assert AuditEntry.objects.get(action="execution.cancel").reason == "line one\n\tline two"


@pytest.mark.parametrize("reason", ["a\x00bcd", "bell\x07", "x" * 1001])
def test_a_lane_recover_reason_breaking_the_text_rule_is_422(operator_api, reason):
    # when
    response = operator_api.post(
        "/api/v1/lanes/aws-infrastructure/recover",
        {"expected_owner": None, "reason": reason},
        format="json",
    )

    # then
    problem = bounded_problem(response, 422, "invalid_input")
    assert problem["errors"][0]["field"] == "/reason"


# --- 2. strict JSON bodies and media types --------------------------------------------------


def test_deeply_nested_json_is_400(api):
    # given: 5,000 levels of nesting (a RecursionError in the stock parser)
    raw = b'{"zone": ' + b"[" * 5000 + b"]" * 5000 + b"}"

    # when
    response = post_raw(api, create_path(), raw)

    # then
    problem = bounded_problem(response, 400, "malformed_request")
    assert str(MAX_DEPTH) in problem["detail"]
    assert not Execution.objects.exists()


@pytest.mark.parametrize(
    "raw", [b'"\\' * 30000, b'["' + b'\\"' * 30000, b"[" * 60000], ids=["open", "escapes", "deep"]
)
def test_a_body_near_the_size_limit_that_never_closes_is_400(api, raw):
    # A regular expression that skips strings backtracks quadratically on these (25 s of CPU
    # for 64 KB, the web process stalled); the JSON parser reads them in one pass.
    response = post_raw(api, create_path(), raw)

    bounded_problem(response, 400, "malformed_request")


def test_nesting_up_to_the_limit_is_parsed(api):
    # given: MAX_DEPTH levels, the outer object included
    raw = b'{"zone": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"

    # when / then: read, then refused by the schema (a zone is a string)
    assert_problem(post_raw(api, create_path(), raw), 422, "invalid_input")


def test_a_duplicate_key_is_400_and_named(api):
    # given: which "zone" is meant depends on the parser
    raw = b'{"zone": "example.com", "subdomain": "api", "zone": "example.org"}'

    # when
    response = post_raw(api, create_path(), raw)

    # then
    problem = bounded_problem(response, 400, "malformed_request")
    assert '"zone"' in problem["detail"]
    assert not Execution.objects.exists()


def test_a_long_duplicate_key_is_named_in_short(api):
    key = "k" * 20_000
    raw = f'{{"{key}": 1, "{key}": 2}}'.encode()

    problem = bounded_problem(post_raw(api, create_path(), raw), 400, "malformed_request")

    assert len(problem["detail"]) < 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"zone": NaN}',
        b'{"zone": Infinity}',
        b'{"zone": -Infinity}',
        b'{"zone": 1e999}',
        b'{"zone": ' + b"9" * 5000 + b"}",
        b'{"zone": "\\udc00"}',
        b'{"\\ud800": 1}',
        b'{"zone": "caf\xe9"}',  # Latin-1, not UTF-8
        b"\xef\xbb\xbf{}",  # a byte order mark
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "overflow",
        "long-int",
        "surrogate",
        "key-surrogate",
        "not-utf8",
        "bom",
    ],
)
def test_json_alfred_does_not_accept_is_400(api, raw):
    bounded_problem(post_raw(api, create_path(), raw), 400, "malformed_request")
    assert not Execution.objects.exists()


@pytest.mark.parametrize(
    "content_type",
    ["*/*", "application/*", "*/json", "application/json; charset=latin-1", "text/plain"],
)
def test_a_media_type_that_is_not_exactly_json_is_415(api, content_type):
    raw = b'{"zone": "example.com", "subdomain": "api"}'

    response = post_raw(api, create_path(), raw, content_type=content_type)

    problem = bounded_problem(response, 415, "unsupported_media_type")
    assert "application/json" in problem["detail"]
    assert not Execution.objects.exists()


@pytest.mark.parametrize(
    "content_type", ["application/json", "Application/JSON", "application/json; charset=utf-8"]
)
def test_json_by_its_exact_media_type_is_accepted(api, content_type):
    raw = b'{"zone": "example.com", "subdomain": "api"}'

    response = post_raw(api, create_path(), raw, content_type=content_type)

    assert response.status_code == 202, response.content


# --- 3. ids in paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/executions/exe_%00"),
        ("get", "/api/v1/executions/exe_%00/events"),
        ("post", "/api/v1/executions/exe_%00/cancel"),
        ("post", "/api/v1/executions/exe_%00/retry"),
        ("get", "/api/v1/executions/exe_01JD4Q%1B0000000000000000000"),
        ("get", "/api/v1/executions/" + "exe_" + "A" * 5000),
        ("get", "/api/v1/lanes/a%00b"),
        ("post", "/api/v1/lanes/a%00b/recover"),
        ("get", "/api/v1/lanes/" + "k" * 201),
    ],
)
def test_an_id_that_cannot_exist_is_404(operator_api, method, path):
    # when
    response = getattr(operator_api, method)(path)

    # then
    bounded_problem(response, 404, "not_found")


def test_the_lane_key_bound_is_the_column_length():
    assert Lane._meta.get_field("key").max_length == MAX_LANE_KEY_LENGTH


def test_a_well_formed_unknown_execution_id_is_still_404(api):
    path = "/api/v1/executions/exe_01JD4Q0000000000000000000Z"

    bounded_problem(api.get(path), 404, "not_found")


# --- 4. cursors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "position",
    ["not-a-number", "0", "-1", "9" * 19, "12\x00", "2025-01-01 00:00:00+00:00"],
    ids=["garbage", "zero", "negative", "past-bigint", "nul", "a-time"],
)
def test_an_audit_cursor_whose_position_is_not_an_entry_number_is_400(operator_api, position):
    # given: something to page through
    AuditEntry.objects.create(
        actor="ops", action="lane.recover", target_type="lane", target_id="l", reason="r"
    )

    # when
    response = operator_api.get("/api/v1/audit", {"cursor": cursor(position)})

    # then
    problem = bounded_problem(response, 400, "malformed_request")
    assert problem["errors"] == [{"field": "cursor", "message": "invalid cursor"}]


@pytest.mark.parametrize("position", ["exe_\x00", "nope", "exe_" + "Z" * 27])
def test_an_execution_cursor_whose_position_is_not_an_id_is_400(api, execution_id, position):
    response = api.get("/api/v1/executions", {"cursor": cursor(position)})

    bounded_problem(response, 400, "malformed_request")


@pytest.mark.parametrize(
    "raw",
    [
        # DRF's own encoding, which decoded "AAAA" (or any base64 without a position) as the
        # first page: an unreadable cursor must be refused, not read as "from the start"
        base64.b64encode(urlencode({"o": "0", "p": "exe_01"}).encode()).decode(),
        "AAAA",
        "",
        "n",
        "x0",
        "n1000",
        "n00",
        "n0.",
    ],
)
def test_a_cursor_that_is_not_one_the_api_writes_is_400(api, execution_id, raw):
    problem = bounded_problem(
        api.get("/api/v1/executions", {"cursor": raw}), 400, "malformed_request"
    )
    assert problem["errors"] == [{"field": "cursor", "message": "invalid cursor"}]


def test_the_cursors_the_api_gives_out_still_work(api, operator_api):
    # given: more entries and executions than one page of one
    for index in range(3):
        AuditEntry.objects.create(
            actor="ops", action="lane.recover", target_type="lane", target_id="l", reason=str(index)
        )
        assert (
            submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": f"a{index}"}).status_code == 202
        )

    for client, path in ((operator_api, "/api/v1/audit"), (api, "/api/v1/executions")):
        # when: following the next links
        seen = []
        page = client.get(path, {"limit": 1}).json()
        seen += page["results"]
        while page["next"]:
            page = client.get(page["next"]).json()
            seen += page["results"]

        # then
        assert len(seen) == 3, path
        # and: the previous links lead back over the same entries
        back: list[dict] = []
        while page["previous"]:
            page = client.get(page["previous"]).json()
            back = page["results"] + back
        assert back == seen[:-1], path


# --- 5. bounded error details ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("workflow", "body"),
    [("add-certificate", CERTIFICATE), ("add-subdomain", SUBDOMAIN)],
)
def test_nine_thousand_ticket_ids_get_a_short_answer(api, workflow, body):
    # given: a 54 KB list (maxItems is 50)
    tickets = ["A-1"] * 9000

    # when
    response = submit(api, workflow, {**body, "ticket_ids": tickets})

    # then: one error in Alfred's words, not a repr of the list
    problem = bounded_problem(response, 422, "invalid_input")
    assert problem["errors"] == [{"field": "/ticket_ids", "message": "must have at most 50 items"}]


def test_a_hundred_field_errors_are_capped_and_counted(api):
    # given: as many alternative names as allowed (100) and ticket IDs (50), each off its pattern
    body = {**CERTIFICATE, "alternative_names": ["a 1"] * 100, "ticket_ids": ["a1"] * 50}

    # when
    response = submit(api, "add-certificate", body)

    # then
    problem = bounded_problem(response, 422, "invalid_input")
    assert len(problem["errors"]) <= 20
    assert problem["errors_omitted"] == 150 - len(problem["errors"])
    assert "'a1'" not in response.content.decode() and "a 1" not in response.content.decode()


def test_a_long_unknown_property_is_shown_in_short(api):
    name = "p" * 30_000

    response = submit(api, "add-subdomain", {**SUBDOMAIN, name: 1})

    problem = bounded_problem(response, 422, "invalid_input")
    assert problem["errors"][0]["message"].startswith('unknown property "ppp')


def test_a_long_hostname_is_shown_in_short(api):
    response = submit(api, "add-subdomain", {**SUBDOMAIN, "zone": "é" * 290 + ".com"})

    problem = bounded_problem(response, 422, "invalid_input")
    assert problem["errors"][0]["field"] == "/zone"


# --- 6. one Idempotency-Key -----------------------------------------------------------------


@pytest.mark.parametrize("key", ["one,two", "one, two", ",", "a,"])
def test_an_idempotency_key_with_a_comma_is_400(api, key):
    # given: what a server makes of two Idempotency-Key headers

    # when
    response = submit(api, "add-subdomain", SUBDOMAIN, key=key)

    # then
    problem = bounded_problem(response, 400, "idempotency_key_invalid")
    assert "one key" in problem["detail"]
    assert not Execution.objects.exists()


# --- 7. hostnames ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workflow", "body", "field"),
    [
        ("add-certificate", {"domain": "xn--zz.com"}, "/domain"),
        ("add-certificate", {"domain": "p\u0430ypal.com"}, "/domain"),  # Cyrillic а
        ("add-certificate", {"domain": "xn--pypal-4ve.com"}, "/domain"),  # the same, punycode
        ("add-certificate", {"domain": "xn--abc-.com"}, "/domain"),
        ("add-domain", {"domain": "1.2.3.4"}, "/domain"),
        ("add-subdomain", {"zone": "1.2.3.4", "subdomain": "api"}, "/zone"),
        ("add-subdomain", {"zone": "example.com", "subdomain": "xn--zz"}, "/subdomain"),
        ("add-subdomain", {"zone": "example.com", "subdomain": "p\u0430ypal"}, "/subdomain"),
    ],
)
def test_an_invalid_or_mixed_script_hostname_is_422(api, workflow, body, field):
    response = submit(api, workflow, body)

    problem = bounded_problem(response, 422, "invalid_input")
    assert [e["field"] for e in problem["errors"]] == [field]
    assert not Execution.objects.exists()


def test_an_internationalized_name_in_one_script_is_accepted(api):
    response = submit(api, "add-subdomain", {"zone": "пример.рф", "subdomain": "api"})

    assert response.status_code == 202, response.content
    assert response.json()["input"]["zone"] == "xn--e1afmkfd.xn--p1ai"


# --- 8. query parameters --------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"status": "\x00"},
        {"workflow": "\x00"},
        {"limit": "\x00"},
        {"limit": "٣"},
        {"cursor": "\x00"},
        {"status": "queued\x00"},
    ],
)
def test_a_query_parameter_with_a_nul_is_400(api, params):
    bounded_problem(api.get("/api/v1/executions", params), 400, "malformed_request")


@pytest.mark.parametrize("params", [{"after": "\x00"}, {"limit": "1\x00"}, {"after": " 1"}])
def test_an_events_parameter_with_a_nul_is_400(api, execution_id, params):
    response = api.get(f"/api/v1/executions/{execution_id}/events", params)

    bounded_problem(response, 400, "malformed_request")


def test_an_audit_parameter_with_a_nul_is_400(operator_api):
    bounded_problem(operator_api.get("/api/v1/audit", {"limit": "\x00"}), 400, "malformed_request")


@pytest.mark.parametrize("params", [{"status": ""}, {"workflow": ""}])
def test_an_empty_filter_is_400_not_ignored(api, params):
    bounded_problem(api.get("/api/v1/executions", params), 400, "malformed_request")


def test_a_format_query_parameter_is_no_override_on_the_api(api):
    # DRF's ?format= picked a renderer, and an unknown one was an undeclared 404
    assert api.get("/api/v1/executions", {"format": "AAA"}).status_code == 200


@pytest.mark.parametrize(
    "header, after",
    [("1", "x"), ("", None), ("x", "1"), (" 1", None), ("9" * 19, None)],
    ids=["bad-query", "empty-header", "bad-header", "space", "past-bigint"],
)
def test_a_malformed_resume_point_is_400_wherever_it_is_sent(api, execution_id, header, after):
    path = f"/api/v1/executions/{execution_id}/events/stream"
    query = {} if after is None else {"after": after}

    response = api.get(path, query, HTTP_LAST_EVENT_ID=header)

    bounded_problem(response, 400, "malformed_request")
