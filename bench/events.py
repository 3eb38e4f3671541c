"""Events: SSE latency from commit to client, and webhook delivery throughput.

- SSE: one uvicorn process (the production ASGI app); ``CLIENTS`` clients (another process,
  raw asyncio sockets so that the clients' own parsing costs little) follow
  ``GET /api/v1/events/stream`` as an operator, so every event goes to every client. This
  process commits ``EVENTS`` events, one transaction each, ``1/RATE`` s apart, and notes the
  wall clock right after each COMMIT returns; each client notes when the event's ``id:``
  line arrived. Latency = arrival − commit, over every (event, client) pair. Also: the
  web process's LISTEN connections (pg_stat_activity), which must be 1.
- Webhooks: ``HOOK_EVENTS`` events owed to one endpoint, a local receiver (a threaded
  http.server that verifies nothing: the relay's cost is measured, not the receiver's), one
  Celery worker on the ``webhooks`` queue; throughput = events / (last delivered − first
  committed), as the database records them.

Writes bench/reports/events.md and prints it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from alfred.devstack import free_ports
from bench.acceptance import _percentile
from bench.stack import bench_stack, bench_token

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "events.md"
CLIENTS = int(os.environ.get("BENCH_SSE_CLIENTS", "200"))
EVENTS = int(os.environ.get("BENCH_SSE_EVENTS", "1000"))
RATE = float(os.environ.get("BENCH_SSE_RATE", "100"))  # events per second
HOOK_EVENTS = int(os.environ.get("BENCH_WEBHOOK_EVENTS", "2000"))

CLIENT_CODE = r"""
import asyncio, sys, time
port, token, out = sys.argv[1], sys.argv[2], sys.argv[5]
clients, events = int(sys.argv[3]), int(sys.argv[4])

async def client(index, connected, results):
    reader, writer = await asyncio.open_connection("127.0.0.1", int(port), limit=2**20)
    writer.write((f"GET /api/v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n").encode())
    await writer.drain()
    seen = 0
    while True:
        line = await reader.readline()
        if not line:
            break
        if line.startswith(b"retry:"):
            connected.append(index)
        elif line.startswith(b"id: "):
            results.append((line[4:].strip().decode(), time.time()))
            seen += 1
            if seen >= events:
                break
    writer.close()

