"""The Helm chart's processes and probes, run for real: the web and worker containers' commands
and environment as `helm template` renders them (ALFRED_ENV=production), against the test
PostgreSQL and Redis, probed as the kubelet would probe them. The rendering itself:
tests/unit/test_helm_chart.py."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from alfred.devstack import free_ports
from alfred.models import WorkerHeartbeat
from tests.conftest import ROOT, subprocess_database_url, wait_for
from tests.unit.test_helm_chart import VALUES_FROM_VALUES, container, one, render


def pod_environment(docs: list[dict[str, Any]], box: dict[str, Any]) -> dict[str, str]:
    """A container's environment as Kubernetes would give it (its env, then its Secret), with
    the Secret's database and broker pointing at the tests' own."""
    secret = one(docs, "Secret", "alfred")
    env = {e["name"]: e["value"] for e in box["env"] if "value" in e}
    env |= {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    env |= {
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        # `python` is the image's interpreter; here, the venv's
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "HOSTNAME": socket.gethostname(),  # a pod's hostname is its name; ours is the machine's
    }
    return env


def log_of(name: str) -> Path:
    return ROOT / ".alfred" / f"deploy-{name}-{os.getpid()}.log"


def start(argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    log = log_of(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stopped_within(proc: subprocess.Popen[bytes], seconds: float) -> float:
    """SIGTERM, as the kubelet sends it; how long the process took to exit (it is SIGKILLed and
    the test fails if it outlives ``seconds``, the pod's grace)."""
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        pytest.fail(f"still running {seconds} s after SIGTERM: past the pod's grace")
    return time.monotonic() - began


def kubelet_get(port: int, probe: dict[str, Any]) -> int:
    """An httpGet probe as the kubelet sends it: to the pod's address, with the probe's headers."""
    get = probe["httpGet"]
    headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
    response = httpx.get(
        f"http://127.0.0.1:{port}{get['path']}", headers=headers, timeout=probe["timeoutSeconds"]
    )
    return response.status_code


def web_pod(*values: str) -> tuple[dict[str, Any], int, subprocess.Popen[bytes]]:
    """The chart's web container run for real on free ports (its own and its metrics'),
    rendered with ``values`` (``--set`` pairs)."""
    port, metrics = free_ports(), free_ports()
    sets = [f"web.port={port}", f"web.metricsPort={metrics}", *values]
    docs = render("-f", str(VALUES_FROM_VALUES), *(a for v in sets for a in ("--set", v)))
    box = container(one(docs, "Deployment", "alfred-web"))
    # the pod listens on every address; here only on loopback
    argv = ["127.0.0.1" if arg == "0.0.0.0" else arg for arg in box["command"]]  # noqa: S104
    return box, port, start(argv, pod_environment(docs, box), "web")


@pytest.fixture
def web(django_db_setup: None) -> Iterator[tuple[dict[str, Any], int, subprocess.Popen[bytes]]]:
    box, port, proc = web_pod()
    yield box, port, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def test_web_pod_passes_its_probes_and_stops_within_its_grace(web):
    box, port, proc = web
    grace = 35

    # when: the startup probe, then liveness and readiness, as the kubelet sends them
    wait_for(lambda: _answers(port, box["startupProbe"]) == 200, timeout=60, interval=0.2)

    # then
    assert kubelet_get(port, box["livenessProbe"]) == 200
    assert kubelet_get(port, box["readinessProbe"]) == 200
    # without the chart's Host header the kubelet's probe would name the pod's address, which
    # production's ALLOWED_HOSTS refuses: the header is what makes the probes pass
    bare = {
        **box["readinessProbe"],
        "httpGet": {**box["readinessProbe"]["httpGet"], "httpHeaders": []},
    }
    assert kubelet_get(port, bare) == 400
    assert stopped_within(proc, grace) < grace


def test_web_pod_serves_metrics_only_on_its_metrics_port_and_believes_no_forwarded_client(web):
    box, port, _ = web
    ports = {p["name"]: p["containerPort"] for p in box["ports"]}
    host = {"Host": "alfred.example.com"}
    wait_for(lambda: _answers(port, box["startupProbe"]) == 200, timeout=60, interval=0.2)

    # when: /metrics is asked for on the web's port (what the Service and Ingress route to),
    # from loopback, an address of ALFRED_METRICS_NETWORKS, with a forwarded address too
    routed = httpx.get(
        f"http://127.0.0.1:{port}/metrics",
        headers={**host, "X-Forwarded-For": "10.42.0.17", "X-Forwarded-Proto": "https"},
        timeout=5,
    )
    # then: not there
    assert routed.status_code == 404, routed.text
    assert routed.headers["content-type"] == "application/problem+json"
    assert routed.json()["code"] == "not_found"
    # and: on the metrics port, which only the pod's network reaches, a scrape is answered
    scraped = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=10)
    assert scraped.status_code == 200 and "alfred_executions" in scraped.text
    # and: a client that names another address is logged at its own (no proxy is declared)
    httpx.get(
        f"http://127.0.0.1:{port}/healthz?forged",
        headers={**host, "X-Forwarded-For": "203.0.113.9"},
        timeout=5,
    )
    wait_for(lambda: "/healthz?forged" in log_of("web").read_text(), timeout=5)
    (line,) = [line for line in log_of("web").read_text().splitlines() if "?forged" in line]
    assert "127.0.0.1" in line and "203.0.113.9" not in line, line


