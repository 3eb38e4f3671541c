"""The workflow kit's pure parts: the provider-error mapping, plan hashing and the pairing of
a mutation with its compensation in the engine's registry."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

import pytest

from executions.runtime.errors import FatalError, ReadinessFailure, RetryableError
from executions.runtime.registry import compensation_get
from executions.runtime.stage import StageContext
from providers.errors import Conflict, NotFound, Rejected, Throttled, Transient, Unknown
from workflows.steps.compensations import Drifted, mutation
from workflows.steps.errors import engine_error, provider_errors
from workflows.steps.planning import approval_token, plan_hash


def _error(cls: type, **details: object) -> object:
    return cls("it went wrong", provider="aws.route53", code="SomeCode", details=details)


@pytest.mark.parametrize(
    ("cls", "engine", "code"),
    [
        (Transient, RetryableError, "provider_transient"),
        (Throttled, RetryableError, "provider_transient"),
        (Conflict, FatalError, "provider_conflict"),
        (NotFound, FatalError, "provider_not_found"),
        (Rejected, FatalError, "provider_rejected"),
        (Unknown, FatalError, "provider_outcome_unknown"),
    ],
)
def test_each_provider_error_maps_to_one_engine_error(cls, engine, code):
    mapped = engine_error(_error(cls))  # type: ignore[arg-type]

    assert type(mapped) is engine and mapped.code == code  # type: ignore[attr-defined]
    assert mapped.details["provider"]["code"] == "SomeCode"  # type: ignore[attr-defined]


def test_a_throttle_keeps_the_providers_retry_after():
    mapped = engine_error(_error(Throttled, retry_after=7))  # type: ignore[arg-type]

    assert isinstance(mapped, RetryableError) and mapped.retry_after == 7.0


def test_a_batch_not_applied_so_far_is_retried_only_after_its_in_flight_window():
    mapped = engine_error(_error(Transient, retry_after_seconds=21.5))  # type: ignore[arg-type]

    assert isinstance(mapped, RetryableError) and mapped.retry_after == 21.5


@pytest.mark.parametrize("cls", [NotFound, Rejected])
def test_a_precondition_in_plan_is_a_readiness_failure(cls):
    with pytest.raises(ReadinessFailure) as raised, provider_errors(readiness="zone_missing"):
        raise _error(cls)  # type: ignore[misc]

    assert raised.value.evidence["code"] == "zone_missing"
    assert raised.value.evidence["checks"][0]["ok"] is False


@pytest.mark.parametrize("cls", [Transient, Unknown, Conflict])
def test_what_is_not_a_precondition_stays_what_it_is_in_plan_too(cls):
    with pytest.raises((RetryableError, FatalError)) as raised, provider_errors(readiness="x"):
        raise _error(cls)  # type: ignore[misc]

    assert not isinstance(raised.value, ReadinessFailure)


def test_the_plan_hash_changes_with_what_is_proposed_or_what_exists_and_with_nothing_else():
    a = plan_hash(proposed=[{"name": "a", "type": "A"}], existing={"ttl": 60, "values": [1]})

    assert a == plan_hash(
        proposed=[{"type": "A", "name": "a"}], existing={"values": [1], "ttl": 60}
    )
    assert a != plan_hash(
        proposed=[{"name": "a", "type": "A"}], existing={"ttl": 61, "values": [1]}
    )
    assert a != plan_hash(
        proposed=[{"name": "b", "type": "A"}], existing={"ttl": 60, "values": [1]}
    )


def test_an_approval_token_binds_the_execution_and_the_hash():
    token = approval_token("exe_1", "h1")

    assert token != approval_token("exe_2", "h1") != approval_token("exe_1", "h2")
    assert len(token) == 64


def test_a_mutation_declares_its_compensation_with_the_engines_registry():
    kind = mutation(f"test.{uuid.uuid4().hex}", "change")

    @kind
    def apply(value: int) -> dict[str, object]:
        return kind.receipt(undo={"value": value}, before=0, after=value)

    @kind.undo
    def undo(ctx: StageContext, receipt: Mapping[str, Any]) -> None:
        raise Drifted(kind.resource, [{"field": "value", "expected": 1, "found": 2}])

    receipt = apply(1)
    assert receipt["resource"] == kind.resource and receipt["undo"] == {"value": 1}
    assert compensation_get(kind.resource, "change") is undo
    with pytest.raises(Drifted) as drifted:
        compensation_get(kind.resource, "change")(cast(StageContext, None), receipt)
    assert drifted.value.code == "drifted" and drifted.value.details["differences"]


def test_one_kind_of_mutation_has_one_compensation():
    kind = mutation(f"test.{uuid.uuid4().hex}", "change")
    kind.undo(lambda ctx, receipt: None)

    with pytest.raises(ValueError, match="registered already"):
        kind.undo(lambda ctx, receipt: None)
    with pytest.raises(FatalError, match="no compensation"):
        compensation_get(kind.resource, "other")
