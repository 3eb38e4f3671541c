from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable
from urllib.parse import unquote_plus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from alfred.problems import CODES, PROBLEM_CONTENT_TYPE, problem_body, problem_response

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The code an error status maps to when something below DRF answered it (Django's URL
# resolver, an unhandled exception in DEBUG): every API error stays a problem.
_FALLBACK_CODES = {
    400: "malformed_request",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


RECEIVERS = "/api/v1/receivers/"


class ApiGuardMiddleware:
    """The edge of every request, before any view runs and after every answer:

    - outside ``/api/`` (the admin), an address with a control character: 400 (under
      ``/api/`` the views check their ids and parameters themselves, with problems);
    - a mutation on a read-only instance: 503 — under ``/api/`` the ``read_only_instance``
      problem, elsewhere (the admin) a short page; only the admin's login and logout pass,
      so an operator can still sign in to look;

    and for ``/api/``:

    - a body larger than ``ALFRED_MAX_BODY_BYTES``: 413 ``payload_too_large``, by its declared
      Content-Length or, for a chunked body (no Content-Length), by reading at most one byte
      past the limit; a chunked body within the limit gets its Content-Length set, since DRF
      reads a request without one as empty;
    - an error answered by something else than DRF (the URL resolver, Django's DEBUG pages):
      rewritten as the problem for its status.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            if _holds_control_characters(request):
                # An id or a filter value with a NUL reaches PostgreSQL as an error (the
                # admin's object pages and filters); no real one holds a control character.
                return HttpResponse(
                    "The address holds a control character.\n",
                    status=400,
                    content_type="text/plain; charset=utf-8",
                )
            if _read_only_refuses(request):
                return HttpResponse(
                    "This Alfred instance is read-only: it serves inspection only.\n",
                    status=503,
                    content_type="text/plain; charset=utf-8",
                )
            return self.get_response(request)
        refused = self._refuse(request)
        if refused is not None:
            return refused
        return self._as_problem(request, self.get_response(request))

    def _refuse(self, request: HttpRequest) -> HttpResponse | None:
        if request.method in SAFE_METHODS:
            return None
        if settings.ALFRED_READ_ONLY:
            return problem_response(
                "read_only_instance",
                "This Alfred instance is read-only: it serves inspection only.",
                instance=request.path,
            )
        limit = (
            settings.ALFRED_RECEIVER_MAX_BODY_BYTES
            if request.path.startswith(RECEIVERS)
            else settings.ALFRED_MAX_BODY_BYTES
        )
        declared = request.META.get("CONTENT_LENGTH")
        if declared:
            try:
                length = int(declared)
            except ValueError:
                return problem_response(
                    "malformed_request", "Content-Length is not a number.", instance=request.path
                )
        else:
            body = request.read(limit + 1)
            length = len(body)
            if length <= limit:
                # What HttpRequest.body does after reading: later readers get the same bytes.
                request._body = body
                request._stream = io.BytesIO(body)
                request.META["CONTENT_LENGTH"] = str(length)
        if length > limit:
            return problem_response(
                "payload_too_large",
                f"The body is larger than the limit of {limit} bytes.",
                instance=request.path,
                limit=limit,
            )
        return None

    def _as_problem(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if response.status_code < 400 or response.get("Content-Type") == PROBLEM_CONTENT_TYPE:
            return response
        status = response.status_code
        code = _FALLBACK_CODES.get(status) or (
            "internal_error"
            if status >= 500
            else next((c for c, (s, _) in CODES.items() if s == status), "malformed_request")
        )
        body = problem_body(code, _detail(response) or CODES[code][1], instance=request.path)
        body["status"] = status
        problem = JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if header in response:
                problem[header] = response[header]
        return problem


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _holds_control_characters(request: HttpRequest) -> bool:
    query = unquote_plus(request.META.get("QUERY_STRING", ""))
    return bool(_CONTROL.search(request.path) or _CONTROL.search(query))


def _read_only_refuses(request: HttpRequest) -> bool:
    if request.method in SAFE_METHODS or not settings.ALFRED_READ_ONLY:
        return False
    return request.path not in {reverse("admin:login"), reverse("admin:logout")}


def _detail(response: HttpResponse) -> str:
    """A JSON error's own ``detail``, if it has one; never an HTML page's text."""
    if not response.get("Content-Type", "").startswith("application/json"):
        return ""
    try:
        body = json.loads(response.content)
    except (ValueError, AttributeError):
        return ""
    return str(body.get("detail", "")) if isinstance(body, dict) else ""
