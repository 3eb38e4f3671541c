"""Retention against the stage path: 10⁶ outbox events on executions that ended long ago are
pruned (``manage.py alfred_prune`` in a process of its own) while this process runs stages,
one after another, as a worker would; the stage's latency is measured before, during and after
the prune, and the prune's rate is its own. Twice: flat out (``--duty 1``) and at the default
duty (resting between batches).

The history is seeded in SQL (INSERT … SELECT generate_series): ``EXECUTIONS`` succeeded
executions that ended 100 days ago, each with a run of four stages, five step receipts, a
fired timer and ``EVENTS`` / ``EXECUTIONS`` events; a tenth of the events were delivered to
a webhook endpoint, one attempt each. A stage is ``bench-steps`` with ``STEPS`` no-op steps
(bench/workflows.py), accepted first (untimed), then executed in-process (timed): the claim,
the steps' receipts, the completion with its events and the terminal transition.

Writes bench/reports/prune.md and prints it.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alfred.principals import cli_caller
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "prune.md"
EVENTS = int(os.environ.get("BENCH_PRUNE_EVENTS", str(10**6)))
EXECUTIONS = int(os.environ.get("BENCH_PRUNE_EXECUTIONS", str(10**4)))
# How far the stage path's latency may move and still be called unchanged: a choice, near
# what this bench can tell apart on a shared two-core host.
UNCHANGED = 0.05
SAMPLES = int(os.environ.get("BENCH_PRUNE_SAMPLES", "300"))
STEPS = 3
WINDOW = 1.0

_SEED = """
INSERT INTO executions_execution (
    id, workflow, status, start_state, input, dry_run, logical_identity, principal,
    assistance, last_sequence, created_at, updated_at, finished_at)
SELECT 'exe_old_' || lpad(n::text, 9, '0'), 'bench-noop', 'succeeded', 'started',
       jsonb_build_object('n', n), false, md5('old-' || n), 'bench', '[]'::jsonb,
       %(per)s, now() - interval '101 days', now() - interval '100 days',
       now() - interval '100 days' + n * interval '1 ms'
FROM generate_series(1, %(executions)s) n;

INSERT INTO executions_run (
    id, execution_id, number, kind, status, fence, lease_owner, wakeups, wakeups_seen,
    recoveries, created_at, started_at, finished_at)
SELECT 'run_old_' || lpad(n::text, 9, '0'), 'exe_old_' || lpad(n::text, 9, '0'), 1,
       'initial', 'succeeded', 1, '', 0, 0, 0, now() - interval '101 days',
       now() - interval '101 days', now() - interval '100 days'
FROM generate_series(1, %(executions)s) n;

UPDATE executions_execution SET current_run_id = 'run_old_' || substr(id, 9)
WHERE id LIKE 'exe_old_%%';

INSERT INTO executions_stage (run_id, name, position, status, output, started_at, finished_at)
SELECT 'run_old_' || lpad(n::text, 9, '0'), 's' || s, s, 'succeeded',
       jsonb_build_object('ok', true), now() - interval '101 days', now() - interval '100 days'
FROM generate_series(1, %(executions)s) n, generate_series(0, 3) s;

INSERT INTO executions_stepreceipt (
    run_id, stage, step_key, sequence, kind, status, output, attempts, fence, created_at)
SELECT 'run_old_' || lpad(n::text, 9, '0'), 's1', 'step-' || k, k, 'step', 'succeeded',
       jsonb_build_object('resource', 'dns:svc' || n || '.example.com', 'etag', md5(n || ':' || k)),
       1, 1, now() - interval '100 days'
FROM generate_series(1, %(executions)s) n, generate_series(1, 5) k;

INSERT INTO executions_timer (run_id, stage, key, purpose, due_at, topics, status, created_at,
                              fired_at)
SELECT 'run_old_' || lpad(n::text, 9, '0'), 's2', 'poll', 'poll', now() - interval '100 days',
       '[]'::jsonb, 'fired', now() - interval '100 days', now() - interval '100 days'
FROM generate_series(1, %(executions)s) n;

INSERT INTO executions_outboxevent (execution_id, sequence, key, type, payload, created_at)
SELECT 'exe_old_' || lpad(n::text, 9, '0'), s,
       'exe_old_' || lpad(n::text, 9, '0') || ':run_old_' || lpad(n::text, 9, '0') || ':' || s,
       CASE WHEN s = 1 THEN 'execution.accepted' WHEN s = %(per)s THEN 'execution.succeeded'
            ELSE 'stage.succeeded' END,
       jsonb_build_object('run', 'run_old_' || lpad(n::text, 9, '0'), 'stage', 's' || (s %% 4),
                          'output', jsonb_build_object('etag', md5(n || '/' || s))),
       now() - interval '100 days'
FROM generate_series(1, %(executions)s) n, generate_series(1, %(per)s) s;

INSERT INTO executions_webhookdelivery (
    endpoint_id, event_id, status, attempts, round_attempts, last_status_code, last_error,
    created_at, delivered_at)
