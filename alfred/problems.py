"""RFC 9457 problem details: every 4xx/5xx of the API is ``application/problem+json`` with a
stable absolute ``type`` URI, ``title``, ``status``, ``detail`` and a ``code``.

``Problem`` is the one exception views raise for a contract error of their own (a malformed
header or query). A service raises its own exception and knows nothing of HTTP: each app
registers, in its ``AppConfig.ready``, a :class:`ProblemMap` per exception type (its code,
detail and extra members) with :func:`problems_register`, and :func:`exception_handler`
answers from that one table, so every view gives a refusal the same answer and this module
imports no app (docs/architecture.md, "The house"). DRF's own exceptions (auth, parse, throttling,
404, 405, 415) are mapped to the same shape here; Django-level errors outside DRF go through
:func:`problem_response`.

Every body is bounded here, in :func:`problem_body`, whoever built it: ``detail`` and every
other string member are cut (an ellipsis marks the cut), ``errors`` keeps its first
:data:`MAX_ERRORS` entries within :data:`MAX_ERRORS_CHARS` and counts the rest in
``errors_omitted``, and a lone surrogate is escaped so the body always encodes. Messages echo
client input only as a short quoted excerpt, never as a Python repr.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from alfred.readonly import ReadOnlyInstance

log = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_BASE = "https://alfred.dev/problems/"

# code -> (status, title). The registry the OpenAPI schema and docs/contract.md are built from.
CODES: dict[str, tuple[int, str]] = {
    "malformed_request": (400, "Malformed request"),
    "idempotency_key_missing": (400, "Idempotency-Key header missing"),
    "idempotency_key_invalid": (400, "Idempotency-Key header invalid"),
    "not_authenticated": (401, "Authentication required"),
    "authentication_failed": (401, "Authentication failed"),
    "permission_denied": (403, "Permission denied"),
    "approver_not_permitted": (403, "The approval policy does not let you approve this plan"),
    "not_found": (404, "Not found"),
    "unknown_workflow": (404, "Unknown workflow"),
    "method_not_allowed": (405, "Method not allowed"),
    "not_acceptable": (406, "Not acceptable"),
    "idempotency_conflict": (409, "Idempotency-Key reused with a different body"),
    "lane_conflict": (409, "Lane conflict"),
    "identity_conflict": (409, "Another principal's execution holds this operation"),
    "not_retryable": (409, "Not retryable"),
    "invalid_state": (409, "The execution's state forbids this"),
    "stale_plan": (409, "Stale plan"),
    "force_required": (409, "The plan needs an approval with force"),
    "approval_expired": (409, "The approval window closed"),
    "already_approved": (409, "You approved this plan already"),
    "invalid_freeze": (409, "The freeze cannot be declared as asked"),
    "history_pruned": (409, "The execution's history was pruned"),
    "delivery_in_flight": (409, "The delivery is being sent right now"),
    "payload_too_large": (413, "Request body too large"),
    "unsupported_media_type": (415, "Unsupported media type"),
    "invalid_input": (422, "Invalid input"),
    "throttled": (429, "Too many requests"),
    "internal_error": (500, "Internal error"),
    "read_only_instance": (503, "Read-only instance"),
    "unavailable": (503, "Service unavailable"),
}


MAX_DETAIL_CHARS = 500
MAX_TEXT_CHARS = 200  # instance, lane, ... : any other string member
MAX_ERRORS = 20
MAX_ERRORS_CHARS = 2000  # fields and messages of the errors shown, together
MAX_FIELD_CHARS = 100
MAX_MESSAGE_CHARS = 200


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, lone surrogates escaped (UTF-8 cannot carry them
    and the renderer would fail on them)."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: str, limit: int = 40) -> str:
    """A client's string as an error message may show it: JSON-quoted with every non-ASCII,
    control and surrogate character escaped (so a homoglyph is visible as one), cut after at
    most ``limit`` characters of the escaped text. Messages never carry a Python repr of input:
    it is unbounded and speaks Python, not the API."""
    pieces: list[str] = []
    used = 0
    for char in value:
        piece = json.dumps(char)[1:-1]
        if used + len(piece) > limit:
            return '"' + "".join(pieces) + '…"'
        pieces.append(piece)
        used += len(piece)
    return '"' + "".join(pieces) + '"'


def _bounded_error(error: Any) -> Any:
    if not isinstance(error, dict):
        return bounded(str(error), MAX_MESSAGE_CHARS)
    return {
        key: bounded(value, MAX_FIELD_CHARS if key == "field" else MAX_MESSAGE_CHARS)
        if isinstance(value, str)
        else value
        for key, value in error.items()
    }


def _bounded_errors(errors: list[Any]) -> tuple[list[Any], int]:
    """The first errors within MAX_ERRORS and MAX_ERRORS_CHARS, and how many were left off."""
    kept: list[Any] = []
    budget = MAX_ERRORS_CHARS
    for error in errors[:MAX_ERRORS]:
        item = _bounded_error(error)
        budget -= len(str(item))
        if kept and budget < 0:
            break
        kept.append(item)
    return kept, len(errors) - len(kept)


def type_uri(code: str) -> str:
    return TYPE_BASE + code.replace("_", "-")


class Problem(exceptions.APIException):
    """A contract error with a stable ``code``; ``extra`` members go into the body."""

    def __init__(self, code: str, detail: str | None = None, **extra: Any) -> None:
        status_code, title = CODES[code]
        self.status_code = status_code
        self.code = code
        self.title = title
        self.extra = extra
        super().__init__(detail or title, code)


def problem_body(
    code: str, detail: str, *, instance: str | None = None, **extra: Any
) -> dict[str, Any]:
    status_code, title = CODES[code]
    body: dict[str, Any] = {
        "type": type_uri(code),
        "title": title,
        "status": status_code,
        "detail": bounded(detail, MAX_DETAIL_CHARS),
        "code": code,
    }
    if instance:
        body["instance"] = bounded(instance, MAX_TEXT_CHARS)
    for key, value in extra.items():
        if key == "errors" and isinstance(value, list):
            body["errors"], omitted = _bounded_errors(value)
            if omitted:
                body["errors_omitted"] = omitted
        elif isinstance(value, str):
            body[key] = bounded(value, MAX_TEXT_CHARS)
        else:
            body[key] = value
    return body


def problem_response(
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JsonResponse:
    body = problem_body(code, detail, instance=instance, **extra)
    response = JsonResponse(body, status=body["status"], content_type=PROBLEM_CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


E = TypeVar("E", bound=BaseException)
# DRF's exception handler context: the ``view``, its ``args`` and ``kwargs``, the ``request``.
ProblemContext = Mapping[str, Any]


@dataclass(frozen=True)
class ProblemMap(Generic[E]):
    """How the API answers a service exception of ``exc_type`` (and its subclasses, unless
    they have a map of their own): the problem ``code``; its ``detail`` — a fixed text, a
    function of the exception and the handler's context, or None for the exception's own
    message; and the extra ``members`` of the body, drawn from the exception."""

    exc_type: type[E]
    code: str
    detail: str | Callable[[E, ProblemContext], str] | None = None
    members: Callable[[E], dict[str, Any]] | None = None

    def problem(self, exc: E, context: ProblemContext) -> Problem:
        if self.detail is None:
            detail = str(exc)
        elif isinstance(self.detail, str):
            detail = self.detail
        else:
            detail = self.detail(exc, context)
        return Problem(self.code, detail, **(self.members(exc) if self.members else {}))


_MAPS: dict[type[BaseException], ProblemMap[Any]] = {}


def problems_register(*maps: ProblemMap[Any]) -> None:
    """Add an app's answers to the table. Each exception type is mapped once: a second,
    different map for it is a configuration error, not a silent override."""
    for problem_map in maps:
        if problem_map.code not in CODES:
            raise ImproperlyConfigured(f"unknown problem code {problem_map.code!r}")
        registered = _MAPS.setdefault(problem_map.exc_type, problem_map)
        if registered is not problem_map:
            raise ImproperlyConfigured(f"{problem_map.exc_type.__qualname__} is mapped twice")


def problem_map_for(exc: BaseException) -> ProblemMap[Any] | None:
    """The map of the nearest class of ``exc`` that has one (a subclass refines its base:
    ``NotRetryable`` is not ``InvalidState``'s answer), or None."""
    for klass in type(exc).__mro__:
        found = _MAPS.get(klass)
        if found is not None:
            return found
    return None


def not_found_detail(exc: BaseException, context: ProblemContext) -> str:
    """The detail of every 404, whether a view raised ``Http404`` or a service found no row
    the caller may see: DRF's, read per request (it is translatable)."""
    return str(exceptions.NotFound.default_detail)


problems_register(
    ProblemMap(
        RequestDataTooBig,
        "payload_too_large",
        lambda exc, context: f"The body exceeds {settings.ALFRED_MAX_BODY_BYTES} bytes.",
        members=lambda exc: {"limit": settings.ALFRED_MAX_BODY_BYTES},
    ),
    # The middleware refuses every unsafe method of a read-only instance first, with the same
    # answer; this keeps a service's own refusal (writes_allowed) from being a 500.
    ProblemMap(
        ReadOnlyInstance,
        "read_only_instance",
        "This Alfred instance is read-only: it serves inspection only.",
    ),
)


_DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ParseError: "malformed_request",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid_input",
}


