"""The engine's own cost, beside a bare Celery chain on the same broker and worker and beside
DBOS Transact on the same PostgreSQL server (bench/dbos_peer.py).

- step overhead: the time and SQL transactions one ``ctx.step`` adds (a stage of 200 no-op
  steps, in-process, against a stage of none), and where an empty stage's time goes;
- throughput: ``EXECUTIONS`` no-op workflows of ``STAGES`` stages each, and as many bare
  Celery chains of ``STAGES`` no-op tasks, each batch published while the worker is stopped,
  then drained by a worker of one process per core (and the engine's again by one of two
  per core); timed from the first task to the last;
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
EMPTY = 101
# Worker processes: Celery's default on this machine (one per core), and twice that (stages
# wait on PostgreSQL and on providers more than they compute).
CONCURRENCY = (os.cpu_count() or 2, 2 * (os.cpu_count() or 2))


def _setup() -> tuple[dict[str, str], Any]:
    env, stack = bench_stack("bench-engine", ALFRED_EXTRA_WORKFLOWS="bench.workflows")
    os.environ.update(env)
    import django

    django.setup()
    return env, stack


def _worker(env: dict[str, str], concurrency: int) -> subprocess.Popen[bytes]:
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
            str(concurrency),
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
    """In-process: a stage of STEPS no-op steps against a stage of none; the empty stage's
    time (the median of EMPTY, timed without capturing queries), split into this process's
    CPU, its PostgreSQL backend's CPU and the rest (waiting: commits' flushes, scheduling);
    its statements counted from one more, captured."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from executions.acceptance import execution_accept
    from executions.runtime.runner import stage_execute

    def accepted(steps: int) -> str:
        return str(
            execution_accept(
                workflow_name="bench-steps",
                body={"steps": steps, "n": time.time_ns() % 10**12},
                idempotency_key=f"steps-{time.time_ns()}",
                caller=cli_caller("bench"),
            ).execution.current_run_id
        )

    def timed(run_id: str) -> tuple[float, float, float]:
        wall, cpu, backend = time.perf_counter(), time.process_time(), _backend_cpu()
        stage_execute(run_id, "s0", "bench@local:1")
        return (
            time.perf_counter() - wall,
            time.process_time() - cpu,
            _backend_cpu() - backend,
        )

    def captured(steps: int) -> tuple[float, list[dict[str, Any]]]:
        run_id = accepted(steps)
        with CaptureQueriesContext(connection) as queries:
            elapsed = timed(run_id)[0]
        return elapsed, queries.captured_queries

    captured(5)  # warm-up: the connection, its prepared statements
    many, many_queries = captured(STEPS)
    samples = [timed(accepted(0)) for _ in range(EMPTY)]
    base = sorted(sample[0] for sample in samples)[EMPTY // 2]
    # CPU time is counted in clock ticks (10 ms): the mean over every sample, not one's
    mean = sum(sample[0] for sample in samples) / EMPTY
    python_cpu = sum(sample[1] for sample in samples) / EMPTY
    backend_cpu = sum(sample[2] for sample in samples) / EMPTY
    _, queries = captured(0)
    transactions: list[list[dict[str, Any]]] = []
    for query in queries:
        if query["sql"] == "BEGIN":
            transactions.append([])
        elif transactions and query["sql"] != "COMMIT":
            transactions[-1].append(query)
    many_commits = sum(1 for q in many_queries if q["sql"] == "COMMIT")
    base_commits = sum(1 for q in queries if q["sql"] == "COMMIT")
    return {
        "ms_per_step": (many - base) / STEPS * 1000,
        "transactions_per_step": (many_commits - base_commits) / STEPS,
        "queries_per_step": (len(many_queries) - len(queries)) / STEPS,
        "ms_per_stage": base * 1000,
        "stage_mean_ms": mean * 1000,
        "stage_python_ms": python_cpu * 1000,
        "stage_backend_ms": backend_cpu * 1000,
        "stage_statements": len(queries),
        "stage_transactions": [len(t) for t in transactions],
        "stage_outside": len(queries) - sum(len(t) + 2 for t in transactions),
    }


def _backend_cpu() -> float:
    """CPU seconds of this process's PostgreSQL backend so far (it runs on this machine)."""
    from django.db import connection

    pid = connection.connection.info.backend_pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")  # a server elsewhere (DATABASE_URL)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drain(env: dict[str, str], done: Any, concurrency: int, timeout: float = 600) -> None:
    worker = _worker(env, concurrency)
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


def _engine_throughput(env: dict[str, str], concurrency: int) -> float:
    from django.db.models import Max, Min

    from bench.workflows import STAGES
    from executions.acceptance import execution_accept
    from executions.models import Execution, OutboxEvent

    ids = [
        execution_accept(
            workflow_name="bench-noop",
            body={"n": concurrency * 10**6 + i},  # a new execution each: not one already done
            idempotency_key=f"t{concurrency}-{i}",
            caller=cli_caller("bench"),
        ).execution.id
        for i in range(EXECUTIONS)
    ]
    _drain(
        env,
        lambda: not Execution.objects.filter(pk__in=ids).exclude(status="succeeded").exists(),
        concurrency,
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
    _drain(env, lambda: int(client.get("bench:chains") or 0) == EXECUTIONS, CONCURRENCY[0])
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


# The stage path as it was before the cut of issue 16 (commit 4c9a69d, the same bench on this
# machine): where the time went then, for the report's before and after.
BEFORE = (
    "Before the cut (commit 4c9a69d, the same bench on this machine): an empty stage "
    "11.0 ms in 11 statements and 2 transactions, 8 of its 11 ms waiting on PostgreSQL, "
    "each statement parsed and planned anew (planning about 0.5 ms of a statement's "
    "0.7 ms on the server), each stage ended in one transaction and the next claimed in "
    "another; 27.5 four-stage workflows per second on 2 processes against DBOS's 53.0."
)


def main() -> None:
    env, stack = _setup()
    try:
        steps = _step_overhead()
        engines = {n: _engine_throughput(env, n) for n in CONCURRENCY}
        celery = _celery_throughput(env)
        dbos = _dbos_peer(env)
    finally:
        if stack is not None:
            stack.stop()
    from bench.workflows import STAGES

    few, many = CONCURRENCY
    engine = max(engines.values())
    stage_rest = steps["stage_mean_ms"] - steps["stage_python_ms"] - steps["stage_backend_ms"]
    lines = [
        "# Engine benchmark",
        "",
        f"`python -m bench engine` — real PostgreSQL and Redis on this machine "
        f"({os.cpu_count()} cores), Celery workers of {few} and of {many} processes.",
        "",
        f"## Per step (in-process, a stage of {STEPS} no-op `ctx.step` calls against one of none)",
        "",
        "| ms per step | SQL transactions per step | SQL statements per step "
        "| ms per empty stage |",
        "|---:|---:|---:|---:|",
        f"| {steps['ms_per_step']:.2f} | {steps['transactions_per_step']:.2f} | "
        f"{steps['queries_per_step']:.2f} | {steps['ms_per_stage']:.1f} |",
        "",
        f"Where the empty stage's time goes ({EMPTY} of them; CPU is counted in 10 ms ticks, so "
        f"the split is of their mean, {steps['stage_mean_ms']:.1f} ms): "
        f"{steps['stage_python_ms']:.1f} ms of CPU in this process, "
        f"{steps['stage_backend_ms']:.1f} ms of CPU in its PostgreSQL backend and "
        f"{stage_rest:.1f} ms waiting (the commits' flushes to disk, the round trips). "
        f"{steps['stage_statements']} SQL statements, BEGIN and COMMIT included, in "
        f"{len(steps['stage_transactions'])} transactions of "
        f"{' and '.join(map(str, steps['stage_transactions']))} statements (the claim; the "
        f"completion with the terminal transition) and {steps['stage_outside']} outside them; "
        "each transaction is four round trips: BEGIN, the locked read of the execution and its "
        "run, the rows and the events together (one pipeline), COMMIT. Every hand-written "
        "statement is prepared once per connection.",
        "",
        BEFORE,
        "",
        f"## Throughput ({EXECUTIONS} no-op workflows of {STAGES} stages; as many bare chains "
        f"of {STAGES} no-op tasks)",
        "",
        "| | per second | stages per second |",
        "|---|---:|---:|",
        *(
            f"| Alfred engine, {n} processes | {rate:.1f} executions | {rate * STAGES:.0f} |"
            for n, rate in engines.items()
        ),
        f"| bare Celery chain, {few} processes | {celery:.1f} chains | {celery * STAGES:.0f} |",
        "",
        f"Ratio engine / bare chain at {few} processes: {engines[few] / celery:.2f} (the engine "
        "claims, fences and projects every stage in PostgreSQL and writes its events, each "
        "execution one message whose worker hands it from stage to stage, a stage's end and "
        "the next one's claim in one transaction; the bare chain is a message per task and "
        "does nothing durable).",
        "",
        f"## Beside DBOS Transact {dbos['version']} (same PostgreSQL server, its own process)",
        "",
        "An Alfred step records a receipt as a DBOS step checkpoints its output; an empty "
        "Alfred stage is claimed under a lease and completed with its events, as an empty "
        "DBOS workflow records its start and end; a four-stage Alfred workflow is one Celery "
        "message whose worker process runs its stages one after another, a four-step DBOS "
        "workflow runs on DBOS's executor threads in one process (as many as there are "
        "workflows: all of them at once). Alfred's throughput below is the better of its "
        f"two worker sizes ({few} processes: {engines[few]:.1f}/s; {many}: "
        f"{engines[many]:.1f}/s).",
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
