"""The workflow definitions' contract: schemas, canonical forms, identity, lanes, stages.

Pure Python: no database, no Django settings.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from executions.catalog import InvalidInput, LaneClaim, Workflow, workflow_get
from executions.identity import logical_identity
from workflows.fields import normalize_hostname
from workflows.registry import WORKFLOWS

ARN = "arn:aws:acm:eu-west-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f"

add_certificate = workflow_get("add-certificate")
update_lambda_version = workflow_get("update-lambda-version")
add_subdomain = workflow_get("add-subdomain")

by_name = pytest.mark.parametrize("wf", list(WORKFLOWS.values()), ids=lambda wf: wf.name)


def identity(wf: Workflow, data: dict[str, Any]) -> str:
    wf.validate(data)
    return logical_identity(wf.name, wf.canonicalize(data))


def field_errors(wf: Workflow, data: Any) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        wf.validate(data)
    return [error.field for error in caught.value.errors]


# --- registry -------------------------------------------------------------------------------


def test_registry_lists_the_five_in_order() -> None:
    # given / when
    names = [wf.name for wf in list(WORKFLOWS.values())]

    # then
    assert names == [
        "onboard-domain",
        "add-domain",
        "add-certificate",
        "update-lambda-version",
        "add-subdomain",
    ]
    assert list(WORKFLOWS) == names
    assert all(workflow_get(name).name == name for name in names)


def test_workflow_get_raises_key_error_for_an_unknown_name() -> None:
    with pytest.raises(KeyError):
        workflow_get("delete-everything")


@pytest.mark.parametrize(
    ("name", "stages"),
    [
        ("add-subdomain", ("plan", "apply", "verify")),
        ("add-certificate", ("plan", "request", "validate_dns", "await_issued", "verify")),
        ("add-domain", ("plan", "certificate", "dns", "routing", "booking", "verify")),
        (
            "onboard-domain",
            ("plan", "hosted_zone", "certificate", "dns", "routing", "booking", "verify"),
        ),
        ("update-lambda-version", ("plan", "update_aliases", "await_updates", "verify")),
    ],
)
def test_stage_names_are_stable(name: str, stages: tuple[str, ...]) -> None:
    assert workflow_get(name).stages == stages


@by_name
def test_describe_carries_the_contract(wf: Workflow) -> None:
    # when
    described = wf.describe()

    # then
    assert described["name"] == wf.name
    assert described["stages"] == list(wf.stages)
    assert described["lane"]
    assert described["input_schema"] == wf.served_schema


@by_name
def test_what_a_workflow_says_of_its_lane_is_what_its_examples_get(wf: Workflow) -> None:
    for example in wf.input_schema["examples"]:
        claim = wf.lane(wf.canonicalize(example))
        assert (claim is not None) == wf.queues_on_a_lane, example


# --- schemas --------------------------------------------------------------------------------


@by_name
def test_schema_is_a_valid_closed_draft_2020_12_schema(wf: Workflow) -> None:
    # given
    schema = wf.input_schema

    # when / then
    Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    for name, prop in schema["properties"].items():
        assert prop["title"] and prop["description"], name
        assert prop["examples"], name
        for example in prop["examples"]:
            Draft202012Validator(prop).validate(example)
        if "default" in prop:
            Draft202012Validator(prop).validate(prop["default"])


@by_name
def test_every_example_validates_and_canonicalizes_completely(wf: Workflow) -> None:
    # given
    assert wf.input_schema["examples"]
    for example in wf.input_schema["examples"]:
        # when
        wf.validate(example)
        canonical = wf.canonicalize(example)

        # then: every field present, and the canonical form is itself valid and fixed
        assert set(canonical) == set(wf.input_schema["properties"])
        wf.validate(canonical)
        assert wf.canonicalize(canonical) == canonical


def _drawn(prop: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    """Values of a served property, as a fuzzer draws them from its pattern (None for a
    property without one)."""
    if prop.get("type") == "array" and "pattern" in prop.get("items", {}):
        item = _drawn(prop["items"])
        assert item is not None
        return st.lists(item, max_size=3)
    if "pattern" not in prop:
        return None
    lengths = (prop.get("minLength", 0), prop.get("maxLength", 10**6))
    return st.from_regex(prop["pattern"]).filter(lambda v: lengths[0] <= len(v) <= lengths[1])


# 25 draws a workflow: a host name's pattern bounds its length by a lookahead, which
# Hypothesis meets by drawing and discarding (about 40 ms a name, and at times most draws of a
# run: not a fault of the test). `make fuzz` draws far more through the API (Schemathesis's
# positive_data_acceptance over the same served schemas).
@by_name
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_every_value_the_served_schema_states_is_accepted(
    wf: Workflow, data: st.DataObject
) -> None:
    """What the OpenAPI document and GET /api/v1/workflows serve promises acceptance: a value
    drawn from each patterned property (a hostname's documented form, a ticket ID, an ARN, a
    version) passes the schema and the workflow's own checks together (docs/contract.md)."""
    # given
    served = wf.served_schema
    body = dict(wf.input_schema["examples"][0])
    for name, prop in served["properties"].items():
        strategy = _drawn(prop)
        if strategy is not None:
            body[name] = data.draw(strategy, label=name)

    # when / then
    Draft202012Validator(served).validate(body)
    wf.validate(body)
    wf.canonicalize(body)