SELECT %(endpoint)s, id, 'delivered', 1, 1, 204, '', created_at, created_at
FROM executions_outboxevent WHERE execution_id LIKE 'exe_old_%%' AND sequence %% 10 = 0;

INSERT INTO executions_webhookattempt (
    delivery_id, number, status_code, duration_ms, response_excerpt, error, created_at)
SELECT d.id, 1, 204, 40, '', '', d.created_at
FROM executions_webhookdelivery d JOIN executions_outboxevent o ON o.id = d.event_id
WHERE o.execution_id LIKE 'exe_old_%%';
"""


def _seed(prefix: str) -> dict[str, int]:
    """The history, its ids ``exe_<prefix>…`` (``prefix``: four characters, as ``old_``)."""
    from django.db import connection, transaction

    from executions.models import WebhookEndpoint

    per = EVENTS // EXECUTIONS
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(
            url="https://hooks.example.com/alfred", secret="whsec_" + "A" * 44
        )
        with connection.cursor() as cursor:
            cursor.execute(
                _SEED.replace("old_", prefix),
                {"executions": EXECUTIONS, "per": per, "endpoint": endpoint.pk},
            )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return _counts(prefix)


_COUNTS = """
SELECT (SELECT count(*) FROM executions_outboxevent WHERE execution_id LIKE 'exe_old_%%'),
       (SELECT count(*) FROM executions_webhookdelivery d JOIN executions_outboxevent o
          ON o.id = d.event_id WHERE o.execution_id LIKE 'exe_old_%%'),
       (SELECT count(*) FROM executions_webhookattempt a
          JOIN executions_webhookdelivery d ON d.id = a.delivery_id
          JOIN executions_outboxevent o ON o.id = d.event_id
          WHERE o.execution_id LIKE 'exe_old_%%'),
       (SELECT count(*) FROM executions_stepreceipt WHERE run_id LIKE 'run_old_%%'),
       (SELECT count(*) FROM executions_timer WHERE run_id LIKE 'run_old_%%')
"""


def _counts(prefix: str) -> dict[str, int]:
    """The seeded history still there (the stages timed here have deliveries of their own:
    the endpoint takes every event)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_COUNTS.replace("old_", prefix))
        row = cursor.fetchone()
    return dict(zip(("events", "deliveries", "attempts", "receipts", "timers"), row, strict=True))


def _stage_ms() -> float:
    """One ``bench-steps`` stage of STEPS steps: accepted (untimed), then executed here."""
    from executions.acceptance import execution_accept
    from executions.runtime.runner import stage_execute

    run_id = str(
        execution_accept(
            workflow_name="bench-steps",
            body={"steps": STEPS, "n": time.time_ns() % 10**15},
            idempotency_key=f"stage-{time.time_ns()}",
            caller=cli_caller("bench"),
        ).execution.current_run_id
    )
    start = time.perf_counter()
    stage_execute(run_id, "s0", "bench@local:1")
    return (time.perf_counter() - start) * 1000


def _quantiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "n": len(samples),
        "p50": statistics.median(samples),
        "p95": cuts[94],
        "p99": cuts[98],
        "max": max(samples),
    }


