"""The base of every stand-in: a threaded HTTP/1.1 server on loopback, with fault injection.

A stand-in subclasses :class:`StandIn` and implements :meth:`StandIn.handle`. The base serves
the control endpoints every stand-in shares, under ``/_sandbox/``:

- ``GET /_sandbox/health`` — 200 ``{"name": ..., "ok": true}``
- ``GET /_sandbox/faults`` — the armed faults
- ``POST /_sandbox/faults`` ``{"operation", "kind", "times", "params"}`` — arm one
- ``DELETE /_sandbox/faults`` — clear them all
- ``GET /_sandbox/journal`` — what the stand-in recorded of the requests it served (its
  :meth:`StandIn.journal`: change batches, calls, commits, syncs); read-only, anything but
  ``GET`` is 405

so a test in another process (or an operator poking ``make run``) arms faults and checks what
Alfred really did over HTTP, and a test in this process calls ``standin.faults.arm(...)`` and
reads the stand-in's attributes directly.

A fault names an ``operation`` (the stand-in's own name for it: ``ChangeResourceRecordSets``,
``update_ref``, ``application:nginx``; ``*`` matches every operation) and a ``kind``. Kinds
each stand-in understands are listed in its module; ``lose_response`` is common to all and
handled here: the stand-in performs the operation and then :meth:`StandIn.deliver` returns
:data:`LOST`, on which the server shuts the connection down without writing a byte, as when a
response is lost on the way back. ``times`` bounds how often a fault fires (``None``: until
cleared).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Self
from urllib.parse import parse_qs, urlsplit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # percent-decoding left to the stand-in: GitHub paths may carry %2F
    query: dict[str, list[str]]
    headers: Mapping[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Self:
        return cls(
            status,
            json.dumps(payload).encode(),
            {"Content-Type": "application/json", **(headers or {})},
        )

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain") -> Self:
        return cls(status, text.encode(), {"Content-Type": content_type})


class _Lost:
    def __repr__(self) -> str:
        return "LOST"


LOST: Final = _Lost()


@dataclass
class Fault:
    operation: str
    kind: str
    times: int | None = 1
    params: dict[str, Any] = field(default_factory=dict)
    fired: int = 0


class FaultBook:
    """Armed faults. Thread-safe: the server handles requests on many threads."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def arm(self, operation: str, kind: str, *, times: int | None = 1, **params: Any) -> Fault:
        fault = Fault(operation, kind, times, dict(params))
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, operation: str, kind: str) -> Fault | None:
        """Consume one firing of the first matching fault, or None."""
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and fault.operation in (operation, "*"):
                    fault.fired += 1
                    if fault.times is not None and fault.fired >= fault.times:
                        self._faults.remove(fault)
                    return fault
        return None

    def peek(self, operation: str, kind: str) -> Fault | None:
        """The first matching fault, without consuming it (for standing conditions such as an
        application that never converges)."""
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and fault.operation in (operation, "*"):
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(fault) for fault in self._faults]


class StandIn:
    """Subclasses set ``name`` and implement :meth:`handle`."""

    name = "standin"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.faults = FaultBook()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        handler = type(f"{type(self).__name__}Handler", (_Handler,), {"standin": self})
        server = ThreadingHTTPServer((self.host, self.port), handler)
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"standin-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- requests --------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | _Lost:
        raise NotImplementedError

    def journal(self) -> dict[str, Any]:
        """What ``GET /_sandbox/journal`` serves: JSON, each list oldest first."""
        return {}

    def deliver(self, operation: str, response: Response) -> Response | _Lost:
        """``response``, unless a ``lose_response`` fault is armed for ``operation``: call this
        after the operation took effect."""
        if self.faults.take(operation, "lose_response"):
            logger.info("%s: losing the response to %s", self.name, operation)
            return LOST
        return response

    def dispatch(self, request: Request) -> Response | _Lost:
        if request.path.startswith("/_sandbox/"):
            return self._control(request)
        try:
            return self.handle(request)
        except Exception:
            logger.exception("%s: %s %s failed", self.name, request.method, request.path)
            return Response.json(500, {"message": "stand-in error (see its log)"})

    def _control(self, request: Request) -> Response:
        if request.path == "/_sandbox/health":
            return Response.json(200, {"name": self.name, "ok": True})
        if request.path == "/_sandbox/journal":
            if request.method != "GET":
                return Response.json(405, {"message": "the journal is read-only: GET"})
            return Response.json(200, {"name": self.name, **self.journal()})
        if request.path != "/_sandbox/faults":
            return Response.json(404, {"message": "unknown control endpoint"})
        if request.method == "GET":
            return Response.json(200, {"faults": self.faults.listing()})
        if request.method == "DELETE":
            self.faults.clear()
            return Response(204)
        if request.method == "POST":
            body = request.json()
            if not isinstance(body, dict) or not {"operation", "kind"} <= body.keys():
                return Response.json(400, {"message": "need {operation, kind[, times, params]}"})
            fault = self.faults.arm(
                str(body["operation"]),
                str(body["kind"]),
                times=body.get("times", 1),
                **dict(body.get("params") or {}),
            )
            return Response.json(201, asdict(fault))
        return Response.json(405, {"message": "GET, POST or DELETE"})


class _Handler(BaseHTTPRequestHandler):
    standin: StandIn
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3, PyGithub and httpx expect
    # Headers and body go out in two writes; on a keep-alive connection Nagle's algorithm
    # would hold the second until the client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        outcome = self.standin.dispatch(request)
        if isinstance(outcome, _Lost):
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(outcome.status)
        for name, value in outcome.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(outcome.body)))
        self.end_headers()
        if self.command != "HEAD" and outcome.body:
            self.wfile.write(outcome.body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: " + format, self.standin.name, *args)
