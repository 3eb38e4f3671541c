"""End to end over HTTP: a no-op workflow of four stages (``bench-noop``) accepted by the
production ASGI app (uvicorn) and carried to its terminal state by a Celery worker, on the
embedded PostgreSQL and Redis, all on this machine.

- **Steady**: ``RATE`` acceptances a second for ``SECONDS`` seconds, each request sent when
  it is due (``CLIENTS`` keep-alive clients; a request's time counts from when it was due, so
  a client held up does not hide the wait of those behind it). Accept → terminal is from
  that due time to the execution's ``finished_at``: p50, p99 and max.
- **Ten times**: ``10 × RATE`` offered for ``TENFOLD_SECONDS`` seconds, the same way: what
  the stack accepted and finished per second, the backlog it built, where the machine's CPU
  went (web, worker, PostgreSQL, Redis, the clients), PostgreSQL's commits per second, and
  which limit it met.

Writes bench/reports/end_to_end.md and prints it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alfred.devstack import free_ports
from bench.acceptance import _children, _Client, _cpu_seconds, _postmaster
from bench.events import _wait_ready
from bench.stack import bench_stack, bench_token

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "end_to_end.md"
RATE = float(os.environ.get("BENCH_RATE", "50"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "20"))
TENFOLD_SECONDS = int(os.environ.get("BENCH_TENFOLD_SECONDS", "10"))
CLIENTS = 16
WEB_WORKERS = int(os.environ.get("WEB_CONCURRENCY", "2"))
WORKER_PROCESSES = int(os.environ.get("BENCH_WORKER_PROCESSES", "4"))
CORES = os.cpu_count() or 1


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _process(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL
    )


def _cpu(pid: int) -> float:
    return sum(_cpu_seconds(p) for p in [pid, *_children(pid)])


class _Machine:
    """CPU seconds so far of each part of the stack, and PostgreSQL's commits."""

    def __init__(self, web: int, worker: int, postmaster: int, redis: int | None) -> None:
        self.web, self.worker, self.postmaster, self.redis = web, worker, postmaster, redis

    def read(self) -> dict[str, float]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
            (commits,) = cursor.fetchone()
        parts = {
            "web": _cpu(self.web),
            "worker": _cpu(self.worker),
            "postgres": sum((_cpu_seconds(p) for p in _children(self.postmaster)), 0.0),
            "redis": _cpu_seconds(self.redis) if self.redis else 0.0,
            "clients": time.process_time(),
        }
        return {**parts, "commits": float(commits), "at": time.monotonic()}


def _offer(port: int, token: str, rate: float, seconds: int) -> list[dict[str, Any]]:
    """``rate`` acceptances a second for ``seconds``, each sent when due: per request, its
    due time (epoch), how long its answer took, and the execution it made."""
    local = threading.local()
    tag = uuid.uuid4().hex[:8]
    first = time.time_ns() // 1000  # a new input each: not an execution done already

    def send(i: int, due: float) -> dict[str, Any]:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = _Client(port, token)
        status, body = client.post("bench-noop", {"n": i}, f"e2e-{tag}-{i}")
        answered = time.time()
        if status != 202:
            raise RuntimeError(f"{status}: {body[:300]!r}")
        return {"due": due, "answer_ms": (answered - due) * 1000, "id": json.loads(body)["id"]}

    count = int(rate * seconds)
    start = time.time() + 0.2
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = []
        for i in range(count):
            due = start + i / rate
            pause = due - time.time()
            if pause > 0:
                time.sleep(pause)
            futures.append(pool.submit(send, first + i, due))
        return [future.result() for future in futures]


