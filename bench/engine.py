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
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from alfred.principals import cli_caller
from bench import engine_profile
from bench.dbos_peer import EMPTY as EMPTY_DBOS
from bench.dbos_peer import POLL as DBOS_POLL
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "engine.md"
EXECUTIONS = int(os.environ.get("BENCH_EXECUTIONS", "600"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
STEPS = 200
EMPTY = 101
FLOOR = 200
# DBOS's settings: its queue at these many workflows in flight ("all": no limit), polled as
# often as bench/dbos_peer.py says.
DBOS_IN_FLIGHT = ("2", "4", "16", "all")
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
    inside = False
    for query in queries:
        if query["sql"] in ("BEGIN", "COMMIT"):
            inside = query["sql"] == "BEGIN"
            transactions += [[]] if inside else []
        elif inside:
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


def _engine_throughput(env: dict[str, str], concurrency: int, tag: int = 0) -> float:
    """``EXECUTIONS`` no-op workflows accepted while no worker runs (untimed), then drained by
    a worker of ``concurrency`` processes: executions per second from the first stage's
    event to the last one's (the rows' own timestamps). ``tag`` tells rounds apart."""
    from django.db.models import Max, Min

    from executions.acceptance import execution_accept
    from executions.models import Execution, OutboxEvent

    ids = [
        execution_accept(
            workflow_name="bench-noop",
            # a new execution each, not one done already: its input differs
            body={"n": (tag * 100 + concurrency) * 10**6 + i},
            idempotency_key=f"t{concurrency}-{tag}-{i}",
            caller=cli_caller(f"bench-{concurrency}-{tag}"),
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
    return EXECUTIONS / (span["last"] - span["first"]).total_seconds()


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


def _dbos_peer(env: dict[str, str], *args: str) -> dict[str, Any]:
    """One of DBOS Transact's measurements (bench/dbos_peer.py), in a process of its own,
    against a new system database of its own on the benchmark's PostgreSQL server: a DBOS
    application polls every queue its system database declares, so one database kept from
    measurement to measurement would have each poll the queues of all the runs before."""
    url = urlsplit(env["DATABASE_URL"])
    system = urlunsplit(url._replace(path=f"/dbos_bench_{uuid.uuid4().hex[:12]}"))
    done = subprocess.run(
        [sys.executable, "-m", "bench.dbos_peer", args[0], system, *args[1:]],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _floor() -> dict[str, float]:
    """The server's floor, from this process through psycopg as the engine talks to it: one
    round trip (``SELECT 1``) and one commit that writes (``BEGIN; INSERT; COMMIT``, each
    flushed to disk: fsync is on), the median of ``FLOOR`` each, in ms."""
    from django.db import connection

    def median_ms(statements: list[str]) -> float:
        samples = []
        with connection.cursor() as cursor:
            for _ in range(FLOOR):
                start = time.perf_counter()
                for statement in statements:
                    cursor.execute(statement)
                samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial, at timestamptz)")
    return {
        "round_trip": median_ms(["SELECT 1"]),
        "commit": median_ms(["BEGIN", "INSERT INTO bench_floor (at) VALUES (now())", "COMMIT"]),
    }


@contextmanager
def _loaded() -> Iterator[None]:
    """The machine loaded by other work: a process spinning on one core (of ``cpu_count``)
    for as long as the block runs, at the same priority as both sides."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _spread(samples: list[float], digits: int = 1) -> str:
    low, mid, high = min(samples), statistics.median(samples), max(samples)
    return f"{low:.{digits}f} / **{mid:.{digits}f}** / {high:.{digits}f}"


def _throughputs(env: dict[str, str], tag: int) -> dict[str, float]:
    """Each side at each of its settings, once, executions (workflows) per second."""
    figures = {f"alfred-{n}": _engine_throughput(env, n, tag) for n in CONCURRENCY}
    for in_flight in DBOS_IN_FLIGHT:
        figures[f"dbos-{in_flight}"] = _dbos_peer(env, "drain", in_flight, str(EXECUTIONS))[
            "per_second"
        ]
    figures["dbos-started"] = _dbos_peer(env, "started", str(EXECUTIONS))["per_second"]
    return figures


def _best(rounds: list[dict[str, float]], side: str) -> tuple[str, list[float]]:
    """The side's setting with the best median over the rounds, and its figures."""
    settings_ = {name for name in rounds[0] if name.startswith(side)}
    name = max(settings_, key=lambda n: statistics.median(r[n] for r in rounds))
    return name, [r[name] for r in rounds]


# The stage path as it was before the cut of issue 16 (commit 4c9a69d, the same bench on this
# machine): where the time went then, for the report's before and after.
BEFORE = (
    "Before the cut of issue 16 (commit 4c9a69d, the same bench on this machine): an empty "
    "stage 11.0 ms in 11 statements and 2 transactions, 8 of its 11 ms waiting on "
    "PostgreSQL, each statement parsed and planned anew; 27.5 four-stage workflows per "
    "second on 2 processes against DBOS's 53.0."
)


def main() -> None:
    env, stack = _setup()
    steps: list[dict[str, Any]] = []
    peers: list[dict[str, Any]] = []
    quiet: list[dict[str, float]] = []
    loaded: list[dict[str, float]] = []
    celery: list[float] = []
    profile: list[str] = []
    try:
        floor = _floor()
        for round in range(ROUNDS):
            steps.append(_step_overhead())
            peers.append(_dbos_peer(env, "figures"))
            quiet.append(_throughputs(env, 2 * round))
            celery.append(_celery_throughput(env))
            with _loaded():
                loaded.append(_throughputs(env, 2 * round + 1))
        profile, stack = engine_profile.profiles(stack)
    finally:
        if stack is not None:
            stack.stop()
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    lines = _report(floor, steps, peers, quiet, loaded, celery) + profile
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))


def _shape(last: dict[str, Any]) -> str:
    """How an empty stage's statements were sent: in transactions, or each on its own."""
    transactions = last["stage_transactions"]
    within = (
        f"{len(transactions)} transaction(s) of {' and '.join(map(str, transactions))} "
        "statements between BEGIN and COMMIT, and "
        if transactions
        else ""
    )
    return (
        f"{last['stage_statements']} SQL statement(s), BEGIN and COMMIT included: {within}"
        f"{last['stage_outside']} statement(s) each its own transaction (a new run's first "
        "claim; the last stage's end with the terminal transition)."
    )


def _report(
    floor: dict[str, float],
    steps: list[dict[str, Any]],
    peers: list[dict[str, Any]],
    quiet: list[dict[str, float]],
    loaded: list[dict[str, float]],
    celery: list[float],
) -> list[str]:
    from bench.workflows import STAGES

    def column(rows: list[dict[str, Any]], key: str) -> list[float]:
        return [float(row[key]) for row in rows]

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(column(rows, key))

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    step, peer_step = median(steps, "ms_per_step"), median(peers, "ms_per_step")
    stage, peer_stage = median(steps, "ms_per_stage"), median(peers, "empty_ms")
    two_commits = 2 * floor["commit"]
    best_quiet, alfred_quiet = _best(quiet, "alfred")
    peer_quiet_name, peer_quiet = _best(quiet, "dbos")
    best_loaded, alfred_loaded = _best(loaded, "alfred")
    peer_loaded_name, peer_loaded = _best(loaded, "dbos")
    quiet_ratio = statistics.median(alfred_quiet) / statistics.median(peer_quiet)
    loaded_ratio = statistics.median(alfred_loaded) / statistics.median(peer_loaded)
    last = steps[-1]
    rest = last["stage_mean_ms"] - last["stage_python_ms"] - last["stage_backend_ms"]

    def setting(name: str) -> str:
        side, value = name.split("-", 1)
        if side == "alfred":
            return f"Alfred, a worker of {value} processes"
        if value == "all":
            return "DBOS, its queue unlimited (every workflow at once)"
        if value == "started":
            return "DBOS, every workflow started at once by `start_workflow`"
        return f"DBOS, its queue at {value} in flight"

    names = list(quiet[0])
    return [
        "# Engine benchmark",
        "",
        f"`python -m bench engine` — real PostgreSQL and Redis on this machine "
        f"({os.cpu_count()} cores), fsync on, beside DBOS Transact {peers[0]['version']} on "
        f"the same PostgreSQL server (a system database of its own). {ROUNDS} rounds; each "
        "figure is min / **median** / max over the rounds, and each ratio is of the two "
        "sides' medians.",
        "",
        "## Against the targets (issue 40)",
        "",
        "| | Alfred | DBOS | Alfred / DBOS | target | |",
        "|---|---:|---:|---:|---:|---|",
        f"| ms per step | {_spread(column(steps, 'ms_per_step'), 2)} | "
        f"{_spread(column(peers, 'ms_per_step'), 2)} | {step / peer_step:.2f} | ≤ 0.5 | "
        f"{verdict(step / peer_step <= 0.5)} |",
        f"| ms per empty stage / empty workflow (median of {EMPTY} / of "
        f"{EMPTY_DBOS}) | {_spread(column(steps, 'ms_per_stage'), 2)} | "
        f"{_spread(column(peers, 'empty_ms'), 2)} | {stage / peer_stage:.2f} | ≤ 1.0 | "
        f"{verdict(stage / peer_stage <= 1.0)} |",
        f"| the same, the mean | {_spread(column(steps, 'stage_mean_ms'), 2)} | "
        f"{_spread(column(peers, 'empty_mean_ms'), 2)} | "
        f"{median(steps, 'stage_mean_ms') / median(peers, 'empty_mean_ms'):.2f} | | |",
        f"| empty stage / the floor of its two commits ({two_commits:.2f} ms) | | | "
        f"{stage / two_commits:.2f} | ≤ 2.0 | {verdict(stage / two_commits <= 2.0)} |",
        f"| {STAGES}-stage / {STAGES}-step workflows per second, quiet machine, each side "
        f"at its best | {_spread(alfred_quiet)} | {_spread(peer_quiet)} | {quiet_ratio:.2f} | "
        f"≥ 2.0 | {verdict(quiet_ratio >= 2.0)} |",
        f"| the same, the machine loaded | {_spread(alfred_loaded)} | {_spread(peer_loaded)} "
        f"| {loaded_ratio:.2f} | ≥ 2.0 | {verdict(loaded_ratio >= 2.0)} |",
        "",
        f"Each side's best: quiet, {setting(best_quiet)} against {setting(peer_quiet_name)}; "
        f"loaded, {setting(best_loaded)} against {setting(peer_loaded_name)}.",
        "",
        "## What is measured, side by side",
        "",
        f"- **Step**: a stage of {STEPS} no-op `ctx.step` calls against an empty stage, per "
        f"step; a workflow of {STEPS} no-op `@DBOS.step` calls against an empty workflow, "
        "likewise. Each records its output durably, one commit per step.",
        f"- **Empty stage / empty workflow**: each of {EMPTY} timed on its own, one after "
        "another, in the measuring process. An Alfred stage is claimed (the run fenced and "
        "leased, the stage and the execution running, their events) and completed (the "
        "terminal transition with its events and webhook deliveries owed): two commits. A "
        "DBOS workflow records its start and its output: two commits. Alfred's execution "
        "was accepted before the timer started (its acceptance is the API's, measured in "
        "bench/reports/acceptance.md); DBOS's start is inside its time.",
        f"- **Throughput**: {EXECUTIONS} workflows of {STAGES} no-op stages / steps. On both "
        "sides they are started while nothing runs them (Alfred: accepted with the worker "
        "stopped; DBOS: enqueued by a `DBOSClient` with no application running) and timed "
        "from the first one's start to the last one's end by the rows' own timestamps, so "
        "the starts are untimed on both sides. Alfred runs on a Celery worker of "
        f"{' and of '.join(map(str, CONCURRENCY))} processes; DBOS on one process, its queue "
        f"at {', '.join(DBOS_IN_FLIGHT[:-1])} workflows in flight and unlimited, polled every "
        f"{DBOS_POLL * 1000:.0f} ms (its default of 1 s would cap a queue of 2 in flight near "
        "2/s); and DBOS once more with every workflow started at once by `start_workflow` "
        "(no queue), where its starts fall inside its window, against it.",
        "- **Loaded**: the same throughput runs while a process spins on one of the "
        f"{os.cpu_count()} cores.",
        f"- **Floor**: from the engine's process through psycopg, one round trip "
        f"(`SELECT 1`) takes {floor['round_trip']:.3f} ms and one commit that writes "
        f"(`BEGIN; INSERT; COMMIT`) {floor['commit']:.3f} ms (medians of {FLOOR}).",
        "",
        "| throughput, per second | quiet | loaded |",
        "|---|---:|---:|",
        *(
            f"| {setting(name)} | {_spread([r[name] for r in quiet])} | "
            f"{_spread([r[name] for r in loaded])} |"
            for name in names
        ),
        f"| a bare Celery chain of {STAGES} no-op tasks, {CONCURRENCY[0]} processes "
        f"| {_spread(celery)} | |",
        "",
        "The bare chain is a message per task and does nothing durable; an Alfred execution "
        "is one message whose worker hands it from stage to stage, a stage's end and the "
        "next one's claim in one statement.",
        "",
        "## Where an empty stage's time goes (the last round)",
        "",
        f"CPU is counted in 10 ms ticks, so the split is of the mean of {EMPTY} stages, "
        f"{last['stage_mean_ms']:.2f} ms: {last['stage_python_ms']:.2f} ms of CPU in this "
        f"process, {last['stage_backend_ms']:.2f} ms of CPU in its PostgreSQL backend and "
        + (
            f"{rest:.2f} ms waiting (the commits' flushes, the round trips). "
            if rest >= 0.05
            else "the rest, the commits' flushes and the round trips, too short for ticks "
            f"this coarse to show ({rest:+.2f} ms). "
        )
        + _shape(last),
        "",
        BEFORE,
        "",
        "## What still differs",
        "",
        "- DBOS runs a workflow's steps on threads of one process; Alfred runs stages in "
        "Celery worker processes fed by Redis, each execution one message. Alfred's "
        "throughput includes the broker; DBOS's includes its queue's polling.",
        "- An Alfred stage writes more than a DBOS workflow: the execution's projection, "
        "its events in the outbox (gapless per-execution sequence, NOTIFY, webhook "
        "deliveries owed), a fenced lease. Neither side's figures include an HTTP request.",
        "- What stands in the way of the empty stage and of the floor (the profiles below): "
        "every transition is one statement now, so what is left is what each statement "
        "does. The first claim writes the run, the stage, the execution (its status is in "
        "its indexes, so the row's update is not HOT and each index takes an entry) and "
        "three events with their deliveries owed and their NOTIFY; the last stage's end "
        "writes as much again. An empty DBOS workflow writes its status row twice. On this "
        "machine the backend's CPU for that, with the commits, is as large as the worker's "
        "Python around it.",
        "",
    ]
