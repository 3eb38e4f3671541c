"""Server-Sent Events over the outbox (delivery/stream.py holds the mechanics).

The view authenticates and checks visibility like every read (DRF, on a thread), then answers
with an async stream that the event loop serves: no thread and no database connection is
held per client. Under WSGI these endpoints cannot stream; Alfred serves them under ASGI
(uvicorn), as `make run` and the deployment do.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connections
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from alfred.openapi import problems
from alfred.permissions import request_caller
from alfred.problems import Problem
from delivery.feed import FEED_CURSOR_RE, Cursor
from delivery.stream import execution_stream, feed_stream
from executions import selectors
from executions.api.params import check_execution_id

EVENT_STREAM = "text/event-stream"


class EventStreamRenderer(BaseRenderer):
    """Lets a client ask for ``text/event-stream``; the stream itself is never rendered by
    DRF (the view returns it whole). A problem falls back to JSON."""

    media_type = EVENT_STREAM
    format = "sse"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        return JSONRenderer().render(data)


def _client(request: Request) -> str:
    return f"{request.META.get('REMOTE_ADDR', '?')} ({request_caller(request).name})"


def _streaming(stream: Any) -> StreamingHttpResponse:
    # Django gives a request's connection back when the response closes: for a stream, when
    # the client leaves. Give it back now (the stream reads through the hub's own pool), or
    # every connected client would hold one of the web process's pooled connections.
    close_old_connections_now()
    response = StreamingHttpResponse(stream, content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def close_old_connections_now() -> None:
    for conn in connections.all(initialized_only=True):
        conn.close()


def _last_event_id(request: Request, form: re.Pattern[str], what: str) -> str | None:
    """Where to resume: the Last-Event-ID header if sent, else ``?after=``. Each one sent
    must have ``form`` (an empty one too): a malformed one is refused, never ignored."""
    header = request.headers.get("Last-Event-ID")
    query = request.query_params.get("after")
    for raw in (header, query):
        if raw is not None and not form.fullmatch(raw):
            raise Problem("malformed_request", f"Last-Event-ID (or after) must be {what}.")
    return header if header is not None else query


# A sequence, or a feed cursor's parts: at most 18 digits, so any of them fits a bigint.
SEQUENCE_RE = re.compile(r"[0-9]{1,18}")
SEQUENCE = {"type": "string", "pattern": f"^{SEQUENCE_RE.pattern}$", "example": "12"}
FEED_CURSOR = {
    "type": "string",
    "pattern": f"^(?:{FEED_CURSOR_RE.pattern})$",
    "example": "1234-56",
    "description": "A cursor the feed sent (<txid>-<id>), or 0 for the start of what is kept.",
}


def last_event_id(schema: dict[str, Any]) -> OpenApiParameter:
    return OpenApiParameter(
        "Last-Event-ID",
        schema,
        location=OpenApiParameter.HEADER,
        description="The id of the last event received: the stream replays what came after it.",
    )


SSE_RESPONSE = OpenApiResponse(
    # One event of the stream, as an EventSource parses it (OpenAPI's reading of SSE).
    response={
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "event": {"type": "string"},
            "data": {"type": "string", "description": "The event document, as JSON."},
            "retry": {"type": "integer", "minimum": 0},
        },
    },
    description=(
        "text/event-stream: `id:`, `event:` (the type) and `data:` (the event JSON: "
        "execution, sequence, key, type, payload, created_at) per event, a `retry:` hint "
        "first, a `: keep-alive` comment every 15 s."
    ),
)


class ExecutionEventStreamApi(APIView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="executions_events_stream",
        summary="The execution's events as Server-Sent Events: replay, then live",
        description=(
            "Each event's `id` is its sequence. Reconnect with `Last-Event-ID` (or `?after=N`) "
            "to replay what was missed. The stream ends once the execution has ended and "
            "its lane has let it go: after its terminal event and, for a workflow that holds "
            "a lane, the `lane.released` or `lane.recovery_required` that follows it. "
            "Connecting to such an execution with nothing new answers 204, which tells an "
            "EventSource to stop reconnecting."
        ),
        parameters=[
            last_event_id(SEQUENCE),
            OpenApiParameter("after", SEQUENCE, description="Same as Last-Event-ID (default 0)."),
        ],
        responses={(200, EVENT_STREAM): SSE_RESPONSE, 204: None, **problems(400, 401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> HttpResponseBase:
        check_execution_id(execution_id)
        raw = _last_event_id(request, SEQUENCE_RE, "a sequence (digits)")
        after = int(raw) if raw is not None else 0
        standing = selectors.execution_events_standing(execution_id, request_caller(request))
        if standing is None:
            raise Http404
        if standing.settled and standing.last_sequence <= after:
            return HttpResponse(status=204)
        return _streaming(
            execution_stream(
                execution_id, after, terminal=standing.terminal, client=_client(request)
            )
        )


class EventStreamApi(APIView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="events_stream",
        summary="Every event the caller may read, as Server-Sent Events",
        description=(
            "Each event's `id` is a global cursor (`<txid>-<id>`, opaque). Without "
            "`Last-Event-ID` (or `?after=`) the stream starts now; with one, it replays "
            "every event after it first. Each event carries its execution and that "
            "execution's gapless sequence."
        ),
        parameters=[
            last_event_id(FEED_CURSOR),
            OpenApiParameter("after", FEED_CURSOR, description="Same as Last-Event-ID."),
        ],
        responses={(200, EVENT_STREAM): SSE_RESPONSE, **problems(400, 401)},
    )
    def get(self, request: Request) -> HttpResponseBase:
        raw = _last_event_id(request, FEED_CURSOR_RE, "a cursor this stream sent (like 1234-56)")
        after = None if raw is None else Cursor.parse(raw)
        caller = request_caller(request)
        return _streaming(
            feed_stream(
                after,
                principal=caller.principal,
                reads_all=caller.reads_all,
                client=_client(request),
            )
        )
