from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from alfred.problems import problem_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ApiGuardMiddleware:
    """Refuses, before any body is read or any view runs:

    - a declared body larger than ``ALFRED_MAX_BODY_BYTES`` (413 ``payload_too_large``);
      bodies without Content-Length are capped by ``DATA_UPLOAD_MAX_MEMORY_SIZE`` instead;
    - mutations on a read-only instance (503 ``read_only_instance``), which serves inspection.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            if request.method not in SAFE_METHODS and settings.ALFRED_READ_ONLY:
                return problem_response(
                    "read_only_instance",
                    "This Alfred instance is read-only: it serves inspection only.",
                    instance=request.path,
                )
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            limit = settings.ALFRED_MAX_BODY_BYTES
            if length > limit:
                return problem_response(
                    "payload_too_large",
                    f"The body is {length} bytes; the limit is {limit}.",
                    instance=request.path,
                    limit=limit,
                )
        return self.get_response(request)
