"""A real web process for the tests that need one: uvicorn serving the ASGI app (with its
connection pool) against the test database, as `make run` and a deployment serve it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from django.conf import settings

from alfred.devstack import exit_described, free_ports
from tests.conftest import ROOT, subprocess_database_url, wait_for


class WebServer:
    def __init__(self, name: str = "web", **environ: str) -> None:
        self.port = free_ports()
        self.base = f"http://127.0.0.1:{self.port}"
        self.environ = environ
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / ".alfred" / f"{name}-{os.getpid()}-{self.port}.log"

    def start(self) -> WebServer:
        env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "DJANGO_SETTINGS_MODULE": "alfred.settings",
            "ALFRED_ENV": "test",
            "ALFRED_DEBUG": "1",
            # a native crash leaves its traceback in the log instead of only an exit code
            "PYTHONFAULTHANDLER": "1",
            **self.environ,
        }
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "alfred.asgi:application",
                "--port",
                str(self.port),
                "--lifespan",
                "on",
                "--log-level",
                "warning",
                "--timeout-graceful-shutdown",
                "1",
                # as every launcher serves it: Alfred reads forwarded headers itself, from
                # ALFRED_TRUSTED_PROXIES only (alfred/asgi.py)
                "--no-proxy-headers",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self.up, timeout=30, interval=0.1)
        return self

    def up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the web process exited:\n{self.output()}")
        try:
            return httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL: the process ends at once, its connections with it."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if Path(self.log).exists() else ""

    def state(self) -> str:
        """Whether the process still runs (or how it ended), and the end of its log: what a
        failed assertion about the server should show."""
        assert self.proc is not None
        code = self.proc.poll()
        alive = "running" if code is None else f"gone ({exit_described(code)})"
        return f"the web process is {alive}; the end of its log:\n{self.output()[-4000:]}"
