"""The web process's ``/metrics`` on a port of its own (``ALFRED_METRICS_PORT``).

Whatever routes to the web's port (an Ingress routing ``/``, the TLS proxy in front of
compose's web) would route ``/metrics`` too, and from the web's side a scrape that came
through it looks like one from the proxy's address: the ingress controller's pod is on the
pod network ``ALFRED_METRICS_NETWORKS`` admits. The names the metrics carry (workflows,
lanes, endpoints, workers) are not for the internet. So a deployment serves them on another
port, which no Ingress, Service port or published port names: Prometheus scrapes the pod
there, and the web's own port answers ``/metrics`` with 404 (``alfred.views.metrics``).

The server is a thread of the web process (started and stopped by uvicorn's lifespan,
``alfred.asgi``): it reads the same multiprocess directory and the same state gauges as the
web's ``/metrics`` did, and lets a scrape in by the same rule (``scrape_allowed``: the token,
or the connection's own address, never a forwarded one). One uvicorn process per pod or
container, as the chart and compose run it; with ``--workers`` the first to bind the port
serves it (the multiprocess directory makes its answer every process's) and the others log
that they do not.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import ThreadingHTTPServer

from django.db import close_old_connections

from alfred.metrics import exposition, scrape_allowed, state_collectors
from alfred.problems import PROBLEM_CONTENT_TYPE, problem_body
from alfred.sideport import SidePortHandler

log = logging.getLogger(__name__)


class _Handler(SidePortHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._problem("not_found", "This port serves /metrics only.")
            return
        if not scrape_allowed(self.headers.get("Authorization", ""), self.client_address[0]):
            self._problem(
                "permission_denied",
                "Scrapes need ALFRED_METRICS_TOKEN, or to come from ALFRED_METRICS_NETWORKS.",
            )
            return
        try:
            body, content_type = exposition(*state_collectors())
        finally:
            close_old_connections()  # the state gauges queried on this thread's connection
        self.send_body(200, body, content_type)

    def _problem(self, code: str, detail: str) -> None:
        document = problem_body(code, detail, instance=self.path.split("?", 1)[0])
        self.send_body(document["status"], json.dumps(document).encode(), PROBLEM_CONTENT_TYPE)


def metrics_port_start(host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``/metrics`` on ``host:port`` from a thread of this process until
    :func:`metrics_port_stop`."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="alfred-metrics", daemon=True).start()
    log.info("/metrics on port %d (the web's own port does not serve it)", port)
    return server


def metrics_port_stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