@by_name
def test_the_served_examples_fit_the_served_schema(wf: Workflow) -> None:
    served = wf.served_schema
    for example in served["examples"]:
        Draft202012Validator(served).validate(example)
    for name, prop in served["properties"].items():
        for example in prop["examples"]:
            assert Draft202012Validator(prop).is_valid(example), (name, example)


def test_a_served_hostname_pattern_is_what_the_validator_ignores() -> None:
    """Validation keeps the loose pattern: a Unicode name outside the documented form is
    still taken (and IDNA-encoded)."""
    domain = workflow_get("add-domain")
    pattern = domain.served_schema["properties"]["domain"]["pattern"]
    assert not Draft202012Validator({"pattern": pattern}).is_valid("bücher.example")
    domain.validate({"domain": "bücher.example"})
    assert "x-documented-pattern" not in str(domain.served_schema)


# --- add-certificate identity (docs/contract.md, "Asking for an execution")
# ---------------------------------------------------


def test_domain_case_whitespace_and_trailing_dot_keep_identity() -> None:
    # given
    base = identity(add_certificate, {"domain": "example.com"})

    # when / then
    assert identity(add_certificate, {"domain": "  Example.COM.\n"}) == base


def test_omitted_defaults_and_explicit_defaults_keep_identity() -> None:
    # given
    explicit = {
        "domain": "example.com",
        "alternative_names": [],
        "ticket_ids": [],
        "kirby_mode": "disabled",
        "dry_run": False,
        "certificate_arn": None,
    }

    # when / then
    assert identity(add_certificate, explicit) == identity(
        add_certificate, {"domain": "example.com"}
    )


def test_ticket_order_case_and_duplicates_keep_identity() -> None:
    # given
    base = identity(add_certificate, {"domain": "example.com", "ticket_ids": ["OPS-1", "NET-2"]})

    # when
    messy = {"domain": "example.com", "ticket_ids": [" net-2", "ops-1 ", "OPS-1"]}

    # then
    assert identity(add_certificate, messy) == base


def test_a_different_ticket_set_changes_identity() -> None:
    base = identity(add_certificate, {"domain": "example.com", "ticket_ids": ["OPS-1"]})
    assert identity(add_certificate, {"domain": "example.com", "ticket_ids": ["OPS-2"]}) != base
    assert (
        identity(add_certificate, {"domain": "example.com", "ticket_ids": ["OPS-1", "OPS-2"]})
        != base
    )
    assert identity(add_certificate, {"domain": "example.com"}) != base


@pytest.mark.parametrize(
    ("field", "value"),
    [("kirby_mode", "enabled"), ("dry_run", True), ("certificate_arn", ARN)],
)
def test_kirby_mode_dry_run_and_certificate_override_change_identity(
    field: str, value: Any
) -> None:
    # given
    base = identity(add_certificate, {"domain": "example.com"})

    # when / then
    assert identity(add_certificate, {"domain": "example.com", field: value}) != base