def test_web_pod_believes_the_forwarded_client_from_a_declared_proxy_only(django_db_setup):
    # given: the web pod with loopback declared as its proxy
    box, port, proc = web_pod("alfred.trustedProxies={127.0.0.1}")
    try:
        wait_for(lambda: _answers(port, box["startupProbe"]) == 200, timeout=60, interval=0.2)
        # when: the proxy forwards a client's request
        httpx.get(
            f"http://127.0.0.1:{port}/healthz?forwarded",
            headers={"Host": "alfred.example.com", "X-Forwarded-For": "203.0.113.9"},
            timeout=5,
        )
        wait_for(lambda: "?forwarded" in log_of("web").read_text(), timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    # then: the access line names the client, as the declared proxy said
    (line,) = [line for line in log_of("web").read_text().splitlines() if "?forwarded" in line]
    assert "203.0.113.9" in line, line


def _answers(port: int, probe: dict[str, Any]) -> int:
    try:
        return kubelet_get(port, probe)
    except httpx.HTTPError:
        return 0


def test_worker_pod_answers_its_probes_on_its_port_and_fails_them_once_stopped(
    transactional_db, tmp_path
):
    # given: the chart's worker (one pool process) and its environment, its port and metrics
    # volume mapped to a free port and a directory of the test's
    docs = render("-f", str(VALUES_FROM_VALUES), "--set", "worker.concurrency=1")
    deployment = one(docs, "Deployment", "alfred-worker")
    box = container(deployment)
    port = free_ports()
    env = pod_environment(docs, box) | {
        "ALFRED_WORKER_HTTP_PORT": str(port),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }
    proc = start(box["command"], env, "worker")
    try:
        # when: the probes run as the kubelet runs them
        wait_for(lambda: _answers(port, box["startupProbe"]) == 200, timeout=60, interval=0.2)
        # then: ready once it consumed its first heartbeat, alive, and it counts
        wait_for(lambda: _answers(port, box["readinessProbe"]) == 200, timeout=30, interval=0.5)
        assert kubelet_get(port, box["livenessProbe"]) == 200
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert scraped.status_code == 200 and "alfred_" in scraped.text
        name = f"worker@{socket.gethostname()}"
        assert WorkerHeartbeat.objects.filter(worker=name).exists()
        # SIGTERM (a warm shutdown with nothing running) ends it within the grace, and takes
        # its heartbeat along (it did not stop consuming: it left)
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert stopped_within(proc, grace) < grace
        assert not WorkerHeartbeat.objects.filter(worker=name).exists()
        # and a worker that is gone fails the probe
        assert _answers(port, box["livenessProbe"]) != 200
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _probe_passes(probe: dict[str, Any], env: dict[str, str]) -> bool:
    """An exec probe as the kubelet runs it: inside the container, zero is a pass."""
    done = subprocess.run(
        probe["exec"]["command"], env=env, capture_output=True, timeout=probe["timeoutSeconds"]
    )
    return done.returncode == 0


def test_beat_pod_passes_its_probes_while_it_ticks_and_fails_them_once_stuck(
    transactional_db, tmp_path
):
    # given: the chart's beat, its command and environment, its alive file in a directory of
    # the test's (the pod's /tmp is its own; here the probe's path is pointed at it)
    docs = render("-f", str(VALUES_FROM_VALUES))
    deployment = one(docs, "Deployment", "alfred-beat")
    box = container(deployment)
    chart_file = pod_environment(docs, box)["ALFRED_BEAT_ALIVE_FILE"]
    alive = tmp_path / "alfred-beat.alive"
    env = pod_environment(docs, box) | {"ALFRED_BEAT_ALIVE_FILE": str(alive)}
    argv = [
        str(tmp_path / "schedule") if a.endswith("celerybeat-schedule") else a
        for a in box["command"]
    ]
    probes = {
        kind: {
            **box[kind],
            "exec": {
                "command": [a.replace(chart_file, str(alive)) for a in box[kind]["exec"]["command"]]
            },
        }
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    # before beat ever ticked, the startup probe fails
    assert not _probe_passes(probes["startupProbe"], env)
    proc = start(argv, env, "beat")
    try:
        # when: it runs, the probes pass
        wait_for(lambda: _probe_passes(probes["startupProbe"], env), timeout=60, interval=0.5)
        assert _probe_passes(probes["livenessProbe"], env)
        assert _probe_passes(probes["readinessProbe"], env)
        # when: its loop stops (frozen) and a minute passes without a tick (the file's age,
        # set back rather than waited for)
        os.killpg(proc.pid, signal.SIGSTOP)
        past = time.time() - 61
        os.utime(alive, (past, past))
        time.sleep(2)  # longer than a tick (a fifth of the 5 s lease)
        # then: liveness and readiness fail
        assert not _probe_passes(probes["livenessProbe"], env)
        assert not _probe_passes(probes["readinessProbe"], env)
        # and once it turns again, they pass again
        os.killpg(proc.pid, signal.SIGCONT)
        wait_for(lambda: _probe_passes(probes["livenessProbe"], env), timeout=15, interval=0.5)
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert stopped_within(proc, grace) < grace
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_web_pod_with_several_uvicorn_processes_serves_metrics_from_one(transactional_db):
    # given: the web pod run with two uvicorn worker processes sharing the metrics port
    command = "python,-m,uvicorn,alfred.asgi:application,--host,0.0.0.0,--lifespan,on"
    box, port, proc = web_pod(f"web.command={{{command},--no-proxy-headers,--workers=2}}")
    metrics = next(p["containerPort"] for p in box["ports"] if p["name"] == "metrics")
    try:
        # when: both have started
        wait_for(lambda: log_of("web").read_text().count("Application startup complete") == 2)
        # then: one serves the metrics, the other says it does not, and both answer
        log = log_of("web").read_text()
        assert "Application startup failed" not in log, log
        assert log.count(f"/metrics not served on port {metrics}") == 1, log
        scraped = httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=10)
        assert scraped.status_code == 200
        for _ in range(4):
            assert _answers(port, box["livenessProbe"]) == 200
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
