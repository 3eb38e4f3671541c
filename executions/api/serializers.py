"""Representations of the HTTP contract (docs/contract.md, "Authentication, roles and ownership").
Read-only, but for the small bodies of the controls: a workflow's input is parsed by its JSON
Schema, not by serializers."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from alfred.fields import PlannedSerializer, StrictBooleanField
from alfred.principals import Caller
from alfred.text import FreeTextField
from executions import selectors
from executions.approvals import Standing
from executions.approvals import standing as approval_standing
from executions.catalog import execution_subject
from executions.controls import (
    CONTROLS,
    PLAN_HASH_EXPECTED,
    PLAN_HASH_PATTERN,
    Control,
    execution_controls,
)
from executions.freezes import held_by
from executions.models import AuditEntry, Execution, ExecutionStatus, OutboxEvent, Stage


def _url(name: str, **kwargs: Any) -> str:
    return reverse(name, kwargs=kwargs)


def _reason(control: Control) -> FreeTextField:
    """A control's ``reason``, required or not as the control declares it (the admin and the
    commands read the same declaration)."""
    if control.reason_required:
        return FreeTextField(help_text="Why (audit log). Required.")
    return FreeTextField(default="", allow_blank=True, help_text="Why (audit log).")


def _plan_hash(help_text: str) -> serializers.RegexField:
    return serializers.RegexField(
        PLAN_HASH_PATTERN, help_text=help_text, error_messages={"invalid": PLAN_HASH_EXPECTED}
    )


class ControlRequestSerializer(serializers.Serializer):
    """The body of a control: its ``reason`` (kept in the audit log), and what the control
    declares it takes besides (``executions.controls.Control``: the plan's hash, ``force``)."""


def control_request_serializer(control: Control) -> type[ControlRequestSerializer]:
    """The body ``control`` takes, as a serializer named after it (``ApproveRequest`` in the
    OpenAPI document)."""
    fields: dict[str, Any] = {}
    if control.plan_hash:
        fields["plan_hash"] = _plan_hash(control.plan_hash)
    if control.force:
        fields["force"] = StrictBooleanField(
            default=False,
            help_text="Lift the blast-radius guard for this batch: required (and only "
            "honoured) when pending_approval.force_required.",
        )
    fields["reason"] = _reason(control)
    shown = {name: False if name == "force" else "..." for name in fields}
    needed = "required" if control.reason_required else "optional"
    doc = (
        f"The body of {control.name}: ``{json.dumps(shown)}``; the reason ({needed}) is kept "
        "in the audit log."
    )
    name = f"{control.name.title()}RequestSerializer"
    return type(name, (ControlRequestSerializer,), {**fields, "__doc__": doc})


CONTROL_REQUESTS: dict[str, type[ControlRequestSerializer]] = {
    control.name: control_request_serializer(control) for control in CONTROLS
}


class StageSerializer(PlannedSerializer):
    class Meta:
        model = Stage
        fields = ["name", "status", "output", "error", "started_at", "finished_at"]


class LaneViewSerializer(serializers.Serializer):
    key = serializers.CharField()
    role = serializers.ChoiceField(choices=["owner", "queued"], allow_null=True)
    state = serializers.CharField(allow_null=True)
    position = serializers.IntegerField(allow_null=True, help_text="1-based, when queued.")


class ApprovalGivenSerializer(serializers.Serializer):
    by = serializers.CharField(help_text="The approver's principal.")
    name = serializers.CharField(help_text="The approver's name (a user's, a token's).")
    at = serializers.DateTimeField()


class ApprovalPolicySerializer(serializers.Serializer):
    """What the approval policy asks of the pending plan, and how far it is met
    (``executions.approvals``; docs/contract.md, "Approval policies")."""

    rule = serializers.CharField(help_text="The policy rule that applies ('default' if none).")
    asks = serializers.CharField(help_text="What the rule asks, in a sentence.")
    approvals_required = serializers.IntegerField(help_text="Distinct operators, 1–10.")
    approvals = ApprovalGivenSerializer(many=True, help_text="Given so far, oldest first.")
    summary = serializers.CharField(help_text='"1 of 2 approvals (alice)".')
    requester_may_approve = serializers.BooleanField()
    earlier_approvers_may_approve = serializers.BooleanField()
    approvers = serializers.ListField(
        child=serializers.CharField(), help_text="Who may approve (the rule's list)."
    )
    blocked = serializers.CharField(
        allow_null=True,
        help_text="Why the approvals still owed cannot be given as the policy stands (more are "
        "owed than operators may still give), or null.",
    )


class PendingApprovalSerializer(serializers.Serializer):
    """The operator checkpoint a paused execution waits on."""

    policy = ApprovalPolicySerializer()
    hook = serializers.CharField()
    stage = serializers.CharField()
    plan = serializers.JSONField(allow_null=True, help_text="The plan, as the workflow wrote it.")
    plan_hash = serializers.CharField(help_text="What an approval must name.")
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    force_required = serializers.BooleanField()


class WaitingSerializer(serializers.Serializer):
    """What the execution waits for that someone else must give (``selectors.Waiting``)."""

    code = serializers.ChoiceField(
        choices=["approval", "lane", "lane_recovery", "freeze"],
        help_text="approval: an operator approves or rejects the plan; lane: queued, its "
        "lane's owner must finish; lane_recovery: its lane is recovery_required, which only "
        "an operator clears; freeze: a change freeze holds it before its first change (it "
        "goes on when the freeze ends, or an operator lets it through).",
    )
    who = serializers.ChoiceField(choices=["operator", "lane owner"], help_text="Who can act.")
    detail = serializers.CharField(help_text="For people: what, why, and how to act.")
    lane = serializers.CharField(allow_null=True)
    freeze = serializers.CharField(allow_null=True, help_text="The freeze that holds it (freeze).")
    command = serializers.CharField(
        allow_null=True, help_text="The manage.py command that acts (lane_recovery)."
    )
    links = serializers.DictField(
        child=serializers.CharField(),
        help_text="Where to act: the lane and its recover (lane_recovery, lane), or the "
        "approve and reject controls (approval).",
    )


def _waiting_links(execution: Execution, waiting: selectors.Waiting) -> dict[str, str]:
    if waiting.code == "approval":
        return {
            name: _url(f"execution-{name}", execution_id=execution.id)
            for name in ("approve", "reject")
        }
    if waiting.freeze is not None:
        return {
            "freeze": _url("freeze-detail", freeze_id=waiting.freeze),
            "exempt": _url("freeze-exempt", freeze_id=waiting.freeze),
            "end": _url("freeze-end", freeze_id=waiting.freeze),
        }
    if waiting.lane is None:
        return {}
    links = {"lane": _url("lane-detail", key=waiting.lane)}
    if waiting.code == "lane_recovery":
        links["recover"] = _url("lane-recover", key=waiting.lane)
    return links


class RunSummarySerializer(serializers.Serializer):
    id = serializers.CharField()
    number = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()


class AcceptanceSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["created", "reused", "continued"])
    replayed = serializers.BooleanField()
    idempotency_key = serializers.CharField()