def test_alternative_name_order_duplicates_and_the_primary_keep_identity() -> None:
    # given
    base = identity(
        add_certificate,
        {"domain": "example.com", "alternative_names": ["a.example.com", "b.example.com"]},
    )

    # when
    messy = {
        "domain": "example.com",
        "alternative_names": ["B.example.com", "a.example.com.", "b.example.com", "EXAMPLE.com"],
    }

    # then
    assert identity(add_certificate, messy) == base


def test_workflow_name_is_part_of_identity() -> None:
    # given the same input for add-domain and onboard-domain
    data = {"domain": "example.com"}

    # when / then
    assert identity(workflow_get("add-domain"), data) != identity(
        workflow_get("onboard-domain"), data
    )


def test_non_ascii_labels_are_idna_encoded() -> None:
    # when
    canonical = add_certificate.canonicalize({"domain": "Bücher.Example"})

    # then
    assert canonical["domain"] == "xn--bcher-kva.example"
    assert identity(add_certificate, {"domain": "xn--bcher-kva.example"}) == identity(
        add_certificate, {"domain": "bücher.example"}
    )


@pytest.mark.parametrize("name", ["add-domain", "onboard-domain", "add-subdomain"])
def test_ticket_ids_and_dry_run_are_part_of_every_identity(name: str) -> None:
    # given
    wf = workflow_get(name)
    data = wf.input_schema["examples"][0]
    base = identity(wf, data)

    # when / then
    assert identity(wf, {**data, "ticket_ids": ["OPS-1"]}) != base
    assert identity(wf, {**data, "dry_run": True}) != base


# --- invalid input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fields"),
    [
        ({"domain": "example.com", "colour": "red"}, ["/colour"]),  # unknown property: the property
        ({"domain": 42}, ["/domain"]),
        ({}, ["/domain"]),
        ({"domain": "example.com", "dry_run": "yes"}, ["/dry_run"]),
        ({"domain": "example.com", "kirby_mode": "turbo"}, ["/kirby_mode"]),
        ({"domain": "example.com", "ticket_ids": ["OPS 1"]}, ["/ticket_ids/0"]),
        ({"domain": "example.com", "ticket_ids": "OPS-1"}, ["/ticket_ids"]),
        ({"domain": "example.com", "certificate_arn": "arn:aws:acm:x"}, ["/certificate_arn"]),
        (
            {"domain": "example.com", "certificate_arn": ARN.replace("123456789012", "1234")},
            ["/certificate_arn"],
        ),
        ({"domain": "example.com", "certificate_arn": 7}, ["/certificate_arn"]),
        ({"domain": "localhost"}, ["/domain"]),
        ({"domain": "-bad.example.com"}, ["/domain"]),
        ({"domain": "bad_label.example.com"}, ["/domain"]),
        ({"domain": "a..example.com"}, ["/domain"]),
        ({"domain": f"{'a' * 64}.example.com"}, ["/domain"]),
        ({"domain": ".".join(["abcdefghi"] * 26)}, ["/domain"]),
        ({"domain": "*.com"}, ["/domain"]),
        ({"domain": "exa mple.com"}, ["/domain"]),
        (
            {
                "domain": "example.com",
                "alternative_names": ["ok.example.com", "x", "-y.example.com"],
            },
            ["/alternative_names/1", "/alternative_names/2"],
        ),
    ],
)
def test_add_certificate_rejects_with_json_pointers(data: Any, fields: list[str]) -> None:
    assert field_errors(add_certificate, data) == fields


def test_unknown_property_error_names_the_property() -> None:
    with pytest.raises(InvalidInput) as caught:
        add_certificate.validate({"domain": "example.com", "colour": "red"})
    assert "colour" in caught.value.errors[0].message


def test_non_object_input_is_rejected() -> None:
    assert field_errors(add_certificate, ["example.com"]) == [""]