def _detail_text(detail: Any) -> str:
    if isinstance(detail, list | tuple):
        return "; ".join(_detail_text(d) for d in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_detail_text(v)}" for k, v in detail.items())
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    instance = request.path if request is not None else None
    mapped = problem_map_for(exc)
    if mapped is not None:
        exc = mapped.problem(exc, context)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    if isinstance(exc, Problem):
        body = problem_body(exc.code, str(exc.detail), instance=instance, **exc.extra)
    elif isinstance(exc, exceptions.APIException):
        code = _DRF_CODES.get(type(exc)) or next(
            (c for k, c in _DRF_CODES.items() if isinstance(exc, k)), "internal_error"
        )
        extra: dict[str, Any] = {}
        detail = _detail_text(exc.detail)
        if isinstance(exc, exceptions.ValidationError):
            extra["errors"] = _field_errors(exc.detail)
        elif isinstance(exc, exceptions.UnsupportedMediaType):
            # DRF's detail quotes the client's Content-Type.
            detail = "Send the body as Content-Type: application/json (UTF-8, no wildcard)."
        body = problem_body(code, detail, instance=instance, **extra)
        if not isinstance(exc, exceptions.ValidationError):
            # A serializer's refusal is invalid input like a schema's: 422, as CODES says,
            # not DRF's 400. Others keep their own status (an unmapped one is internal_error).
            body["status"] = exc.status_code
    else:
        return None  # Django's 500 handler renders the problem (see alfred.views.server_error)

    headers: dict[str, str] = {}
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        headers["WWW-Authenticate"] = 'Bearer realm="alfred"'
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
    if request is not None:
        # A problem is JSON whatever the view renders otherwise (the OpenAPI schema's YAML).
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type
    return Response(body, status=body["status"], headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def _field_errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for key, value in detail.items():
            out.extend(_field_errors(value, f"{prefix}/{key}"))
        return out
    if isinstance(detail, list):
        if all(not isinstance(d, dict | list) for d in detail):
            return [{"field": prefix, "message": str(d)} for d in detail]
        out = []
        for i, value in enumerate(detail):
            out.extend(_field_errors(value, f"{prefix}/{i}"))
        return out
    return [{"field": prefix, "message": str(detail)}]