def _finished(requests: list[dict[str, Any]], timeout: float) -> list[float]:
    """Accept → terminal, ms, of each request's execution, once every one has ended."""
    from executions.models import TERMINAL_STATUSES, Execution

    ids = [r["id"] for r in requests]
    deadline = time.monotonic() + timeout
    while Execution.objects.filter(pk__in=ids).exclude(status__in=TERMINAL_STATUSES).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the executions did not all end in time")
        time.sleep(0.5)
    ended = {
        execution_id: finished.timestamp()
        for execution_id, finished in Execution.objects.filter(pk__in=ids).values_list(
            "id", "finished_at"
        )
        if finished is not None
    }
    statuses = set(Execution.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {"succeeded"}, statuses
    return [(ended[r["id"]] - r["due"]) * 1000 for r in requests]


def _ended_since(since: float) -> int:
    from executions.models import Execution

    moment = datetime.fromtimestamp(since, tz=UTC)
    return Execution.objects.filter(finished_at__gte=moment, workflow="bench-noop").count()


def _phase(machine: _Machine, port: int, token: str, rate: float, seconds: int) -> dict[str, Any]:
    before = machine.read()
    started = time.time()
    requests = _offer(port, token, rate, seconds)
    offered_for = time.time() - started
    at_end = machine.read()
    ended_by_then = _ended_since(started)
    latencies = _finished(requests, timeout=600)
    after = machine.read()
    drained_for = after["at"] - before["at"]
    return {
        "rate": rate,
        "count": len(requests),
        "offered_for": offered_for,
        "accepted_per_second": len(requests) / offered_for,
        "answer_ms": [r["answer_ms"] for r in requests],
        "latency_ms": latencies,
        "backlog": len(requests) - ended_by_then,
        "ended_per_second_while_offered": ended_by_then / offered_for,
        "drained_for": drained_for,
        "cpu_while_offered": {
            part: (at_end[part] - before[part]) / (at_end["at"] - before["at"])
            for part in ("web", "worker", "postgres", "redis", "clients")
        },
        "commits_per_second": (at_end["commits"] - before["commits"])
        / (at_end["at"] - before["at"]),
    }


def main() -> None:
    env, stack = bench_stack("bench-e2e", ALFRED_EXTRA_WORKFLOWS="bench.workflows")
    os.environ.update(env)
    import django

    django.setup()
    port = free_ports()
    env["ALFRED_PUBLIC_URL"] = f"http://127.0.0.1:{port}"
    web = worker = None
    try:
        token = bench_token(env, "integration")
        web = _process(
            env,
            "uvicorn",
            "alfred.asgi:application",
            "--port",
            str(port),
            "--workers",
            str(WEB_WORKERS),
            "--lifespan",
            "on",
            "--log-level",
            "warning",
            "--no-access-log",
        )
        worker = _process(
            env,
            "celery",
            "-A",
            "alfred",
            "worker",
            "-Q",
            "stages,celery",
            "--concurrency",
            str(WORKER_PROCESSES),
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "WARNING",
            "-n",
            "e2e@%h",
        )
        _wait_ready(f"http://127.0.0.1:{port}")
        redis = stack._redis.pid if stack is not None and stack._redis is not None else None
        machine = _Machine(web.pid, worker.pid, _postmaster(env), redis)
        _phase(machine, port, token, RATE, 3)  # warm-up: connections, prepared statements
        steady = _phase(machine, port, token, RATE, SECONDS)
        tenfold = _phase(machine, port, token, 10 * RATE, TENFOLD_SECONDS)
    finally:
        for process in (worker, web):
            if process is not None:
                process.terminate()
                process.wait(30)
        if stack is not None:
            stack.stop()
    lines = _report(steady, tenfold)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))


