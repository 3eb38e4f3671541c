"""What the side ports share: the worker's ``/healthz``, ``/readyz`` and ``/metrics``
(``alfred.worker_http``) and the web's ``/metrics`` port (``alfred.metrics_port``) are small
``http.server`` handlers that answer a body whole and log no line per probe or scrape."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class SidePortHandler(BaseHTTPRequestHandler):
    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass  # probes every few seconds, scrapes every 15 s or so: not worth a line each
