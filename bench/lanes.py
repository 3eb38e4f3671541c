"""The reconciler's beat tick against how many lanes are held and how much history the
database holds: 100, 1,000 and 10,000 held lanes (each owned by a live execution), beside 10⁶
terminal executions. The goal: a tick whose cost follows the lanes that changed (owners that
ended without their own reconcile), not the lanes held nor what is remembered.

For each number of held lanes:
- the tick with nothing to decide (every owner live): min / median / max of ``TICKS``;
- the tick when ``CHANGED`` owners ended without their lane's reconcile (a worker killed
  after the terminal commit): each of ``TICKS`` ticks finds and releases that many, and how
  many it visited is checked;
- the tick as it was (commit ca95ae0): a transaction per held lane, each observed and
  retained, one pass.

Then ``EXPLAIN (ANALYZE, BUFFERS)`` of the tick's read at the largest size. Writes
bench/reports/lanes.md and prints it.
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
HELD = [int(n) for n in os.environ.get("BENCH_HELD", "100,1000,10000").split(",")]
HISTORY = int(os.environ.get("BENCH_HISTORY", "1000000"))
TICKS = 7
CHANGED = 10

# The history's ids sort before the live owners' (exe_ and a ULID, 01... today), as older ids do.
_HISTORY_SQL = """
INSERT INTO executions_execution
    (id, workflow, status, start_state, input, dry_run, logical_identity, principal, lane_key,
     assistance, last_sequence, created_at, updated_at, finished_at)
SELECT 'exe_0000' || lpad(g::text, 22, '0'), 'add-domain', 'succeeded', 'started',
       '{}'::jsonb, false, md5(g::text), 'bench', 'aws-infrastructure', '[]'::jsonb, 1,
       now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
FROM generate_series(%s, %s) AS g
"""


def _hold(have: int, want: int) -> list[str]:
    """Lanes ``have``..``want`` held, each by a new update-lambda-version execution (accepted
    as an integration's would be: its lane claimed, its run queued for a worker that is not
    running). Returns the new owners."""
    from executions.acceptance import execution_accept

    return [
        execution_accept(
            workflow_name="update-lambda-version",
            body={"target": f"fleet-{i}", "environment": "production", "version": "1"},
            idempotency_key=f"lane-{i}",
            caller=cli_caller("bench"),
        ).execution.id
        for i in range(have, want)
    ]


def _history(count: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_HISTORY_SQL, [1, count])
        cursor.execute("ANALYZE")


def _end(owners: list[str]) -> None:
    """``owners`` succeeded, their lanes' own reconcile lost (the worker died after the
    terminal commit): only the tick can release them now."""
    from executions.models import Execution, ExecutionStatus, Run, RunStatus

    Execution.objects.filter(pk__in=owners).update(status=ExecutionStatus.SUCCEEDED)
    Run.objects.filter(execution_id__in=owners).update(status=RunStatus.SUCCEEDED)


def _tick() -> tuple[float, int]:
    """One whole tick, every page (as the beat task goes on page after page): ms, visited."""
    from executions.lanes.reconciler import lanes_reconcile

    start, visited = time.perf_counter(), 0
    after: str | None = ""
    while after is not None:
        count, after = lanes_reconcile(after=after)
        visited += count
    return (time.perf_counter() - start) * 1000, visited


def _tick_before() -> float:
    """The tick as it was before this bench's change: every held lane locked and observed in
    a transaction of its own (all retained here). One pass, ms."""
    from executions.lanes.reconciler import lane_reconcile
    from lanes.models import Lane, LaneState

    keys = list(Lane.objects.filter(state=LaneState.HELD).values_list("key", flat=True))
    start = time.perf_counter()
    for key in keys:
        lane_reconcile(key, wait=False)
    return (time.perf_counter() - start) * 1000


def _explain() -> list[str]:
    from django.db import connection

    from executions.lanes.reconciler import _UNSETTLED_SQL, BATCH, unsettled_params

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + _UNSETTLED_SQL, unsettled_params("", BATCH))
        return [line for (line,) in cursor.fetchall()]


def _spread(samples: list[float]) -> str:
    return f"{min(samples):.1f} / {statistics.median(samples):.1f} / {max(samples):.1f}"


def main() -> None:
    env, stack = bench_stack("bench-lanes")
    os.environ.update(env)
    import django

    django.setup()
    rows, plan = [], []
    try:
        _history(HISTORY)
        owners: list[str] = []
        for held in HELD:
            started = time.perf_counter()
            owners += _hold(len(owners), held)
            accepted = time.perf_counter() - started
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            quiet = []
            for _ in range(TICKS):
                ms, visited = _tick()
                assert visited == 0, visited
                quiet.append(ms)
            changed = []
            for round in range(TICKS):
                ended = owners[round * CHANGED : (round + 1) * CHANGED]
                _end(ended)
                ms, visited = _tick()
                assert visited == CHANGED, visited
                changed.append(ms)
            # the lanes released above are held again, by new owners, for the next size
            del owners[: TICKS * CHANGED]
            before = _tick_before()
            owners += _hold(held + 10**6, held + 10**6 + TICKS * CHANGED)
            rows.append((held, quiet, changed, before, accepted))
        plan = _explain()
    finally:
        if stack is not None:
            stack.stop()
    lines = [
        "# Lane reconciler benchmark",
        "",
        f"`python -m bench lanes` — real PostgreSQL on this machine ({os.cpu_count()} cores), "
        f"{HISTORY:,} terminal executions in the history, and 100, 1,000 and 10,000 lanes "
        "held, each by a live update-lambda-version execution accepted as an integration's "
        f"would be. A tick is the beat task's whole walk, every page; {TICKS} ticks each, "
        "ms as min / median / max.",
        "",
        f"| held lanes | tick, nothing to decide | tick, {CHANGED} owners ended (released) "
        "| the tick before (one pass) | before / now |",
        "|---:|---:|---:|---:|---:|",
        *[
            f"| {held:,} | {_spread(quiet)} | {_spread(changed)} | {before:,.0f} | "
            f"{before / statistics.median(quiet):,.0f}× |"
            for held, quiet, changed, before, _ in rows
        ],
        "",
        "The tick before visited every held lane in a transaction of its own (the owner's row "
        "locked, then the lane's; the owner, its run and its stages read), and retained it: "
        "its cost grew with the lanes held. Now one read finds the held lanes whose owner is "
        "not both active and on a live run (the only lanes `lane_decide` would not retain) "
        "and only those are visited: a tick costs that read, which touches each held lane's "
        "row and its owner's and run's through their primary keys, and a transaction per "
        "lane with something to decide. The read still grows with the lanes held, at about "
        f"{statistics.median(rows[-1][1]) / rows[-1][0] * 1000:.1f} µs per held lane; "
        "what it leaves out is the work: the lock, the observation and the write.",
        "",
        "A terminal transition reconciles its own lane at once (`lane_reconcile_on_finish`): "
        "the tick is the guarantee behind it, for an owner whose worker died between its "
        "terminal commit and that reconcile.",
        "",
        f"Accepting the held lanes' owners took {rows[-1][4]:.0f} s for the last "
        f"{HELD[-1] - HELD[-2] if len(HELD) > 1 else HELD[-1]:,} (in one process, "
        "one after another).",
        "",
        f"## The tick's read at {HELD[-1]:,} held lanes: `EXPLAIN (ANALYZE, BUFFERS)`",
        "",
        "```",
        *plan,
        "```",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