def _limit(phase: dict[str, Any]) -> str:
    """Which limit the ten-fold load met, from what it measured."""
    cpu = phase["cpu_while_offered"]
    busy = sum(cpu.values())
    heaviest = max(cpu, key=lambda part: cpu[part])
    accepted, offered = phase["accepted_per_second"], phase["rate"]
    said = []
    if accepted < 0.95 * offered:
        said.append(
            f"acceptance fell behind the offered rate ({accepted:.0f}/s of {offered:.0f}/s)"
        )
    if phase["ended_per_second_while_offered"] < 0.95 * accepted:
        said.append(
            f"the worker fell behind acceptance (it finished "
            f"{phase['ended_per_second_while_offered']:.0f}/s while {accepted:.0f}/s were "
            f"accepted; {phase['backlog']:,} were waiting when the offer ended)"
        )
    machine = (
        f"the machine's CPU: {busy:.2f} of its {CORES} cores were busy, {cpu[heaviest]:.2f} "
        f"of them in the {heaviest}"
    )
    if busy >= 0.9 * CORES:
        return f"{'; '.join(said) or 'nothing fell behind'}: the limit it met is {machine}."
    return f"{'; '.join(said) or 'nothing fell behind'}; {machine}."


def _report(steady: dict[str, Any], tenfold: dict[str, Any]) -> list[str]:
    def row(name: str, phase: dict[str, Any], key: str) -> str:
        samples = phase[key]
        return (
            f"| {name} | {statistics.median(samples):.1f} | {_percentile(samples, 0.99):.1f} | "
            f"{max(samples):.1f} |"
        )

    cpu = tenfold["cpu_while_offered"]
    steady_cpu = steady["cpu_while_offered"]
    return [
        "# End to end: accept → terminal over HTTP",
        "",
        f"`python -m bench end_to_end` — uvicorn ({WEB_WORKERS} processes, the production ASGI "
        f"app), a Celery worker of {WORKER_PROCESSES} processes, the embedded PostgreSQL (fsync "
        f"on) and Redis, and the clients, all on this machine ({CORES} cores). A no-op "
        "workflow of four stages (`bench-noop`), each request sent when due by one of "
        f"{CLIENTS} keep-alive clients; a latency counts from when its request was due.",
        "",
        f"## Steady: {RATE:.0f} a second for {SECONDS} s ({steady['count']:,} executions)",
        "",
        "| ms | p50 | p99 | max |",
        "|---|---:|---:|---:|",
        row("accept → terminal", steady, "latency_ms"),
        row("accept (the 202's answer)", steady, "answer_ms"),
        "",
        f"The machine meanwhile: {sum(steady_cpu.values()):.2f} of {CORES} cores busy (web "
        f"{steady_cpu['web']:.2f}, worker {steady_cpu['worker']:.2f}, PostgreSQL "
        f"{steady_cpu['postgres']:.2f}, Redis {steady_cpu['redis']:.2f}, clients "
        f"{steady_cpu['clients']:.2f}); PostgreSQL committed "
        f"{steady['commits_per_second']:.0f} transactions a second.",
        "",
        f"## Ten times: {tenfold['rate']:.0f} a second offered for {TENFOLD_SECONDS} s",
        "",
        "| | |",
        "|---|---:|",
        f"| accepted per second | {tenfold['accepted_per_second']:.0f} |",
        f"| finished per second while offered | {tenfold['ended_per_second_while_offered']:.0f} |",
        f"| waiting when the offer ended | {tenfold['backlog']:,} |",
        f"| all {tenfold['count']:,} finished after | {tenfold['drained_for']:.1f} s |",
        f"| PostgreSQL commits per second | {tenfold['commits_per_second']:.0f} |",
        "",
        "| ms | p50 | p99 | max |",
        "|---|---:|---:|---:|",
        row("accept → terminal", tenfold, "latency_ms"),
        row("accept (the 202's answer)", tenfold, "answer_ms"),
        "",
        "Cores busy while it was offered: "
        + ", ".join(f"{part} {cpu[part]:.2f}" for part in cpu)
        + f" (of {CORES}).",
        "",
        f"**The limit it met**: {_limit(tenfold)} docs/scaling.md turns these figures into "
        "the capacity of one PostgreSQL primary and what to add past it.",
        "",
    ]
