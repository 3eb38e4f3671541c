"""The engine's own cost, beside a bare Celery chain on the same broker and worker and beside
DBOS Transact on the same PostgreSQL server (bench/dbos_peer.py).

- step overhead: the time and SQL transactions one ``ctx.step`` adds (a stage of 200 no-op
  steps, in-process, against a stage of none);
- throughput: ``EXECUTIONS`` no-op workflows of ``STAGES`` stages each, and as many bare
  Celery chains of ``STAGES`` no-op tasks, each batch published while the worker is stopped,
  then drained by the same worker (2 processes); timed from the first task to the last;
- the peer: DBOS Transact's ms per step, per empty workflow, and four-step workflows per
  second, measured in its own process against its own system database on the same server.

Writes bench/reports/engine.md and prints it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from alfred.principals import cli_caller
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "engine.md"
EXECUTIONS = int(os.environ.get("BENCH_EXECUTIONS", "300"))
STEPS = 200
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "2"))


def _setup() -> tuple[dict[str, str], Any]:
    env, stack = bench_stack("bench-engine", ALFRED_EXTRA_WORKFLOWS="bench.workflows")
    os.environ.update(env)
    import django

    django.setup()
    return env, stack


def _worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "alfred",
            "worker",
            "-Q",
            "stages,celery",
            "--concurrency",
            str(CONCURRENCY),
            "--include",
            "bench.tasks",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "WARNING",
            "-n",
            "bench@%h",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    worker.wait(30)


def _step_overhead() -> dict[str, Any]:
    """In-process: a stage of STEPS no-op steps against a stage of none."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from executions.acceptance import execution_accept
    from executions.engine.runner import stage_execute

    def run(steps: int) -> tuple[float, int, int]:
        elapsed, queries = timed(steps)
        commits = sum(1 for q in queries if q["sql"] == "COMMIT")
        return elapsed, len(queries), commits

    def timed(steps: int) -> tuple[float, list[dict[str, Any]]]:
        execution = execution_accept(
            workflow_name="bench-steps",
            body={"steps": steps, "n": time.time_ns() % 10**12},
            idempotency_key=f"steps-{time.time_ns()}",
            caller=cli_caller("bench"),
        ).execution
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            stage_execute(str(execution.current_run_id), "s0", "bench@local:1")
            elapsed = time.perf_counter() - start
        return elapsed, queries.captured_queries

    run(5)  # warm-up
    many, many_queries, many_commits = run(STEPS)
    # The empty stage: the median of 21, and where its statements go, transaction by
    # transaction (the claim; the completion, here with the terminal transition).
    empties = sorted((timed(0) for _ in range(21)), key=lambda sample: sample[0])
    base, queries = empties[10]
    base_commits = sum(1 for q in queries if q["sql"] == "COMMIT")
    transactions: list[list[dict[str, Any]]] = []
    for query in queries:
        if query["sql"] == "BEGIN":
            transactions.append([])
        elif transactions and query["sql"] != "COMMIT":
            transactions[-1].append(query)
    return {
        "ms_per_step": (many - base) / STEPS * 1000,
        "transactions_per_step": (many_commits - base_commits) / STEPS,
        "queries_per_step": (many_queries - len(queries)) / STEPS,
        "ms_per_stage": base * 1000,
        "stage_statements": len(queries),
        "stage_transactions": [len(t) for t in transactions],
        "stage_outside": len(queries) - sum(len(t) + 2 for t in transactions),
        "stage_db_ms": sum(float(q["time"]) for q in queries) * 1000,
    }


def _drain(env: dict[str, str], done: Any, timeout: float = 600) -> None:
    worker = _worker(env)
    try:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not drain the queue in time")
            # The figures come from the rows' and the counters' own timestamps, so the poll
            # may be slow: a fast one would take CPU from the worker it measures.
            time.sleep(0.5)
    finally:
        _stop(worker)


def _engine_throughput(env: dict[str, str]) -> float:
    from django.db.models import Max, Min

    from bench.workflows import STAGES
    from executions.acceptance import execution_accept
    from executions.models import Execution, OutboxEvent

    ids = [
        execution_accept(
            workflow_name="bench-noop",
            body={"n": i},
            idempotency_key=f"t{i}",
            caller=cli_caller("bench"),
        ).execution.id
        for i in range(EXECUTIONS)
    ]
    _drain(
        env, lambda: not Execution.objects.filter(pk__in=ids).exclude(status="succeeded").exists()
    )
    span = (
        OutboxEvent.objects.filter(execution_id__in=ids)
        .exclude(type="execution.accepted")
        .aggregate(first=Min("created_at"), last=Max("created_at"))
    )
    seconds = (span["last"] - span["first"]).total_seconds()
    assert STAGES
    return EXECUTIONS / seconds


