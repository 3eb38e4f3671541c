"""``PlannedSerializer`` answers exactly what DRF's ModelSerializer answers for the same
instance and context: executions in every shape the API shows them, their stages, events
and audit entries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest
from django.utils import timezone
from rest_framework import serializers

from alfred.fields import PlannedSerializer
from alfred.principals import Caller, Role
from executions.acceptance import execution_accept
from executions.api.serializers import (
    AuditEntrySerializer,
    EventSerializer,
    ExecutionSerializer,
    ExecutionSummarySerializer,
    StageSerializer,
)
from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    Hook,
    OutboxEvent,
    Run,
    Stage,
)
from tests.support.factories import ExecutionFactory, RunFactory, StageFactory
from tests.support.helpers import SUBDOMAIN

pytestmark = pytest.mark.django_db

OWNER = Caller("token:owner", Role.INTEGRATION, "owner")


def _as_drf(serializer: PlannedSerializer, instance: Any) -> dict[str, Any]:
    """The same serializer's answer by DRF's own path (fields built for the instance)."""
    return dict(serializers.ModelSerializer.to_representation(serializer, instance))


def _same(serializer_class: type[PlannedSerializer], instance: Any, **context: Any) -> None:
    planned = serializer_class(instance, context=context).data
    expected = _as_drf(serializer_class(instance, context=context), instance)
    assert planned == expected
    assert list(planned) == list(expected)  # the same keys, in the same order


def _execution(**fields: Any) -> Execution:
    return cast(Execution, ExecutionFactory(**fields))


def _paused_with_everything() -> Execution:
    """An execution with a predecessor, a parent, a child, a finished time, an error and an
    operator's checkpoint pending: every field of the resource has a value."""
    predecessor = _execution(status=ExecutionStatus.ROLLED_BACK)
    parent = _execution()
    execution = _execution(
        predecessor=predecessor,
        parent=parent,
        status=ExecutionStatus.PAUSED,
        error={"code": "x", "message": "y"},
        result={"records": 2},
        assistance=[{"kind": "dns", "note": "check"}],
        finished_at=timezone.now(),
    )
    run = cast(Run, RunFactory(execution=execution))
    execution.current_run = run
    execution.save()
    StageFactory(run=run, name="plan", position=0, status="succeeded", output={"a": [1]})
    StageFactory(run=run, name="apply", position=1, started_at=timezone.now())
    _execution(parent=execution)
    Hook.objects.create(
        execution=execution,
        run=run,
        stage="apply",
        name="approval",
        token="t-1",
        operator=True,
        payload={"plan": {"records": []}, "plan_hash": "0" * 64, "force_required": True},
        expires_at=timezone.now() + timedelta(hours=1),
    )
    return execution


def test_an_execution_with_every_field_set_is_answered_as_drf_would():
    execution = _paused_with_everything()
    operator = Caller("user:1", Role.OPERATOR, "op")

    _same(ExecutionSerializer, execution, caller=operator)
    _same(ExecutionSerializer, execution)  # no caller: no control links
    _same(ExecutionSummarySerializer, execution, caller=operator)


def test_a_new_execution_is_answered_as_drf_would_from_its_acceptance():
    acceptance = execution_accept(
        workflow_name="add-subdomain", body=SUBDOMAIN, idempotency_key="k-1", caller=OWNER
    )

    _same(ExecutionSerializer, acceptance.execution, acceptance=acceptance, caller=OWNER)


def test_stages_events_and_audit_entries_are_answered_as_drf_would():
    execution = _paused_with_everything()
    for stage in Stage.objects.filter(run__execution=execution):
        _same(StageSerializer, stage)
    event = OutboxEvent.objects.create(
        execution=execution, sequence=1, key="k", type="execution.accepted", payload={"a": 1}
    )
    _same(EventSerializer, event)
    entry = AuditEntry.objects.create(
        actor="op", action="execution.cancel", target_type="execution", target_id=execution.id
    )
    _same(AuditEntrySerializer, entry)


def test_many_follows_the_plan_for_each_item():
    execution = _paused_with_everything()
    stages = list(Stage.objects.filter(run__execution=execution).order_by("position"))

    answered = StageSerializer(stages, many=True).data

    assert answered == [_as_drf(StageSerializer(stage), stage) for stage in stages]


def test_a_field_that_could_read_the_request_is_refused_when_planned():
    class Linked(PlannedSerializer):
        url = serializers.HyperlinkedIdentityField(view_name="execution-detail")

        class Meta:
            model = Execution
            fields = ["id", "url"]

    with pytest.raises(TypeError, match="HyperlinkedIdentityField is not planned"):
        _ = Linked(_execution()).data


def test_a_subclass_of_a_kind_that_is_planned_is_refused_too():
    class Contextual(serializers.CharField):  # it could read self.context
        pass

    class Named(PlannedSerializer):
        workflow = Contextual()

        class Meta:
            model = Execution
            fields = ["id", "workflow"]

    with pytest.raises(TypeError, match="Contextual is not planned"):
        _ = Named(_execution()).data
