"""set-txt-record's input (its one declaration: schema, validation, canonical form, typed
access), what an execution acts on, its lane, and how its pending plan is shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from executions.catalog import ApprovalView, Cell, PlanRow
from workflows import fields
from workflows.base import LaneClaim, Workflow, WorkflowInput
from workflows.inputs import expected


class SetTxtRecordInput(WorkflowInput):
    """The TXT record to set: its name inside an existing hosted zone, and its value."""

    model_config = ConfigDict(
        title="set-txt-record input",
        json_schema_extra={
            "examples": [
                {"zone": "example.com", "name": "verify", "value": "token-1"},
                {"zone": "example.com", "name": "verify", "value": "token-2", "dry_run": True},
            ]
        },
    )

    zone: Annotated[
        str, fields.Hostname("Zone", "The existing Route53 hosted zone.", ["example.com"])
    ]
    name: Annotated[
        str,
        fields.Hostname(
            "Name",
            "The record's name below the zone: relative (verify) or fully qualified. "
            "Canonical form: the fully-qualified name.",
            ["verify"],
            normalized=False,
        ),
    ]
    value: Annotated[
        str,
        # (surrounding whitespace is admitted and stripped, as every pattern of the five does:
        # Python's $ also matches before a final newline, which must not make a second value)
        StringConstraints(max_length=255, pattern=r"^\s*[\x21\x23-\x5b\x5d-\x7e]+\s*$"),
        AfterValidator(str.strip),
        Field(
            title="Value",
            description="The TXT value: printable ASCII without spaces, quotes or "
            "backslashes. Surrounding whitespace is ignored.",
            json_schema_extra=expected(
                "printable ASCII without spaces, quotes or backslashes, at most 255", "token-1"
            ),
            examples=["token-1"],
        ),
    ]
    ticket_ids: fields.TicketIds = []
    dry_run: fields.DryRun = False

    @field_validator("name")
    @classmethod
    def _inside_the_zone(cls, raw: str, info: ValidationInfo) -> str:
        return fields.name_in_zone(raw, info, what="name")


class SetTxtRecord(Workflow):
    name = "set-txt-record"
    title = "Set TXT record"
    description = (
        "Set one TXT record inside an existing hosted zone; replacing values that are there "
        "waits for an operator to approve the exact plan."
    )
    stages: ClassVar[tuple[str, ...]] = ("plan", "apply", "verify")
    Input: ClassVar[type[WorkflowInput]] = SetTxtRecordInput
    lane_description: ClassVar[str] = "txt:<name>: one execution at a time per record"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim(f"txt:{canonical['name']}")

    def subject(self, data: Mapping[str, Any]) -> str:
        return f"TXT {data.get('name') or '?'}"

    def approval_view(self, payload: Mapping[str, Any]) -> ApprovalView:
        """The record's values before → after, and the one change of the batch."""
        plan = payload.get("plan") or {}
        before, after = plan.get("before") or [], plan.get("after") or []
        change = "replaced" if before else "added"
        return ApprovalView(
            facts=(("Record", f"TXT {plan.get('name', '?')}"), ("Zone", plan.get("zone", "?"))),
            caption="The TXT values at the name",
            head=("Before", "After", "Change"),
            rows=(
                PlanRow(
                    cells=(
                        Cell(lines=tuple(before)),
                        Cell(lines=tuple(after)),
                        Cell(lines=(change,)),
                    ),
                    change=change,
                ),
            ),
            batch_caption="The batch Alfred will send",
            batch=(f"UPSERT TXT {plan.get('name', '?')}",),
        )