class ExecutionSummarySerializer(PlannedSerializer):
    terminal = serializers.BooleanField(read_only=True)
    links = serializers.SerializerMethodField()

    class Meta:
        model = Execution
        fields = [
            "id",
            "workflow",
            "status",
            "terminal",
            "start_state",
            "lane_key",
            "dry_run",
            "created_at",
            "updated_at",
            "finished_at",
            "links",
        ]

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_links(self, obj: Execution) -> dict[str, str]:
        return execution_links(obj, self.context.get("caller"))


def execution_links(execution: Execution, caller: Caller | None = None) -> dict[str, str]:
    """Links to what the execution supports now: self, events, and each control that
    :func:`executions.controls.execution_controls` says ``caller`` may use in its current
    state (none without a caller)."""
    links = {
        "self": _url("execution-detail", execution_id=execution.id),
        "events": _url("execution-events", execution_id=execution.id),
        "stream": _url("execution-events-stream", execution_id=execution.id),
    }
    if execution.drift_id is not None:
        links["drift"] = _url("drift-detail", drift_id=execution.drift_id)
    allowed = frozenset() if caller is None else execution_controls(execution, caller)
    for control in CONTROLS:  # in the controls' order
        if control.name in allowed:
            links[control.name] = _url(f"execution-{control.name}", execution_id=execution.id)
    return links


