"""Health endpoints and the problem+json error pages for paths outside DRF."""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from alfred.metrics import exposition, scrape_allowed, state_collectors
from alfred.problems import problem_response

log = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Touches nothing else."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database answers a query and the broker answers a ping."""
    checks: dict[str, Any] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            conn.default_channel.client.ping()  # type: ignore[attr-defined]
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"error: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    if not ready:
        log.warning("not ready: %s", checks)
        response = problem_response(
            "unavailable", "A dependency is not answering.", instance=request.path, checks=checks
        )
        return response
    return JsonResponse({"status": "ready", "checks": checks})


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus' scrape: what happened (every process of this host's web) and what waits
    (the database's state). ``alfred.metrics.scrape_allowed`` says who may read it. With
    ``ALFRED_METRICS_PORT`` they are served there only (``alfred.metrics_port``): whatever
    routes to this port (an Ingress) must not reach them."""
    if settings.ALFRED_METRICS_PORT:
        return problem_response(
            "not_found",
            "Metrics are served on ALFRED_METRICS_PORT, not here.",
            instance=request.path,
        )
    if not scrape_allowed(
        request.headers.get("Authorization", ""), str(request.META.get("REMOTE_ADDR", ""))
    ):
        return problem_response(
            "permission_denied",
            "Scrapes need ALFRED_METRICS_TOKEN, or to come from ALFRED_METRICS_NETWORKS.",
            instance=request.path,
        )
    body, content_type = exposition(*state_collectors())
    return HttpResponse(body, content_type=content_type)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return problem_response("not_found", "No such resource.", instance=request.path)
    return defaults.page_not_found(request, exception or Exception())


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return problem_response(
            "internal_error", "An internal error occurred; it was logged.", instance=request.path
        )
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return problem_response(
        "malformed_request", "The request could not be read.", instance=request.path
    )


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return problem_response("permission_denied", "Permission denied.", instance=request.path)
    return defaults.permission_denied(request, exception or Exception())