@pytest.mark.parametrize("name", ["add-domain", "onboard-domain"])
def test_wildcards_are_rejected_outside_add_certificate(name: str) -> None:
    assert field_errors(workflow_get(name), {"domain": "*.example.com"}) == ["/domain"]


def test_wildcards_are_accepted_by_add_certificate() -> None:
    add_certificate.validate({"domain": "*.example.com", "alternative_names": ["*.example.org"]})


@pytest.mark.parametrize(
    ("data", "fields"),
    [
        ({"target": "checkout-api", "environment": "staging", "version": 0}, ["/version"]),
        ({"target": "checkout-api", "environment": "staging", "version": "0"}, ["/version"]),
        ({"target": "checkout-api", "environment": "staging", "version": "v42"}, ["/version"]),
        ({"target": "checkout-api", "environment": "staging", "version": "$LATEST"}, ["/version"]),
        ({"target": "checkout-api", "environment": "staging", "version": 4.2}, ["/version"]),
        ({"target": "checkout-api", "environment": "staging", "version": True}, ["/version"]),
        ({"target": "Checkout-API", "environment": "staging", "version": 1}, ["/target"]),
        ({"target": "checkout-api", "environment": "prod env", "version": 1}, ["/environment"]),
        ({"target": "checkout-api", "environment": "staging"}, ["/version"]),
        ({"environment": "staging", "version": 1}, ["/target"]),
    ],
)
def test_update_lambda_version_rejects_with_json_pointers(data: Any, fields: list[str]) -> None:
    assert field_errors(update_lambda_version, data) == fields


@pytest.mark.parametrize(
    ("data", "fields"),
    [
        ({"zone": "example.com"}, ["/subdomain"]),
        ({"zone": "com", "subdomain": "api"}, ["/zone"]),
        ({"zone": "example.com", "subdomain": "example.com"}, ["/subdomain"]),  # the apex
        ({"zone": "example.com", "subdomain": "api.example.org."}, ["/subdomain"]),
        ({"zone": "example.com", "subdomain": "*.api"}, ["/subdomain"]),
        ({"zone": "example.com", "subdomain": "_dmarc"}, ["/subdomain"]),
        ({"zone": "example.com", "subdomain": "api", "kirby_mode": "enabled"}, ["/kirby_mode"]),
    ],
)
def test_add_subdomain_rejects_with_json_pointers(data: Any, fields: list[str]) -> None:
    assert field_errors(add_subdomain, data) == fields


# --- canonical forms and lanes --------------------------------------------------------------


@pytest.mark.parametrize("version", [42, "042", "42", " 42 ", 42.0])
def test_version_spellings_canonicalize_to_one_decimal_string(version: Any) -> None:
    # given
    data = {"target": "checkout-api", "environment": "production", "version": version}

    # when
    update_lambda_version.validate(data)
    canonical = update_lambda_version.canonicalize(data)

    # then
    assert canonical["version"] == "42"


def test_update_lambda_version_lane_is_per_fleet_and_environment_with_the_version_token() -> None:
    # given
    canonical = update_lambda_version.canonicalize(
        {"target": "checkout-api", "environment": "production", "version": "007"}
    )

    # when / then
    assert update_lambda_version.lane(canonical) == LaneClaim(
        "lambda:checkout-api:production", token="7"
    )


@pytest.mark.parametrize("name", ["onboard-domain", "add-domain", "add-certificate"])
def test_aws_workflows_share_the_aws_infrastructure_lane_without_token(name: str) -> None:
    wf = workflow_get(name)
    canonical = wf.canonicalize(wf.input_schema["examples"][0])
    assert wf.lane(canonical) == LaneClaim("aws-infrastructure")


def test_add_subdomain_takes_no_lane() -> None:
    canonical = add_subdomain.canonicalize({"zone": "example.com", "subdomain": "api"})
    assert add_subdomain.lane(canonical) is None


@pytest.mark.parametrize(
    "subdomain", ["api", "API", " api.example.com ", "Api.Example.Com.", "api.EXAMPLE.com"]
)
def test_subdomain_canonical_form_is_the_fully_qualified_name(subdomain: str) -> None:
    # given
    data = {"zone": "Example.com.", "subdomain": subdomain}

    # when
    add_subdomain.validate(data)
    canonical = add_subdomain.canonicalize(data)

    # then
    assert canonical == {
        "zone": "example.com",
        "subdomain": "api.example.com",
        "ticket_ids": [],
        "dry_run": False,
    }


