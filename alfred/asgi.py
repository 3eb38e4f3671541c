"""The web process's application, which uvicorn serves (`make run`, the Dockerfile).

One router, two handlers:

- the event streams (``…/events/stream``) go to Django's ASGI handler: each is an async
  stream the event loop serves, holding no thread and no connection per client;
- every other request goes to Django's WSGI handler on a fixed pool of
  ``ALFRED_WEB_THREADS`` threads (a2wsgi). Django's ASGI handler runs each synchronous
  request on a thread made for it and crosses between the event loop and threads several
  times per request: a ``/healthz`` took 4–7 ms over HTTP that way, 1 ms this way, and an
  acceptance a quarter less CPU (bench/reports/acceptance.md).

Who the client is: uvicorn is run with ``--no-proxy-headers`` (the chart, compose, `make
run`), since its default believes ``X-Forwarded-For`` from any connection on 127.0.0.1, and
the application believes it only from the proxies the operator declares in
``ALFRED_TRUSTED_PROXIES`` (uvicorn's own ``ProxyHeadersMiddleware``, given that list): the
address the access log, the throttles and the metrics' network check see is otherwise the
connection's own.

A body sent without Content-Length (chunked) is read here, at most one byte past the
largest body limit, and handed on with its length: Django's WSGI request reads a body
without a length as empty. Whether that length is over the limit is the API's edge to say
(``ApiGuardMiddleware``: 413 ``payload_too_large``).
"""

import asyncio
import gc
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import django
from a2wsgi import WSGIMiddleware
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "alfred.settings")
# See ALFRED_DB_POOL_SIZE in settings: the web process's threads (the WSGI pool's, and those
# the ASGI handler makes for the streams' checks) share one pool of connections.
os.environ.setdefault("ALFRED_DB_POOL_SIZE", "10")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Any], Awaitable[None]]

django.setup(set_prefix=False)

from alfred.telemetry import telemetry_setup  # noqa: E402 - after django.setup()

# Before the handlers load the middleware: Django's instrumentation adds its own.
_tracing = telemetry_setup("alfred-web")
_streams = get_asgi_application()

from django.conf import settings  # noqa: E402 - after django.setup()
from django.db import connection  # noqa: E402

from alfred.dbpool import pool_check_install  # noqa: E402
from alfred.metrics_port import metrics_port_start, metrics_port_stop  # noqa: E402
from executions.lanes.reconciler import lanes_release_ready  # noqa: E402

_pool = getattr(connection, "pool", None)  # the pool all threads share (ALFRED_DB_POOL_SIZE)
if _pool is not None:
    pool_check_install(_pool)

# (A Django response is the iterable of bytes WSGI asks for; its stubs say HttpResponseBase.)
_requests = WSGIMiddleware(
    get_wsgi_application(),  # type: ignore[arg-type]
    workers=settings.ALFRED_WEB_THREADS,
)
_BODY_CAP = max(settings.ALFRED_MAX_BODY_BYTES, settings.ALFRED_RECEIVER_MAX_BODY_BYTES) + 1
STREAM_SUFFIX = "/events/stream"


async def _application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http" or scope["path"].rstrip("/").endswith(STREAM_SUFFIX):
        await _streams(scope, receive, send)
        return
    if scope["method"] not in ("GET", "HEAD", "OPTIONS") and not _has_length(scope):
        scope, receive = await _with_length(scope, receive)
    await _requests(scope, receive, send)  # type: ignore[arg-type]


def _has_length(scope: Scope) -> bool:
    return any(name == b"content-length" for name, _ in scope["headers"])


async def _with_length(scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
    """The body read whole (to at most ``_BODY_CAP`` bytes), and the scope with its length."""
    body = bytearray()
    more = True
    while more and len(body) < _BODY_CAP:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body += message.get("body", b"")
        more = message.get("more_body", False)
    del body[_BODY_CAP:]
    headers = [*scope["headers"], (b"content-length", str(len(body)).encode())]
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # the client's disconnect, as the handler would see it
        sent = True
        return {"type": "http.request", "body": bytes(body), "more_body": False}

    return {**scope, "headers": headers}, replay


_tracer = trace.get_tracer("alfred.asgi")


async def _traced(scope: Scope, receive: Receive, send: Send) -> None:
    """With tracing on, a request's server span covers the whole ASGI call, response
    included: uvicorn writes its access line as the response starts, on the event loop, after
    Django's own span (on a WSGI thread) has ended, so without it the access line carried no
    ``trace_id``. Django's span becomes its child (a2wsgi runs Django in this context)."""
    if scope["type"] != "http":
        await _application(scope, receive, send)
        return
    carrier = {name.decode("latin1"): value.decode("latin1") for name, value in scope["headers"]}
    with _tracer.start_as_current_span(
        scope["method"],
        context=propagate.extract(carrier),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
    ) as span:

        async def send_observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
            await send(message)

        await _application(scope, receive, send_observed)


_served = _traced if _tracing else _application
application: Any = (
    ProxyHeadersMiddleware(_served, trusted_hosts=settings.ALFRED_TRUSTED_PROXIES)  # type: ignore[arg-type]
    if settings.ALFRED_TRUSTED_PROXIES
    else _served
)


async def _lifespan(receive: Receive, send: Send) -> None:
    """uvicorn's start and stop (``--lifespan on``): before the first request, lanes left
    blocked whose owner holds valid readiness evidence are released (the reconciler's start
    rule: a restart never leaves a safely releasable lane blocked). On a thread: Django
    refuses a synchronous query on the event loop. With ``ALFRED_METRICS_PORT``, /metrics is
    served there from start to stop (``alfred.metrics_port``)."""
    metrics = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await asyncio.to_thread(_release_ready_lanes)
            if settings.ALFRED_METRICS_PORT:
                try:
                    metrics = metrics_port_start("0.0.0.0", settings.ALFRED_METRICS_PORT)  # noqa: S104
                except OSError as exc:  # uvicorn --workers: another process serves it
                    logging.getLogger(__name__).warning(
                        "/metrics not served on port %d: %s",
                        settings.ALFRED_METRICS_PORT,
                        exc.strerror,
                    )
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if metrics is not None:
                await asyncio.to_thread(metrics_port_stop, metrics)
            await send({"type": "lifespan.shutdown.complete"})
            return


def _release_ready_lanes() -> None:
    """Read-only instances change nothing. If the database does not answer yet, serve
    anyway: /readyz says so, and the next start tries again. Each of uvicorn's worker
    processes does it; two at once release a lane once (compare-and-swap)."""
    if settings.ALFRED_READ_ONLY:
        return
    try:
        lanes_release_ready()
    except Exception:
        logging.getLogger(__name__).exception("releasing ready lanes at start failed")
    finally:
        connection.close()


# Everything made so far (Django, the apps, the URL map, DRF's classes: 150,000 objects) lives
# as long as the process. Out of the collector's sight, a full collection stops scanning it:
# such a pause had held every request on the process for 40-75 ms, once per 1,000 or so
# acceptances (bench/reports/acceptance.md).
gc.collect()
gc.freeze()
