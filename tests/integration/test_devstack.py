"""`make run`'s launcher starts the seeded stand-ins and points web, worker and beat at them.

The launcher runs for real (``python -m alfred.devstack``) against a database of its own on the
session's PostgreSQL server and its own Redis database, so its migrate and bootstrap touch
nothing of the test database; the stand-ins bind free loopback ports.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from django.conf import settings

from alfred.devstack import GRACE_SECONDS, READY, free_port_base
from providers.config import ProviderConfig
from providers.factory import Providers
from tests.conftest import ROOT, subprocess_database_url
from tests.integration.test_deploy_check import paused_under_v1

pytestmark = pytest.mark.worker  # the launcher starts one (and web, beat and the sandbox)

DATABASE = "alfred_devstack_test"


def _other_redis_db(url: str) -> str:
    """The session's broker, another logical database (the launcher's worker must not consume
    the test session's queues)."""
    if url.startswith("redis+socket://"):
        return url.split("?", 1)[0] + "?virtual_host=7"
    return re.sub(r"/\d+$", "", url.rstrip("/")) + "/7"


@pytest.fixture
def devstack_database() -> Iterator[str]:
    """A database of the launcher's own on the session's server, dropped afterwards."""
    parts = urlsplit(subprocess_database_url())
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    url = urlunsplit(parts._replace(path=f"/{DATABASE}"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


class Launcher:
    def __init__(self, env: dict[str, str], state: Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "alfred.devstack"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip())

    def wait_for(self, text: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None:
                raise AssertionError("launcher exited:\n" + "\n".join(self.lines[-60:]))
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout}s:\n" + "\n".join(self.lines))
            time.sleep(0.2)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._pump.join(5)
        return self.proc.returncode


def test_make_run_starts_the_seeded_stand_ins_and_points_alfred_at_them(devstack_database):
    # given: a launcher on free ports with its own database and broker
    state = ROOT / ".alfred" / f"devstack-test-{os.getpid()}"
    base = free_port_base()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ALFRED_", "DJANGO_"))},
        "ALFRED_STATE_DIR": str(state),
        "ALFRED_PORT": str(base + 4),
        "ALFRED_SANDBOX_PORT_BASE": str(base),
        "DATABASE_URL": devstack_database,
        "CELERY_BROKER_URL": _other_redis_db(settings.CELERY_BROKER_URL),
        "ALFRED_FLOWER_PORT": str(base + 8),  # Flower, switched on
    }
    env.pop("AWS_ENDPOINT_URL", None)
    launcher = Launcher(env, state)
    try:
        # when: it reports ready
        launcher.wait_for(READY)

        # then: the banner names the stand-ins, and each answers with the seed data
        aws_url = f"http://127.0.0.1:{base + 1}"
        assert any(aws_url in line for line in launcher.lines)
        sandbox_env = dict(
            line.split("=", 1) for line in (state / "sandbox" / "sandbox.env").read_text().split()
        )
        assert sandbox_env["AWS_ENDPOINT_URL"] == aws_url
        providers = Providers(ProviderConfig.from_env(sandbox_env))
        assert providers.route53().zone("example.com")["name"] == "example.com"
        assert [f["name"] for f in providers.lambda_().fleet("checkout-api")]
        assert providers.helm_repository().head("main")
        booking = providers.booking_repository().read("main", ["next-deimos/server-names.conf"])
        assert "acme.com" in str(booking.files["next-deimos/server-names.conf"])
        status = providers.argocd().application("nginx-ingress")
        assert status.health_status == "Healthy"

        # and: the printed curl starts an execution that runs to the end on its own
        _printed_curl_succeeds(launcher.lines)

        # and: Flower, switched on, is named in the banner and answers
        flower = f"http://127.0.0.1:{base + 8}"
        assert any(f"flower    {flower}/" in line for line in launcher.lines)
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{flower}/healthcheck", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "\n".join(launcher.lines[-40:])
                time.sleep(0.5)
        assert (health.status_code, health.text) == (200, "OK")
        assert httpx.get(f"{flower}/workers", timeout=10).status_code == 200

        # and: the printed demo login is an operator, not a superuser
        _demo_operator_can_operate_but_not_add_users(launcher.lines, f"http://127.0.0.1:{base + 4}")

        # and: the periodic scans (every second) that found nothing wrote nothing to the log
        # (beat's "Sending due task timers-scan", the worker's "Task …timers_scan[id] …")
        scans = [line for line in launcher.lines if "timers_scan[" in line or "timers-scan" in line]
        assert scans == [], "\n".join(scans[:10])
    finally:
        began = time.monotonic()
        code = launcher.stop()
        took = time.monotonic() - began
        shutil.rmtree(state, ignore_errors=True)
    # and: Ctrl-C stops everything cleanly, stand-ins included: each child within the grace,
    # none of them killed
    assert code == 0, "\n".join(launcher.lines[-40:])
    killed = [line for line in launcher.lines if "SIGKILL" in line]
    assert killed == [], "\n".join(launcher.lines[-40:])
    assert took < GRACE_SECONDS, "\n".join(launcher.lines[-40:])
    for offset in (1, 2, 3, 4, 8):
        with socket.socket() as probe:
            # as a server binds (TIME_WAIT of closed connections does not count)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", base + offset))  # free again: no listener left behind


def _printed_curl_succeeds(lines: list[str]) -> None:
    words = shlex.split(next(line for line in lines if "curl -sS -X POST" in line))
    url = next(word for word in words if word.startswith("http"))
    headers = dict(words[at + 1].split(": ", 1) for at, word in enumerate(words) if word == "-H")
    body = words[words.index("-d") + 1]
    accepted = httpx.post(url, content=body, headers=headers, timeout=10)
    assert accepted.status_code == 202, accepted.text
    location = urljoin(url, accepted.headers["location"])
    auth = {"Authorization": headers["Authorization"]}
    deadline = time.monotonic() + 60
    while (state := httpx.get(location, headers=auth, timeout=10).json())["status"] not in (
        "succeeded",
        "failed",
        "canceled",
    ):
        assert time.monotonic() < deadline, state
        time.sleep(0.3)
    assert state["status"] == "succeeded", state


def _demo_operator_can_operate_but_not_add_users(lines: list[str], base: str) -> None:
    banner = next(line for line in lines if "(login: " in line)
    login = re.search(r"\(login: (\S+) / (\S+)\)", banner)
    assert login is not None
    user, password = login.groups()
    raw = next(line for line in lines if "API token" in line).split()[2]
    work = httpx.post(
        f"{base}/api/v1/workflows/add-certificate/executions",
        json={"domain": "example.com", "ticket_ids": ["OPS-1"]},
        headers={"Authorization": f"Bearer {raw}", "Idempotency-Key": "demo-operator"},
        timeout=10,
    )
    # something to act on: an execution and its lane
    assert work.status_code == 202, work.text + "\n".join(lines[-80:])
    with httpx.Client(base_url=base, timeout=10) as browser:
        form = browser.get("/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert csrf is not None
        token = csrf.group(1)
        signed_in = browser.post(
            "/admin/login/?next=/admin/",
            data={"username": user, "password": password, "csrfmiddlewaretoken": token},
        )
        assert signed_in.status_code == 302 and signed_in.headers["location"] == "/admin/"
        assert browser.get("/admin/").status_code == 200
        changelist = browser.get("/admin/executions/execution/")
        assert changelist.status_code == 200
        assert 'value="cancel"' in changelist.text and 'value="retry"' in changelist.text
        assert 'value="recover"' in browser.get("/admin/lanes/lane/").text
        assert browser.get("/admin/auth/user/add/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_make_run_stops_at_the_deploy_gate_before_migrating_when_it_would_strand_a_run():
    # given: an add-subdomain paused for approval under version 1 in the database, and a
    # launcher whose code has add-subdomain version 2 only
    execution = paused_under_v1()
    state = ROOT / ".alfred" / f"devstack-gate-{os.getpid()}"
    base = free_port_base()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ALFRED_", "DJANGO_"))},
        "ALFRED_STATE_DIR": str(state),
        "ALFRED_PORT": str(base + 4),
        "ALFRED_SANDBOX_PORT_BASE": str(base),
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": _other_redis_db(settings.CELERY_BROKER_URL),
        "ALFRED_EXTRA_WORKFLOWS": "tests.support.engine_workflows,tests.support.changed_workflows",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    launcher = Launcher(env, state)
    try:
        # when: it runs
        code = launcher.proc.wait(120)
    finally:
        launcher.stop()
        shutil.rmtree(state, ignore_errors=True)

    # then: it stopped at the gate (exit status 1), naming the execution, and migrated nothing
    output = "\n".join(launcher.lines)
    assert code == 1, output
    assert f"{execution.id} add-subdomain paused" in output
    assert "alfred_deploy_check failed" in output
    assert "running migrate" not in output and READY not in output
