"""The reconciler's tick against how much history the database holds: 100 held lanes (live
owners) beside 10³, 10⁵ and 10⁶ terminal executions. The goal is a flat tick: its cost
should follow the active work, not what is remembered.

Writes bench/reports/lanes.md and prints it.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from alfred.principals import cli_caller
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "lanes.md"
LANES = 100
SIZES = [int(n) for n in os.environ.get("BENCH_HISTORY", "1000,100000,1000000").split(",")]
TICKS = 7

_HISTORY_SQL = """
INSERT INTO executions_execution
    (id, workflow, status, start_state, input, dry_run, logical_identity, principal, lane_key,
     assistance, last_sequence, created_at, updated_at, finished_at)
SELECT 'exe_hist_' || g, 'add-domain', 'succeeded', 'started', '{}'::jsonb, false,
       md5(g::text), 'bench', 'aws-infrastructure', '[]'::jsonb, 1,
       now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
FROM generate_series(%s, %s) AS g
"""


def _held_lanes() -> None:
    from executions.acceptance import execution_accept

    for i in range(LANES):
        execution_accept(
            workflow_name="update-lambda-version",
            body={"target": f"fleet-{i}", "environment": "production", "version": "1"},
            idempotency_key=f"lane-{i}",
            caller=cli_caller("bench"),
        )


def _grow_history(have: int, want: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_HISTORY_SQL, [have + 1, want])
        cursor.execute("ANALYZE executions_execution")


def _tick_ms() -> float:
    from executions.lanes.reconciler import lanes_reconcile

    samples = []
    for _ in range(TICKS):
        start = time.perf_counter()
        reconciled, _ = lanes_reconcile()
        samples.append((time.perf_counter() - start) * 1000)
        assert reconciled == LANES, reconciled
    return statistics.median(samples)


def main() -> None:
    env, stack = bench_stack("bench-lanes")
    os.environ.update(env)
    import django

    django.setup()
    rows = []
    try:
        _held_lanes()
        have = 0
        for size in SIZES:
            _grow_history(have, size)
            have = size
            rows.append((size, _tick_ms()))
    finally:
        if stack is not None:
            stack.stop()
    base = rows[0][1]
    lines = [
        "# Lane reconciler benchmark",
        "",
        f"`python -m bench lanes` — {LANES} held lanes with live owners, the terminal history "
        f"grown between measurements; median of {TICKS} ticks; real PostgreSQL.",
        "",
        "| terminal executions | tick ms | ratio to the first |",
        "|---:|---:|---:|",
        *[f"| {size:,} | {ms:.1f} | {ms / base:.2f} |" for size, ms in rows],
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