def test_a_relative_name_that_repeats_the_zone_stays_below_it() -> None:
    # given: relative names are appended to the zone unless they already end in it
    data = {"zone": "example.com", "subdomain": "api.example.com.example.com"}

    # when
    canonical = add_subdomain.canonicalize(data)

    # then
    assert canonical["subdomain"] == "api.example.com.example.com"
    assert add_subdomain.canonicalize(canonical) == canonical


# --- add-certificate continuation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("stage_outputs", "expected"),
    [
        ({"verify": {"certificate_status": "ISSUED", "validation_records_in_place": True}}, False),
        ({"verify": {"certificate_status": "ISSUED", "validation_records_in_place": False}}, True),
        ({"verify": {"certificate_status": "ISSUED"}}, True),
        (
            {
                "verify": {
                    "certificate_status": "PENDING_VALIDATION",
                    "validation_records_in_place": True,
                }
            },
            True,
        ),
        ({}, True),
        ({"verify": {"certificate_status": "EXPIRED"}}, True),
    ],
)
def test_add_certificate_continues_after_success_only_while_contract_work_remains(
    stage_outputs: dict[str, Any], expected: bool
) -> None:
    canonical = add_certificate.canonicalize({"domain": "example.com"})
    assert add_certificate.continue_after_success(canonical, stage_outputs) is expected


@pytest.mark.parametrize("stage_outputs", [{}, {"verify": {"certificate_status": "PENDING"}}])
def test_a_dry_run_certificate_never_continues_after_success(
    stage_outputs: dict[str, Any],
) -> None:
    canonical = add_certificate.canonicalize({"domain": "example.com", "dry_run": True})
    assert add_certificate.continue_after_success(canonical, stage_outputs) is False


@pytest.mark.parametrize(
    "name", ["onboard-domain", "add-domain", "update-lambda-version", "add-subdomain"]
)
def test_other_workflows_never_continue_after_success(name: str) -> None:
    workflow = workflow_get(name)
    canonical = workflow.canonicalize(workflow.input_schema["examples"][0])
    assert workflow.continue_after_success(canonical, {}) is False


# --- properties -----------------------------------------------------------------------------

WHITESPACE = st.text(alphabet=" \t\n", max_size=2)
# "xn--" starts an A-label, which must decode (tests/unit/test_hostnames.py).
LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True).filter(
    lambda label: not label.startswith("xn--")
)
# An all-digit top-level label would make the name an IP address, not a hostname.
TLD = LABEL.filter(lambda label: not label.isdigit())
IDN_LABEL = st.sampled_from(["bücher", "münchen", "例え", "παράδειγμα"])


@st.composite
def messy(draw: st.DrawFn, clean: str, *, trailing_dot: bool = False) -> str:
    """``clean`` as a client might send it: random case, surrounding whitespace, a dot."""
    cased = "".join(c.upper() if c.isascii() and draw(st.booleans()) else c for c in clean)
    dot = "." if trailing_dot and draw(st.booleans()) else ""
    return draw(WHITESPACE) + cased + dot + draw(WHITESPACE)


@st.composite
def hostnames(draw: st.DrawFn, *, wildcard: bool = False) -> str:
    labels = draw(st.lists(LABEL | IDN_LABEL, min_size=1, max_size=3))
    labels.append(draw(TLD))
    if wildcard and draw(st.booleans()):
        labels.insert(0, "*")
    return draw(messy(".".join(labels), trailing_dot=True))