def _celery_throughput(env: dict[str, str]) -> float:
    from celery import chain, current_app

    from bench.tasks import timing_client
    from bench.workflows import STAGES

    client = timing_client()
    client.flushdb()
    for _ in range(EXECUTIONS):
        chain(
            *(
                current_app.signature(
                    "bench.tasks.noop", args=[i, STAGES], queue="stages", immutable=True
                )
                for i in range(STAGES)
            )
        ).apply_async()
    _drain(env, lambda: int(client.get("bench:chains") or 0) == EXECUTIONS)
    first, last = client.get("bench:first"), client.get("bench:last")
    return EXECUTIONS / (float(last or 0) - float(first or 0))


def _dbos_peer(env: dict[str, str]) -> dict[str, Any]:
    """DBOS Transact's figures (bench/dbos_peer.py), in a process of its own, against a system
    database of its own on the benchmark's PostgreSQL server."""
    url = urlsplit(env["DATABASE_URL"])
    system = urlunsplit(url._replace(path="/dbos_bench_peer"))
    done = subprocess.run(
        [sys.executable, "-m", "bench.dbos_peer", system],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    env, stack = _setup()
    try:
        steps = _step_overhead()
        engine = _engine_throughput(env)
        celery = _celery_throughput(env)
        dbos = _dbos_peer(env)
    finally:
        if stack is not None:
            stack.stop()
    from bench.workflows import STAGES

    lines = [
        "# Engine benchmark",
        "",
        f"`python -m bench engine` — real PostgreSQL and Redis on this machine "
        f"({os.cpu_count()} cores), one Celery worker with {CONCURRENCY} processes.",
        "",
        f"## Per step (in-process, a stage of {STEPS} no-op `ctx.step` calls against one of none)",
        "",
        "| ms per step | SQL transactions per step | SQL statements per step "
        "| ms per empty stage |",
        "|---:|---:|---:|---:|",
        f"| {steps['ms_per_step']:.2f} | {steps['transactions_per_step']:.2f} | "
        f"{steps['queries_per_step']:.2f} | {steps['ms_per_stage']:.1f} |",
        "",
        f"Where the empty stage's time goes (the median of 21): {steps['stage_statements']} SQL "
        f"statements, BEGIN and COMMIT included, in {len(steps['stage_transactions'])} "
        f"transactions of {' and '.join(map(str, steps['stage_transactions']))} statements "
        f"(the claim; the completion with the terminal transition) and "
        f"{steps['stage_outside']} outside them; {steps['stage_db_ms']:.1f} ms of the "
        f"{steps['ms_per_stage']:.1f} ms waiting on PostgreSQL (and in the driver), the rest "
        "in Python (the stage's context, its lease heartbeat, the events' payloads).",
        "",
        f"## Throughput ({EXECUTIONS} no-op workflows of {STAGES} stages; as many bare chains "
        f"of {STAGES} no-op tasks)",
        "",
        "| | per second | stages per second |",
        "|---|---:|---:|",
        f"| Alfred engine | {engine:.1f} executions | {engine * STAGES:.0f} |",
        f"| bare Celery chain | {celery:.1f} chains | {celery * STAGES:.0f} |",
        "",
        f"Ratio engine / bare chain: {engine / celery:.2f} (the engine claims, fences and "
        "projects every stage in PostgreSQL and writes its events, each execution one message "
        "whose worker hands it from stage to stage; the bare chain is a message per task and "
        "does nothing durable).",
        "",
        f"## Beside DBOS Transact {dbos['version']} (same PostgreSQL server, its own process)",
        "",
        "An Alfred step records a receipt as a DBOS step checkpoints its output; an empty "
        "Alfred stage is claimed under a lease and completed with its events, as an empty "
        "DBOS workflow records its start and end; a four-stage Alfred workflow is one Celery "
        "message whose worker runs its stages one after another (2 worker processes), a "
        "four-step DBOS workflow runs on DBOS's executor threads in one process.",
        "",
        "| | Alfred | DBOS | Alfred / DBOS |",
        "|---|---:|---:|---:|",
        f"| ms per step | {steps['ms_per_step']:.2f} | {dbos['ms_per_step']:.2f} | "
        f"{steps['ms_per_step'] / dbos['ms_per_step']:.2f} |",
        f"| ms per empty stage / workflow | {steps['ms_per_stage']:.1f} | "
        f"{dbos['ms_per_empty_workflow']:.1f} | "
        f"{steps['ms_per_stage'] / dbos['ms_per_empty_workflow']:.2f} |",
        f"| {STAGES}-stage / {STAGES}-step workflows per second | {engine:.1f} | "
        f"{dbos['four_step_per_second']:.1f} | {engine / dbos['four_step_per_second']:.2f} |",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