class ExecutionSerializer(ExecutionSummarySerializer):
    """The execution resource."""

    input = serializers.JSONField()
    stages = serializers.SerializerMethodField()
    lane = serializers.SerializerMethodField()
    current_run = serializers.SerializerMethodField()
    pending_approval = serializers.SerializerMethodField()
    waiting_for = serializers.SerializerMethodField()
    assistance = serializers.SerializerMethodField()
    children = serializers.SerializerMethodField()
    acceptance = serializers.SerializerMethodField()
    drift = serializers.CharField(
        source="drift_id",
        allow_null=True,
        read_only=True,
        help_text="The open drift the drift watch found of this succeeded execution "
        "(GET /api/v1/drifts/{id}); null: in place, or not watched.",
    )

    class Meta(ExecutionSummarySerializer.Meta):
        fields = [
            "id",
            "workflow",
            "status",
            "terminal",
            "start_state",
            "start_error",
            "input",
            "dry_run",
            "stages",
            "lane",
            "current_run",
            "pending_approval",
            "waiting_for",
            "assistance",
            "predecessor",
            "parent",
            "children",
            "error",
            "result",
            "drift",
            "acceptance",
            "created_at",
            "updated_at",
            "finished_at",
            "pruned_at",
            "links",
        ]

    @extend_schema_field(StageSerializer(many=True))
    def get_stages(self, obj: Execution) -> Any:
        return StageSerializer(self._parts(obj).stages, many=True).data

    def _parts(self, obj: Execution) -> selectors.ExecutionParts:
        """What the answer shows besides the execution's row: given (``context["parts"]``,
        read with the row), else read once per execution. An acceptance that created the
        execution in this request knows it already: what it inserted is what there is (no
        checkpoint, no child yet, the lane it just joined)."""
        given = self.context.get("parts")
        if given is not None and given.execution_id == obj.pk:
            return given
        acceptance = self.context.get("acceptance")
        claimed = None
        if acceptance is not None and acceptance.lane is not None:
            # as the acceptance's transaction left it (the queue may have moved since)
            lane = acceptance.lane
            claimed = selectors.LaneView(lane.key, lane.role, lane.state, lane.position)
        if acceptance is not None and acceptance.stages is not None:
            return selectors.ExecutionParts(
                obj.pk, stages=acceptance.stages, pending_approval=None, children=[], lane=claimed
            )
        read: dict[str, selectors.ExecutionParts] = self.__dict__.setdefault("_parts_read", {})
        if obj.pk not in read:
            parts = selectors.execution_parts(obj)
            read[obj.pk] = parts if claimed is None else replace(parts, lane=claimed)
        return read[obj.pk]

    @extend_schema_field(LaneViewSerializer(allow_null=True))
    def get_lane(self, obj: Execution) -> dict[str, Any] | None:
        view = self._parts(obj).lane
        return None if view is None else LaneViewSerializer(view).data

    @extend_schema_field(RunSummarySerializer(allow_null=True))
    def get_current_run(self, obj: Execution) -> dict[str, Any] | None:
        run = obj.current_run
        if run is None:
            return None
        return {"id": run.id, "number": run.number, "kind": run.kind, "status": run.status}

    def _standing(self, obj: Execution) -> Standing | None:
        """Where the pending approval stands under its policy (read once per execution)."""
        hook = self._parts(obj).pending_approval
        if hook is None:
            return None
        read: dict[str, Standing] = self.__dict__.setdefault("_standing_read", {})
        if hook.pk not in read:
            read[hook.pk] = approval_standing(obj, hook, execution_subject(obj))
        return read[hook.pk]

    @extend_schema_field(PendingApprovalSerializer(allow_null=True))
    def get_pending_approval(self, obj: Execution) -> dict[str, Any] | None:
        hook = self._parts(obj).pending_approval
        standing = self._standing(obj)
        if hook is None or standing is None:
            return None
        return {
            "policy": standing.as_dict(),
            "hook": hook.id,
            "stage": hook.stage,
            "plan": hook.payload.get("plan"),
            "plan_hash": hook.payload.get("plan_hash"),
            "requested_at": hook.created_at,
            "expires_at": hook.expires_at,
            "force_required": bool(hook.payload.get("force_required")),
        }

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting_for(self, obj: Execution) -> dict[str, Any] | None:
        """Null when nothing (or only a worker) is awaited; else what, and who can act."""
        parts = self._parts(obj)
        held = held_by(obj) if obj.status == ExecutionStatus.WAITING else None
        waiting = selectors.execution_waiting(
            obj, parts.lane, parts.pending_approval, self._standing(obj), held
        )
        if waiting is None:
            return None
        return {
            "code": waiting.code,
            "who": waiting.who,
            "detail": waiting.detail,
            "lane": waiting.lane,
            "command": waiting.recover or None,
            "freeze": waiting.freeze,
            "links": _waiting_links(obj, waiting),
        }

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_assistance(self, obj: Execution) -> list[Any]:
        """What a person still owes it: none once rolled back (``execution_assistance``)."""
        return selectors.execution_assistance(obj)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_children(self, obj: Execution) -> list[str]:
        return self._parts(obj).children

    @extend_schema_field(AcceptanceSerializer(allow_null=True))
    def get_acceptance(self, obj: Execution) -> dict[str, Any] | None:
        """Only in the answer to a POST: how that request was resolved."""
        acceptance = self.context.get("acceptance")
        if acceptance is None:
            return None
        return {
            "outcome": acceptance.outcome,
            "replayed": acceptance.replayed,
            "idempotency_key": acceptance.idempotency_key,
        }


