"""A worker's proof that it consumes, and the port it answers on.

A Celery worker can stay alive, answer remote-control pings and hold its broker connection
while it no longer takes tasks (after a Redis reconnect, or with a pool that stopped taking
work): nothing fails, the queue just grows. So a worker proves consumption the only way that
cannot lie: every ``ALFRED_WORKER_HEARTBEAT_SECONDS`` its main process sends a task to the
worker's own queue (``<name>.dq2``, Celery's ``worker_direct``), and the pool process that
runs it writes ``consumed_at`` (:class:`alfred.models.WorkerHeartbeat`), on the database's
clock. The web's ``/metrics`` reports each worker's heartbeat age.

The main process also marks itself present every period, straight into the database, on a
thread of its own (a broker that does not answer must not make a live worker look gone): a
worker that stops marking is gone, no longer reported, and its runs are taken over
(``alfred.workers`` says why two marks). A starting worker deletes the rows of workers gone
long ago.

With ``ALFRED_WORKER_HTTP_PORT`` set, the worker's main process also serves:

- ``/healthz``: the process answers;
- ``/readyz``: 200 while the last heartbeat was consumed less than three periods ago, 503
  otherwise (a probe that restarts the worker once it stays unready is the cure for the
  silent stop);
- ``/metrics``: this host's worker processes' counters (``alfred.metrics``), let in as the
  web's are (``scrape_allowed``).
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from celery import Celery
from celery.signals import worker_ready, worker_shutdown
from celery.utils.nodenames import worker_direct
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from alfred.metrics import exposition, scrape_allowed
from alfred.models import WorkerHeartbeat
from alfred.sideport import SidePortHandler
from alfred.workers import worker_heartbeat_age, worker_seen, workers_forget

log = logging.getLogger(__name__)

HEARTBEAT_TASK = "alfred.tasks.worker_heartbeat"


def worker_ready_check(worker: str) -> tuple[bool, dict[str, Any]]:
    """Whether ``worker`` consumes, and what says so."""
    limit = 3 * settings.ALFRED_WORKER_HEARTBEAT_SECONDS
    try:
        age = worker_heartbeat_age(worker)
    except DatabaseError as exc:
        return False, {"worker": worker, "database": f"error: {type(exc).__name__}"}
    finally:
        close_old_connections()
    ready = age is not None and age < limit
    return ready, {"worker": worker, "heartbeat_age_seconds": age, "limit_seconds": limit}


class _Heartbeat(threading.Thread):
    def __init__(self, app: Celery, worker: str) -> None:
        super().__init__(name="alfred-heartbeat", daemon=True)
        self.app, self.worker = app, worker
        self.stopped = threading.Event()

    def run(self) -> None:
        period = settings.ALFRED_WORKER_HEARTBEAT_SECONDS
        queue = worker_direct(self.worker)
        while not self.stopped.is_set():
            try:
                self.app.send_task(
                    HEARTBEAT_TASK,
                    args=[self.worker],
                    queue=queue,  # type: ignore[arg-type] # Celery routes a kombu Queue as given
                    expires=3 * period,
                )
            except Exception as exc:
                log.warning("worker %s: heartbeat not sent: %s", self.worker, exc)
            self.stopped.wait(period)


class _Presence(threading.Thread):
    """The main process's mark, every period, on a connection of its own that it closes after
    each mark: the process forks pool processes, which must not inherit an open one."""

    def __init__(self, worker: str) -> None:
        super().__init__(name="alfred-presence", daemon=True)
        self.worker = worker
        self.stopped = threading.Event()

    def run(self) -> None:
        period = settings.ALFRED_WORKER_HEARTBEAT_SECONDS
        while not self.stopped.is_set():
            wait = period
            try:
                worker_seen(self.worker)
            except Exception as exc:  # never end: a live worker unmarked is taken for gone
                log.warning("worker %s: presence not marked: %s", self.worker, exc)
                # Soon again: after a database outage, marks must resume before this worker
                # can be taken for gone (alfred.workers).
                wait = min(period, 1.0)
            finally:
                with suppress(Exception):
                    connection.close()
            self.stopped.wait(wait)


def _handler(worker: str) -> type[BaseHTTPRequestHandler]:
    class Handler(SidePortHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._json(200, {"status": "ok", "worker": worker})
            elif self.path == "/readyz":
                ready, checks = worker_ready_check(worker)
                self._json(200 if ready else 503, {"ready": ready, **checks})
            elif self.path == "/metrics":
                address = self.client_address[0]
                if not scrape_allowed(self.headers.get("Authorization", ""), address):
                    self._json(403, {"detail": "scrapes need ALFRED_METRICS_TOKEN or a network"})
                    return
                body, content_type = exposition()
                self.send_body(200, body, content_type)
            else:
                self._json(404, {"detail": "not found"})

        def _json(self, status: int, document: dict[str, Any]) -> None:
            self.send_body(status, json.dumps(document).encode(), "application/json")

    return Handler


_heartbeat: _Heartbeat | None = None
_presence: _Presence | None = None
_server: ThreadingHTTPServer | None = None


@worker_ready.connect
def _worker_started(sender: Any, **_: Any) -> None:
    """In the worker's main process, once it consumes: the rows of workers long gone
    forgotten, the heartbeat, the presence mark, and the port."""
    global _heartbeat, _presence, _server
    worker = str(sender.hostname)
    try:
        forgotten = workers_forget()
    except DatabaseError as exc:
        log.warning("worker %s: gone workers not forgotten: %s", worker, exc)
    else:
        if forgotten:
            log.info("worker %s: forgot %d workers gone long ago", worker, forgotten)
    finally:
        connection.close()
    _heartbeat = _Heartbeat(sender.app, worker)
    _heartbeat.start()
    _presence = _Presence(worker)
    _presence.start()
    port = settings.ALFRED_WORKER_HTTP_PORT
    if port:
        _server = ThreadingHTTPServer(("0.0.0.0", port), _handler(worker))  # noqa: S104
        _server.daemon_threads = True
        threading.Thread(target=_server.serve_forever, name="alfred-http", daemon=True).start()
        log.info("worker %s: /healthz, /readyz and /metrics on port %d", worker, port)


@worker_shutdown.connect
def _worker_stopping(**_: Any) -> None:
    """A worker that stops on purpose takes its heartbeat row along: it is not a worker that
    stopped consuming (one killed outright leaves it, and its age grows)."""
    global _heartbeat, _presence, _server
    if _presence is not None:
        _presence.stopped.set()
    if _heartbeat is not None:
        _heartbeat.stopped.set()
        try:
            WorkerHeartbeat.objects.filter(worker=_heartbeat.worker).delete()
        except DatabaseError:
            log.warning("worker %s: heartbeat row left behind", _heartbeat.worker)
    if _server is not None:
        _server.shutdown()
    _heartbeat = _presence = _server = None
