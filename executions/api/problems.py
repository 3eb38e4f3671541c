"""How the API answers the executions services' refusals: one map per exception type,
registered with :func:`alfred.problems.problems_register` in ``ExecutionsConfig.ready`` and
read by the exception handler, so the views only call the services and render. The lanes'
refusals (``LaneConflict``, ``LaneOwnerMismatch``, ``Lane.DoesNotExist``) are in
:mod:`lanes.api`."""

from __future__ import annotations

from typing import Any

from alfred.problems import ProblemContext, ProblemMap, not_found_detail
from executions import selectors
from executions.acceptance import IdempotencyConflict, IdentityHeld, UnknownWorkflow
from executions.catalog import InvalidInput
from executions.controls import (
    AlreadyApproved,
    ApprovalExpired,
    ApproverRefused,
    ForceRequired,
    HistoryPruned,
    InvalidState,
    NotPermitted,
    NotRetryable,
    StalePlan,
)
from executions.freezes import FreezeEnded, FreezeNotHolding, FreezeNotPermitted, FreezeRefused
from executions.models import Drift, Execution, Freeze


def _invalid_input_detail(exc: InvalidInput, context: ProblemContext) -> str:
    workflow = (context.get("kwargs") or {}).get("workflow")
    if workflow is not None:  # the body sent to the workflow named in the path (accept)
        return f"The input does not fit the {workflow} schema."
    return "The execution's input no longer fits its workflow's schema."  # retry: stored input


def _execution(exc: InvalidState | NotPermitted) -> dict[str, Any]:
    return {"execution": exc.execution_id}


PROBLEMS: tuple[ProblemMap[Any], ...] = (
    ProblemMap(
        UnknownWorkflow,
        "unknown_workflow",
        "No workflow by that name; GET /api/v1/workflows lists them.",
        members=lambda exc: {"workflows": selectors.workflow_names()},
    ),
    ProblemMap(
        InvalidInput,
        "invalid_input",
        _invalid_input_detail,
        members=lambda exc: {"errors": [error.as_dict() for error in exc.errors]},
    ),
    ProblemMap(
        IdempotencyConflict,
        "idempotency_conflict",
        "This Idempotency-Key was used with a different body.",
        members=lambda exc: {"execution": exc.execution_id},
    ),
    # Names neither the execution nor its owner (executions.acceptance).
    ProblemMap(
        IdentityHeld,
        "identity_conflict",
        "Another principal's execution holds this operation; ask its owner or an operator.",
    ),
    # No execution the caller may read: the same 404 as an id that cannot exist.
    ProblemMap(Execution.DoesNotExist, "not_found", not_found_detail),
    ProblemMap(NotPermitted, "permission_denied", members=_execution),
    # Says which rule, and where the approval stands, so the operator knows whom to ask.
    ProblemMap(
        ApproverRefused,
        "approver_not_permitted",
        members=lambda exc: {
            "execution": exc.execution_id,
            "rule": exc.standing.rule.name,
            "approvals": exc.standing.summary(),
        },
    ),
    ProblemMap(InvalidState, "invalid_state", members=_execution),
    ProblemMap(NotRetryable, "not_retryable", members=_execution),
    # Names the hash that is waiting, so the caller can look at that plan and decide.
    ProblemMap(
        StalePlan,
        "stale_plan",
        members=lambda exc: {"execution": exc.execution_id, "plan_hash": exc.current},
    ),
    ProblemMap(ForceRequired, "force_required", members=_execution),
    ProblemMap(
        AlreadyApproved,
        "already_approved",
        members=lambda exc: {
            "execution": exc.execution_id,
            "rule": exc.standing.rule.name,
            "approvals": exc.standing.summary(),
        },
    ),
    # Says when, so an operator can find the archive written then (docs/runbook.md).
    ProblemMap(
        HistoryPruned,
        "history_pruned",
        members=lambda exc: {
            "execution": exc.execution_id,
            "pruned_at": exc.pruned_at.isoformat(),
        },
    ),
    ProblemMap(Freeze.DoesNotExist, "not_found", not_found_detail),
    ProblemMap(Drift.DoesNotExist, "not_found", not_found_detail),
    ProblemMap(FreezeNotPermitted, "permission_denied"),
    ProblemMap(FreezeRefused, "invalid_freeze"),
    ProblemMap(FreezeEnded, "invalid_state", members=lambda exc: {"freeze": exc.freeze_id}),
    ProblemMap(
        FreezeNotHolding,
        "invalid_state",
        members=lambda exc: {"freeze": exc.freeze_id, "execution": exc.execution_id},
    ),
    ProblemMap(
        ApprovalExpired,
        "approval_expired",
        members=lambda exc: {
            "execution": exc.execution_id,
            "expires_at": exc.expires_at.isoformat(),
        },
    ),
)