TICKET_IDS = st.lists(
    st.from_regex(r"[A-Z][A-Z0-9]{0,4}-[1-9][0-9]{0,4}", fullmatch=True).flatmap(messy),
    max_size=4,
)
ARNS = st.none() | st.from_regex(
    r"arn:aws:acm:(us-east-1|eu-west-2|ap-southeast-2):[0-9]{12}:certificate/"
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    fullmatch=True,
)
COMMON = {"ticket_ids": TICKET_IDS, "dry_run": st.booleans()}
DOMAIN_COMMON = {
    **COMMON,
    "kirby_mode": st.sampled_from(["disabled", "enabled"]),
    "certificate_arn": ARNS,
}
SLUG = st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,2}", fullmatch=True)


@st.composite
def subdomain_inputs(draw: st.DrawFn) -> dict[str, Any]:
    zone = draw(hostnames())
    relative = ".".join(draw(st.lists(LABEL | IDN_LABEL, min_size=1, max_size=2)))
    # A relative name spelled like the zone itself names the apex, which is refused.
    assume(normalize_hostname(relative) != normalize_hostname(zone))
    if draw(st.booleans()):  # fully qualified, optionally absolute
        subdomain = draw(messy(f"{relative}.{zone.strip().rstrip('.')}", trailing_dot=True))
    else:
        subdomain = draw(messy(relative))
    optional = draw(st.fixed_dictionaries({}, optional=COMMON))
    return {"zone": zone, "subdomain": subdomain, **optional}


VALID_INPUTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "onboard-domain": st.fixed_dictionaries({"domain": hostnames()}, optional=DOMAIN_COMMON),
    "add-domain": st.fixed_dictionaries({"domain": hostnames()}, optional=DOMAIN_COMMON),
    "add-certificate": st.fixed_dictionaries(
        {"domain": hostnames(wildcard=True)},
        optional={
            **DOMAIN_COMMON,
            "alternative_names": st.lists(hostnames(wildcard=True), max_size=4),
        },
    ),
    "update-lambda-version": st.fixed_dictionaries(
        {
            "target": SLUG.flatmap(lambda s: WHITESPACE.map(lambda w: s + w)),
            "environment": SLUG,
            "version": st.integers(1, 10**15 - 1)
            | st.from_regex(r"0{0,3}[1-9][0-9]{0,5}", fullmatch=True).flatmap(messy),
        },
        optional=COMMON,
    ),
    "add-subdomain": subdomain_inputs(),
}