def _prune(env: dict[str, str], duty: float) -> tuple[subprocess.Popen[str], float]:
    process = subprocess.Popen(
        [
            *(sys.executable, "manage.py", "alfred_prune", "--older-than", "90d"),
            *("--duty", str(duty), "--actor", "bench"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, time.perf_counter()


def _round(env: dict[str, str], prefix: str, duty: float) -> dict[str, Any]:
    """Seed, time stages before, during and after a prune at ``duty``."""
    seed_start = time.perf_counter()
    seeded = _seed(prefix)
    seed_seconds = time.perf_counter() - seed_start
    for _ in range(20):
        _stage_ms()  # warm-up: the connection, its prepared statements, the caches
    before = [_stage_ms() for _ in range(SAMPLES)]
    process, started = _prune(env, duty)
    # While it runs, the prune is stopped and let go in turns (SIGSTOP, SIGCONT) every
    # WINDOW seconds, and each stage is counted with the prune running or stopped: both sets
    # see the same machine, whatever else runs on it meanwhile. (A switch falls between two
    # stages, so each stage lies in one window.)
    during: list[float] = []
    paused: list[float] = []
    running, switched, ran = True, time.monotonic(), 0.0
    while process.poll() is None:
        (during if running else paused).append(_stage_ms())
        if time.monotonic() - switched >= WINDOW:
            if running:
                ran += time.monotonic() - switched
            os.kill(process.pid, signal.SIGSTOP if running else signal.SIGCONT)
            running, switched = not running, time.monotonic()
    prune_seconds = ran + time.monotonic() - switched
    del started
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"alfred_prune failed: {err}")
    after = [_stage_ms() for _ in range(SAMPLES)]
    left = _counts(prefix)
    if any(left.values()):
        raise RuntimeError(f"left behind: {left}")
    if min(len(during), len(paused)) < 20:
        raise RuntimeError(f"only {len(during)}/{len(paused)} stages beside the prune: too few")
    summary = out.strip().splitlines()[-1]
    batches = re.search(r"in (\d+) batches, the longest (\d+) ms", summary)
    if batches is None:
        raise RuntimeError(summary)
    return {
        "duty": duty,
        "seeded": seeded,
        "seed_seconds": seed_seconds,
        "seconds": prune_seconds,
        "batches": batches[1],
        "longest": batches[2],
        "summary": summary,
        "latency": {
            "before": _quantiles(before),
            "during, running": _quantiles(during),
            "during, stopped": _quantiles(paused),
            "after": _quantiles(after),
        },
    }


def _slowed(result: dict[str, Any], cut: str) -> float:
    latency = result["latency"]
    return float(latency["during, running"][cut] / latency["during, stopped"][cut])


def _ratio(result: dict[str, Any], cut: str) -> str:
    return f"{_slowed(result, cut):.2f}×"


def main() -> None:
    env, stack = bench_stack("bench-prune", ALFRED_EXTRA_WORKFLOWS="bench.workflows")
    os.environ.update(env)
    import django

    django.setup()
    from executions.retention import BATCH, DUTY

    try:
        rounds = [_round(env, "o1x_", 1.0), _round(env, "o2x_", DUTY)]
    finally:
        if stack is not None:
            stack.stop()
    seeded = rounds[0]["seeded"]
    lines = [
        "# Prune benchmark",
        "",
        f"`python -m bench prune` — real PostgreSQL and Redis on this machine "
        f"({os.cpu_count()} cores, shared with the other processes running on it). Twice, "
        f"each time seeded in SQL (in about {rounds[0]['seed_seconds']:.0f} s): "
        f"{EXECUTIONS:,} succeeded executions that ended 100 days ago with "
        f"{seeded['events']:,} events, {seeded['deliveries']:,} webhook deliveries and as many "
        f"attempts, {seeded['receipts']:,} step receipts and {seeded['timers']:,} timers. "
        "`manage.py alfred_prune --older-than 90d` ran in a process of its own, once flat out "
        f"(`--duty 1`) and once as it runs by default (`--duty {DUTY}`: it rests "
        f"{(1 - DUTY) / DUTY:g} times as long as each batch took), in batches of {BATCH} "
        "executions, while this process "
        "ran stages back to back as a worker would: each a `bench-steps` stage of "
        f"{STEPS} no-op steps (the claim, the receipts, the completion with its events and "
        "the terminal transition), accepted first and then timed.",
        "",
        "## The prune",
        "",
        "| duty | events | deliveries | attempts | receipts | timers | batches "
        "| longest batch | seconds | events per second |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['duty']:g} | {r['seeded']['events']:,} | {r['seeded']['deliveries']:,} "
            f"| {r['seeded']['attempts']:,} | {r['seeded']['receipts']:,} "
            f"| {r['seeded']['timers']:,} | {r['batches']} | {r['longest']} ms "
            f"| {r['seconds']:.1f} | {r['seeded']['events'] / r['seconds']:,.0f} |"
            for r in rounds
        ),
        "",
        "`seconds` counts only the windows the prune ran in (see below); a batch a stop fell "
        "into counts the stop in its length (the longest batch is such a one).",
        "",
        "## The stage path's latency (ms)",
        "",
        f"While the prune ran it was stopped and let go in turns (SIGSTOP, SIGCONT) every "
        f"{WINDOW:g} s; each stage is counted by the window it fell in. The running and the "
        "stopped windows interleave, so they share whatever else the machine did meanwhile: "
        "they are the comparison. Before and after: blocks of stages with no prune.",
        "",
        "| prune | stages | | p50 | p95 | p99 | max |",
        "|---|---|---:|---:|---:|---:|---:|",
        *(
            f"| duty {r['duty']:g} | {when} | {q['n']:.0f} | {q['p50']:.1f} "
            f"| {q['p95']:.1f} | {q['p99']:.1f} | {q['max']:.1f} |"
            for r in rounds
            for when, q in r["latency"].items()
        ),
        "",
        *(
            f"- duty {r['duty']:g}: while the prune ran, the median stage took "
            f"{_ratio(r, 'p50')} and the 95th percentile {_ratio(r, 'p95')} what they took "
            "in the windows it was stopped."
            for r in rounds
        ),
        "",
        f"Target, the stage path's latency unchanged while a prune runs as it does by default "
        f"(taken as: p50 and p95 within {UNCHANGED * 100:.0f}% of the stopped windows): "
        + (
            "met."
            if max(_slowed(rounds[1], "p50"), _slowed(rounds[1], "p95")) <= 1 + UNCHANGED
            else "not met."
        ),
        "",
        "The stage path touches none of the rows a prune deletes and waits on none of its "
        "locks (a batch locks only ended executions, SKIP LOCKED both ways); what they share "
        "is the machine — here two cores for both Python processes and both PostgreSQL "
        "backends — and the write-ahead log's flushes. The rests between batches are what "
        "leave the stage path its latency; `--duty 1` is for a database with room to spare.",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