class EventSerializer(PlannedSerializer):
    class Meta:
        model = OutboxEvent
        fields = ["execution", "sequence", "key", "type", "payload", "created_at"]


class EventPageSerializer(serializers.Serializer):
    events = EventSerializer(many=True)
    next_after = serializers.IntegerField(help_text="Pass as ?after= to read on.")
    has_more = serializers.BooleanField()


class WorkflowSerializer(serializers.Serializer):
    name = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    stages = serializers.ListField(child=serializers.CharField())
    version = serializers.IntegerField(
        help_text="The definition's version: a run records it, and only it runs the run."
    )
    lane = serializers.CharField()
    input_schema = serializers.DictField()
    links = serializers.DictField(child=serializers.CharField())


class AuditEntrySerializer(PlannedSerializer):
    actor_name = serializers.SerializerMethodField()

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "actor",
            "actor_name",
            "action",
            "target_type",
            "target_id",
            "reason",
            "data",
            "created_at",
        ]

    @extend_schema_field(serializers.CharField())
    def get_actor_name(self, entry: AuditEntry) -> str:
        """Who acted, as people know them: the user's username, the token's name (read now,
        ``selectors.audit_entries``), else the name recorded with the entry, else the actor
        (``cli:<actor>`` and Alfred's own actors are names already)."""
        now = getattr(entry, "actor_name", None)
        recorded = entry.data.get("actor_name") if isinstance(entry.data, dict) else None
        return str(now or recorded or entry.actor)
