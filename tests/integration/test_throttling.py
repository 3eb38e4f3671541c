"""Throttles on triggers and controls: per principal, in the shared Redis, failing open.

Each test's tokens are new principals (a fresh ``prn_`` id), so counters in Redis, which
outlive a test, never carry over from one test to the next.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from alfred.tokens import token_create, token_rotate
from tests.support.helpers import SUBDOMAIN, assert_problem, submit

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.server("the throttles' script on Redis 7 over TCP"),
]

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connection refused at once


@pytest.fixture
def low_rates(settings):
    settings.ALFRED_THROTTLE_RATES = {"trigger": "3/min", "control": "2/min"}


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _integration() -> APIClient:
    return _client(token_create(name=f"ci-{uuid.uuid4().hex[:8]}", role="integration")[1])


def _subdomain() -> dict[str, object]:
    """A fresh operation: one subdomain held by two principals is an identity conflict."""
    return {**SUBDOMAIN, "subdomain": f"t{uuid.uuid4().hex[:10]}"}


def _cancel_missing(client: APIClient):
    return client.post("/api/v1/executions/exe_missing/cancel", {}, format="json")


def test_the_trigger_past_the_rate_is_429_throttled_with_retry_after(api, low_rates):
    # given: three triggers by one token within the minute
    for _ in range(3):
        assert submit(api, "add-subdomain", _subdomain()).status_code == 202

    # when: it asks a fourth time
    response = submit(api, "add-subdomain", _subdomain())

    # then: a throttled problem that says when to come back
    body = assert_problem(response, 429, "throttled")
    assert 0 < int(response["Retry-After"]) <= 60
    assert body["instance"] == "/api/v1/workflows/add-subdomain/executions"


@pytest.mark.parametrize(
    ("workflow", "key", "status", "code"),
    [
        ("add-subdomain", None, 400, "idempotency_key_missing"),
        ("add-subdomain", "one,two", 400, "idempotency_key_invalid"),
        ("add-everything", "k-1", 404, "unknown_workflow"),
    ],
)
def test_a_trigger_no_budget_could_make_acceptable_is_refused_as_such_and_spends_nothing(
    api, low_rates, workflow, key, status, code
):
    def refused_one():
        headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
        path = f"/api/v1/workflows/{workflow}/executions"
        return api.post(path, _subdomain(), format="json", **headers)

    # given: three such requests, which spend nothing: three triggers still fit the minute
    for _ in range(3):
        assert_problem(refused_one(), status, code)
    for _ in range(3):
        assert submit(api, "add-subdomain", _subdomain()).status_code == 202

    # when: past the rate
    again = refused_one()

    # then: still refused for what it is, not 429 (which would ask for it again), while a
    # trigger that could be accepted is throttled
    assert_problem(again, status, code)
    assert_problem(submit(api, "add-subdomain", _subdomain()), 429, "throttled")


def test_the_budget_is_per_principal(api, low_rates):
    # given: one token has spent its budget
    for _ in range(3):
        submit(api, "add-subdomain", _subdomain())
    assert submit(api, "add-subdomain", _subdomain()).status_code == 429

    # when / then: another token still triggers
    assert submit(_integration(), "add-subdomain", _subdomain()).status_code == 202


def test_controls_have_their_own_budget(api, low_rates):
    # given: the trigger budget is spent
    for _ in range(3):
        submit(api, "add-subdomain", _subdomain())

    # when: the same token cancels (an unknown execution: throttles run before the view)
    answers = [_cancel_missing(api) for _ in range(3)]

    # then: two controls answered, the third throttled
    assert [r.status_code for r in answers[:2]] == [404, 404]
    assert_problem(answers[2], 429, "throttled")
    assert "Retry-After" in answers[2]


def test_lane_recovery_is_a_throttled_control(operator_api, low_rates):
    # when: an operator recovers an unknown lane three times
    body = {"expected_owner": None, "reason": "stuck lane"}
    answers = [
        operator_api.post("/api/v1/lanes/dns:nowhere.example/recover", body, format="json")
        for _ in range(3)
    ]

    # then: two answered (404), the third throttled
    assert [r.status_code for r in answers[:2]] == [404, 404]
    assert_problem(answers[2], 429, "throttled")


def test_reads_are_not_throttled(api, settings):
    settings.ALFRED_THROTTLE_RATES = {"trigger": "1/min", "control": "1/min"}

    statuses = {api.get("/api/v1/executions").status_code for _ in range(5)}

    assert statuses == {200}


def test_a_rotated_token_spends_its_predecessors_budget(low_rates):
    # given: a token that spent its trigger budget
    name = f"rot-{uuid.uuid4().hex[:8]}"
    old = _client(token_create(name=name, role="integration")[1])
    for _ in range(3):
        assert submit(old, "add-subdomain", _subdomain()).status_code == 202

    # when: it is rotated (same principal, new secret)
    new = _client(token_rotate(name=name, role="integration")[1])

    # then: the new secret is throttled too
    assert_problem(submit(new, "add-subdomain", _subdomain()), 429, "throttled")


def test_a_rate_of_off_turns_the_throttle_off(api, settings):
    settings.ALFRED_THROTTLE_RATES = {"trigger": None, "control": "1/min"}

    statuses = {submit(api, "add-subdomain", _subdomain()).status_code for _ in range(5)}

    assert statuses == {202}


def test_a_cache_that_fails_lets_triggers_through_with_a_warning(api, settings, caplog):
    # given: low rates, and a cache whose Redis does not answer
    settings.ALFRED_THROTTLE_RATES = {"trigger": "1/min", "control": "1/min"}
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": DEAD_REDIS,
        }
    }

    # when
    with caplog.at_level(logging.WARNING, logger="alfred.throttling"):
        statuses = [submit(api, "add-subdomain", _subdomain()).status_code for _ in range(3)]

    # then: accepted, unthrottled, and said so
    assert statuses == [202, 202, 202]
    assert "throttle trigger not applied" in caplog.text


@pytest.mark.parametrize(
    ("value", "rate"),
    [("120/min", "120/min"), ("5/S", "5/s"), ("off", None), ("", None), (" OFF ", None)],
)
def test_rates_read_from_the_environment(monkeypatch, value, rate):
    from alfred.settings import _throttle_rate

    monkeypatch.setenv("ALFRED_THROTTLE_TRIGGER", value)

    assert _throttle_rate("ALFRED_THROTTLE_TRIGGER", "120/min") == rate


@pytest.mark.parametrize("value", ["lots", "0/min", "10/fortnight", "10"])
def test_a_malformed_rate_is_refused(monkeypatch, value):
    from alfred.settings import _throttle_rate

    monkeypatch.setenv("ALFRED_THROTTLE_TRIGGER", value)

    with pytest.raises(ImproperlyConfigured, match="ALFRED_THROTTLE_TRIGGER"):
        _throttle_rate("ALFRED_THROTTLE_TRIGGER", "120/min")
