"""RFC 9457 problem details: every 4xx/5xx of the API is ``application/problem+json`` with a
stable absolute ``type`` URI, ``title``, ``status``, ``detail`` and a ``code``.

``Problem`` is the one exception services and views raise for a contract error; DRF's own
exceptions (auth, parse, throttling, 404, 405, 415) are mapped to the same shape by
:func:`exception_handler`; Django-level errors outside DRF go through :func:`problem_response`.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

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
    "not_found": (404, "Not found"),
    "unknown_workflow": (404, "Unknown workflow"),
    "method_not_allowed": (405, "Method not allowed"),
    "not_acceptable": (406, "Not acceptable"),
    "idempotency_conflict": (409, "Idempotency-Key reused with a different body"),
    "lane_conflict": (409, "Lane conflict"),
    "not_retryable": (409, "Not retryable"),
    "invalid_state": (409, "The execution's state forbids this"),
    "stale_plan": (409, "Stale plan"),
    "payload_too_large": (413, "Request body too large"),
    "unsupported_media_type": (415, "Unsupported media type"),
    "invalid_input": (422, "Invalid input"),
    "throttled": (429, "Too many requests"),
    "internal_error": (500, "Internal error"),
    "read_only_instance": (503, "Read-only instance"),
    "unavailable": (503, "Service unavailable"),
}


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
        "detail": detail,
        "code": code,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
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
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = Problem(
            "payload_too_large",
            f"The body exceeds {settings.ALFRED_MAX_BODY_BYTES} bytes.",
            limit=settings.ALFRED_MAX_BODY_BYTES,
        )

    if isinstance(exc, Problem):
        body = problem_body(exc.code, str(exc.detail), instance=instance, **exc.extra)
    elif isinstance(exc, exceptions.APIException):
        code = _DRF_CODES.get(type(exc)) or next(
            (c for k, c in _DRF_CODES.items() if isinstance(exc, k)), "internal_error"
        )
        extra: dict[str, Any] = {}
        if isinstance(exc, exceptions.ValidationError):
            extra["errors"] = _field_errors(exc.detail)
        body = problem_body(code, _detail_text(exc.detail), instance=instance, **extra)
        body["status"] = exc.status_code
    else:
        return None  # Django's 500 handler renders the problem (see alfred.views.server_error)

    headers: dict[str, str] = {}
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        headers["WWW-Authenticate"] = 'Bearer realm="alfred"'
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
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
