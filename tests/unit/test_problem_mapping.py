"""The one table of answers (alfred.problems): every service refusal the API can meet has its
code, detail and members there, a subclass refines its base, an unmapped exception stays a
500, and alfred/ knows no app: the apps register their maps."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404

from alfred.problems import (
    PROBLEM_CONTENT_TYPE,
    ProblemMap,
    exception_handler,
    problems_register,
    type_uri,
)
from executions.acceptance import IdempotencyConflict, IdentityHeld, UnknownWorkflow
from executions.catalog import FieldError, InvalidInput
from executions.controls import InvalidState, NotPermitted, NotRetryable
from executions.models import Execution, ExecutionStatus
from executions.selectors import workflow_names
from lanes.models import Lane
from lanes.services import LaneConflict, LaneNotQueued, LaneOwnerActive, LaneOwnerMismatch
from tests.architecture import COMPOSITION_ROOT

ROOT = Path(__file__).resolve().parents[2]
EXE = "exe_01HZZZZZZZZZZZZZZZZZZZZZZZ"
OTHER = "exe_01HYYYYYYYYYYYYYYYYYYYYYYY"


def _answer(exc: Exception, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    response = exception_handler(exc, {"request": None, "view": None, "args": (), "kwargs": kwargs})
    assert response is not None
    assert response.content_type == PROBLEM_CONTENT_TYPE
    return response.status_code, dict(response.data)


def _execution(status: str) -> Execution:
    return Execution(id=EXE, status=status, principal="prn_owner")


NOT_FOUND = "Not found."
# (exception, the view's path kwargs) -> status, code, detail, members besides the standard ones
ANSWERS = [
    (
        UnknownWorkflow("nope"),
        {"workflow": "nope"},
        404,
        "unknown_workflow",
        "No workflow by that name; GET /api/v1/workflows lists them.",
        {"workflows": workflow_names()},
    ),
    (
        InvalidInput([FieldError("/zone", "is required")]),
        {"workflow": "add-subdomain"},
        422,
        "invalid_input",
        "The input does not fit the add-subdomain schema.",
        {"errors": [{"field": "/zone", "message": "is required"}]},
    ),
    (  # retry: the path names the execution, its stored input no longer fits
        InvalidInput([FieldError("/zone", "is required")]),
        {"execution_id": EXE},
        422,
        "invalid_input",
        "The execution's input no longer fits its workflow's schema.",
        {"errors": [{"field": "/zone", "message": "is required"}]},
    ),
    (
        IdempotencyConflict(EXE),
        {"workflow": "add-subdomain"},
        409,
        "idempotency_conflict",
        "This Idempotency-Key was used with a different body.",
        {"execution": EXE},
    ),
    (
        IdentityHeld(EXE, "reused"),
        {"workflow": "add-subdomain"},
        409,
        "identity_conflict",
        "Another principal's execution holds this operation; ask its owner or an operator.",
        {},
    ),
    (
        LaneConflict("lambda:checkout-api:production", EXE, "42"),
        {"workflow": "update-lambda-version"},
        409,
        "lane_conflict",
        f'Lane lambda:checkout-api:production is committed to "42" by execution {EXE}; '
        "a different value fails closed until it finishes.",
        {"execution": EXE, "lane": "lambda:checkout-api:production"},
    ),
    (
        LaneConflict("aws-infrastructure", EXE, None),
        {"execution_id": OTHER},
        409,
        "lane_conflict",
        f"Lane aws-infrastructure is committed by execution {EXE}; "
        "a different value fails closed until it finishes.",
        {"execution": EXE, "lane": "aws-infrastructure"},
    ),
    (Execution.DoesNotExist(EXE), {"execution_id": EXE}, 404, "not_found", NOT_FOUND, {}),
    (
        NotPermitted(_execution(ExecutionStatus.QUEUED), "cancel"),
        {"execution_id": EXE},
        403,
        "permission_denied",
        f"only its owner or an operator may cancel execution {EXE}",
        {"execution": EXE},
    ),
    (
        InvalidState(_execution(ExecutionStatus.SUCCEEDED), "cancel"),
        {"execution_id": EXE},
        409,
        "invalid_state",
        "cannot cancel an execution that is succeeded",
        {"execution": EXE},
    ),
    (
        NotRetryable(_execution(ExecutionStatus.ROLLED_BACK), "retry"),
        {"execution_id": EXE},
        409,
        "not_retryable",
        "cannot retry an execution that is rolled_back",
        {"execution": EXE},
    ),
    (Lane.DoesNotExist("no lane x"), {"key": "x"}, 404, "not_found", NOT_FOUND, {}),
    (
        LaneOwnerMismatch("aws-infrastructure", EXE, OTHER),
        {"key": "aws-infrastructure"},
        409,
        "invalid_state",
        f"lane aws-infrastructure has owner {OTHER} now; you named owner {EXE}",
        {"lane": "aws-infrastructure", "owner": OTHER},
    ),
    (
        LaneOwnerMismatch("aws-infrastructure", None, OTHER),
        {"key": "aws-infrastructure"},
        409,
        "invalid_state",
        f"lane aws-infrastructure has owner {OTHER} now; you named no owner",
        {"lane": "aws-infrastructure", "owner": OTHER},
    ),
    (
        LaneOwnerMismatch("aws-infrastructure", EXE, None),
        {"key": "aws-infrastructure"},
        409,
        "invalid_state",
        f"lane aws-infrastructure has no owner now; you named owner {EXE}",
        {"lane": "aws-infrastructure", "owner": None},
    ),
    (
        LaneOwnerActive("aws-infrastructure", EXE, "running"),
        {"key": "aws-infrastructure"},
        409,
        "invalid_state",
        f"lane aws-infrastructure is owned by {EXE}, which is running: cancel it first",
        {"lane": "aws-infrastructure", "owner": EXE},
    ),
    (
        LaneNotQueued("aws-infrastructure", None, OTHER),
        {"key": "aws-infrastructure"},
        409,
        "invalid_state",
        f"{OTHER} is not queued on lane aws-infrastructure",
        {"lane": "aws-infrastructure", "owner": None},
    ),
]


@pytest.mark.parametrize(
    ("exc", "kwargs", "status", "code", "detail", "members"),
    ANSWERS,
    ids=[f"{type(a[0]).__name__}-{i}" for i, a in enumerate(ANSWERS)],
)
def test_each_service_refusal_is_answered_from_the_table(
    exc, kwargs, status, code, detail, members
):
    # when: the handler meets the service's exception, as a view would let it through
    answered, body = _answer(exc, **kwargs)

    # then: the problem the contract names, and nothing but its own members
    assert answered == status == body["status"]
    assert body["code"] == code and body["type"] == type_uri(code)
    assert body["detail"] == detail
    assert {
        k: v for k, v in body.items() if k not in {"type", "title", "status", "detail", "code"}
    } == members


def test_a_service_404_is_the_same_answer_as_a_views_http404():
    assert (
        _answer(Execution.DoesNotExist(EXE)) == _answer(Http404()) == _answer(Lane.DoesNotExist())
    )


def test_an_unmapped_exception_is_left_to_the_500_handler():
    assert exception_handler(ValueError("a bug"), {"request": None}) is None
    assert exception_handler(KeyError("a bug"), {"request": None}) is None


def test_a_type_is_mapped_once_and_only_to_a_known_code():
    # given: the table as the apps filled it (InvalidState is mapped)
    # when / then: a second map for a mapped type, or a map to an unknown code, is refused
    with pytest.raises(ImproperlyConfigured, match="mapped twice"):
        problems_register(ProblemMap(InvalidState, "invalid_state"))
    with pytest.raises(ImproperlyConfigured, match="unknown problem code"):
        problems_register(ProblemMap(type("Unheard", (Exception,), {}), "no_such_code"))


def test_alfred_imports_no_app_at_module_level():
    """docs/architecture.md, "The house": the handler knows nothing of the apps; they register in
    ready(). The composition root (settings, urls, the ASGI/WSGI applications, the launcher)
    stands above every room and may."""
    for path in (ROOT / "alfred").glob("*.py"):
        if f"alfred.{path.stem}" in COMPOSITION_ROOT:
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only: an import inside a function is lazy
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"executions", "lanes"}, (path.name, name)