async def main():
    connected, results = [], []
    tasks = [asyncio.create_task(client(i, connected, results)) for i in range(clients)]
    while len(connected) < clients:
        await asyncio.sleep(0.05)
    print("connected", flush=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    with open(out, "w") as f:
        for event_id, at in results:
            f.write(f"{event_id} {at}\n")

asyncio.run(main())
"""


def _wait_ready(base: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("web did not become ready")
        time.sleep(0.2)


def _django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


def _an_execution() -> Any:
    from executions.models import Execution

    return Execution.objects.create(
        workflow="add-subdomain",
        input={"zone": "bench.example", "subdomain": uuid.uuid4().hex[:10]},
        logical_identity=uuid.uuid4().hex,
        principal="prn_bench",
        status="running",
    )


def _emit(execution_id: str) -> tuple[str, float]:
    from django.db import connection, transaction

    from executions.events import EventType
    from executions.outbox import event_emit

    with transaction.atomic():
        event_emit(
            execution_id=execution_id,
            type=EventType.ASSISTANCE,
            key=f"{execution_id}:{uuid.uuid4().hex}",
            payload={"kind": "bench", "n": 1},
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_current_xact_id()::text::bigint, "
                "currval(pg_get_serial_sequence('executions_outboxevent', 'id'))"
            )
            txid, event_id = cursor.fetchone()
    return f"{txid}-{event_id}", time.time()


def _sse(env: dict[str, str], base: str, port: int, token: str) -> dict[str, Any]:
    from django.db import connection

    executions = [_an_execution() for _ in range(10)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "arrivals.txt"
        clients = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLIENT_CODE,
                str(port),
                token,
                str(CLIENTS),
                str(EVENTS),
                str(out),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert clients.stdout is not None
        if clients.stdout.readline().strip() != "connected":
            raise RuntimeError("the SSE clients did not connect")
        time.sleep(1.0)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN alfred_events'"
            )
            listening = cursor.fetchone()[0]
        committed: dict[str, float] = {}
        interval = 1.0 / RATE
        next_at = time.monotonic()
        for i in range(EVENTS):
            cursor_id, at = _emit(executions[i % len(executions)].id)
            committed[cursor_id] = at
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        clients.wait(600)
        arrivals = [line.split() for line in out.read_text().splitlines()]
    latencies = [(float(at) - committed[event_id]) * 1000 for event_id, at in arrivals]
    return {
        "listening": listening,
        "samples": len(latencies),
        "expected": CLIENTS * EVENTS,
        "p50": _percentile(latencies, 0.50),
        "p90": _percentile(latencies, 0.90),
        "p99": _percentile(latencies, 0.99),
        "max": max(latencies),
        "mean": statistics.fmean(latencies),
    }


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _webhooks(env: dict[str, str]) -> dict[str, Any]:
    from django.db.models import Max, Min

    from alfred.principals import Caller
    from delivery.endpoints import webhook_endpoint_save
    from executions.models import (
        DeliveryStatus,
        WebhookAttempt,
        WebhookDelivery,
        WebhookEndpoint,
    )

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    sink.daemon_threads = True
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = WebhookEndpoint(url=f"http://127.0.0.1:{sink.server_address[1]}/hook")
    webhook_endpoint_save(endpoint, caller=Caller("prn_bench", "operator", "bench"))
    # The backlog first (a receiver that was away, a relay that was down), then the relay:
    # its drain rate is the throughput, not the speed this process commits at.
    execution = _an_execution()
    for _ in range(HOOK_EVENTS):
        _emit(execution.id)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "alfred",
            "worker",
            "-Q",
            "webhooks",
            "--concurrency",
            "2",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "WARNING",
            "--beat",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 600
        owed = WebhookDelivery.objects.filter(endpoint=endpoint)
        while owed.filter(status=DeliveryStatus.DELIVERED).count() < HOOK_EVENTS:
            if time.monotonic() > deadline:
                raise RuntimeError("the webhooks were not delivered in time")
            time.sleep(0.25)
        first = WebhookAttempt.objects.filter(delivery__endpoint=endpoint).aggregate(
            first=Min("created_at")
        )["first"]
        last = owed.aggregate(last=Max("delivered_at"))["last"]
        seconds = (last - first).total_seconds()
        attempts = WebhookAttempt.objects.filter(delivery__endpoint=endpoint).count()
    finally:
        worker.terminate()
        worker.wait(30)
        sink.shutdown()
    return {
        "events": HOOK_EVENTS,
        "seconds": seconds,
        "attempts": attempts,
        "rate": HOOK_EVENTS / seconds,
    }


def main() -> None:
    env, stack = bench_stack(
        "bench-events",
        ALFRED_WEBHOOK_ALLOW_PRIVATE="1",
        ALFRED_SSE_CLIENT_BUFFER="100000",
    )
    port = free_ports()
    base = f"http://127.0.0.1:{port}"
    env["ALFRED_PUBLIC_URL"] = base
    web = None
    try:
        token = bench_token(env, "operator")
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "alfred.asgi:application",
                "--port",
                str(port),
                "--lifespan",
                "on",
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
        )
        _wait_ready(base)
        _django(env)
        sse = _sse(env, base, port, token)
        hooks = _webhooks(env)
    finally:
        if web is not None:
            web.terminate()
            web.wait(20)
        if stack is not None:
            stack.stop()

    lines = [
        "# Events benchmark",
        "",
        "`python -m bench events` — one uvicorn process, real PostgreSQL and Redis on this "
        "machine (2 cores), clients on the same machine.",
        "",
        f"## SSE: commit to client, {CLIENTS} clients on `GET /api/v1/events/stream`",
        "",
        f"{EVENTS} events at {RATE:.0f}/s, each to every client: {sse['samples']} arrivals "
        f"(expected {sse['expected']}). LISTEN connections of the web process: "
        f"{sse['listening']}.",
        "",
        "| p50 ms | p90 ms | p99 ms | max ms | mean ms |",
        "|---:|---:|---:|---:|---:|",
        f"| {sse['p50']:.1f} | {sse['p90']:.1f} | {sse['p99']:.1f} | {sse['max']:.1f} "
        f"| {sse['mean']:.1f} |",
        "",
        "Target: p99 < 100 ms.",
        "",
        "## Webhooks: delivery throughput to a local receiver",
        "",
        f"A backlog of {hooks['events']} events owed to one endpoint, drained by one worker "
        f"(2 processes) on the `webhooks` queue: {hooks['seconds']:.1f} s from the first "
        f"attempt to the last delivery, **{hooks['rate']:.0f} deliveries/s** "
        f"({hooks['attempts']} attempts: each delivered once).",
        "",
    ]
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