property_settings = settings(
    max_examples=150, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_every_workflow_has_an_input_strategy() -> None:
    assert set(VALID_INPUTS) == set(WORKFLOWS)


@by_name
@property_settings
@given(data=st.data())
def test_canonicalize_is_idempotent_and_its_output_is_valid(
    wf: Workflow, data: st.DataObject
) -> None:
    # given a valid input as a client might spell it
    raw = data.draw(VALID_INPUTS[wf.name])
    wf.validate(raw)

    # when
    canonical = wf.canonicalize(raw)

    # then
    wf.validate(canonical)
    assert wf.canonicalize(canonical) == canonical
    assert set(canonical) == set(wf.input_schema["properties"])
    assert logical_identity(wf.name, wf.canonicalize(canonical)) == logical_identity(
        wf.name, canonical
    )


# --- messages -------------------------------------------------------------------------------


def test_schema_messages_do_not_echo_the_input() -> None:
    # given: a 9,000-item list and a long string (jsonschema's messages quote both whole)
    data = {"domain": "x" * 299 + "\x00", "ticket_ids": ["OPS-1"] * 9000}

    # when
    with pytest.raises(InvalidInput) as caught:
        add_certificate.validate(data)

    # then
    messages = {e.field: e.message for e in caught.value.errors}
    # (every invalid field is told at once: the shape of one, the rules of another)
    assert messages == {
        "/ticket_ids": "must have at most 50 items",
        "/domain": "not a valid hostname: must be at most 253 characters once normalized",
    }
    with pytest.raises(InvalidInput) as caught:
        add_certificate.validate({"domain": "x" * 301})
    assert [e.message for e in caught.value.errors] == ["must be at most 300 characters"]


# --- what the engine shows of a workflow (the catalogue's subject, approval view, search) ---


@pytest.mark.parametrize(
    ("name", "data", "subject"),
    [
        (
            "add-subdomain",
            {"zone": "example.com", "subdomain": "api.example.com"},
            "api.example.com",
        ),
        ("add-subdomain", {"zone": "example.com", "subdomain": "api"}, "api.example.com"),
        ("add-domain", {"domain": "shop.example.com"}, "shop.example.com"),
        ("onboard-domain", {"domain": "example.com"}, "example.com"),
        ("add-certificate", {"domain": "*.example.com"}, "*.example.com"),
        (
            "update-lambda-version",
            {"target": "checkout-api", "environment": "production", "version": "42"},
            "checkout-api on production → version 42",
        ),
        ("update-lambda-version", {}, ""),
    ],
)
def test_each_workflow_names_its_subject(name: str, data: dict[str, Any], subject: str) -> None:
    assert workflow_get(name).subject(data) == subject


def test_the_admin_searches_each_workflows_free_form_fields_and_no_flag() -> None:
    assert workflow_get("add-subdomain").searched_fields == ("zone", "subdomain", "ticket_ids")
    assert "kirby_mode" not in workflow_get("add-domain").searched_fields  # a choice
    assert "dry_run" not in workflow_get("add-domain").searched_fields
    assert "certificate_arn" in workflow_get("add-domain").searched_fields


def test_a_record_set_plan_is_shown_as_a_table_and_its_batch() -> None:
    cname = {"name": "api.example.com", "type": "CNAME", "ttl": 300, "values": ["old.example.net"]}
    view = add_subdomain.approval_view(
        {
            "plan": {
                "zone": "example.com",
                "name": "api.example.com",
                "before": [cname],
                "after": [],
                "changes": [{"action": "DELETE", "record": cname}],
            }
        }
    )
    assert view.facts == (("Record", "api.example.com in zone example.com"),)
    assert [[c.lines for c in row.cells] for row in view.rows] == [
        [
            ("api.example.com",),
            ("CNAME",),
            ("300",),
            ("old.example.net",),
            ("—",),
            ("(none)",),
            ("deleted",),
        ]
    ]
    assert view.rows[0].cells[3].css == "before-data deleted"
    assert view.batch == ("DELETE api.example.com CNAME",)


def test_an_alias_plan_is_shown_as_facts_and_an_unknown_one_as_nothing() -> None:
    view = update_lambda_version.approval_view(
        {
            "plan": {
                "function": "checkout",
                "alias": "live",
                "before": {"version": "7"},
                "after": {"version": "6"},
            }
        }
    )
    assert view.facts == (("Function", "checkout"), ("Alias", "live"), ("Version", "7 → 6"))
    assert view.rows == ()
    empty = update_lambda_version.approval_view({"plan": "not a mapping"})
    assert empty.facts == () and empty.rows == ()


def test_each_deadline_outlasts_the_longest_waits_of_its_stages():
    """A run's deadline ends a run still going: it must not end one in a wait that would end
    on its own terms (ACM's 72 hours of validation, a child's whole run)."""
    from workflows.add_certificate import stages as certificate
    from workflows.add_domain import stages as domain
    from workflows.steps import argocd, route53

    certificate_waits = (
        certificate.RECORDS_TIMEOUT_SECONDS
        + route53.INSYNC_TIMEOUT_SECONDS
        + certificate.ISSUED_TIMEOUT_SECONDS
    )
    add_certificate = workflow_get("add-certificate").definitions()[0].deadline_seconds
    assert add_certificate is not None and add_certificate > certificate_waits
    domain_waits = (
        route53.INSYNC_TIMEOUT_SECONDS
        + argocd.CONVERGE_TIMEOUT_SECONDS
        + domain.VERIFY_CONVERGE_TIMEOUT_SECONDS
    )
    for name in ("add-domain", "onboard-domain"):
        deadline = workflow_get(name).definitions()[0].deadline_seconds
        assert deadline is not None and deadline > add_certificate + domain_waits, name


def test_a_missing_field_with_forms_is_told_it_is_required():
    with pytest.raises(InvalidInput) as caught:
        workflow_get("update-lambda-version").validate({"target": "a", "environment": "b"})

    assert [(e.field, e.message) for e in caught.value.errors] == [("/version", "is required")]
