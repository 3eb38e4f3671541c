"""The timer scan's tick against how many waits are pending: 10² and 10⁴ waiting executions,
each with a run waiting on a timer due in an hour, and each tick finding ``DUE`` timers that
came due. The goal is a flat tick: its cost should follow what is due, not what waits.

No worker runs at all while the waits are pending: a waiting execution is rows (its run, its
timer), and holds no process. Each tick is ``scans.timers_fire`` as beat's 1 s scan runs it:
it marks the due timers fired, wakes their runs and publishes their stage messages.

Writes bench/reports/timers.md and prints it.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "timers.md"
SIZES = [int(n) for n in os.environ.get("BENCH_WAITING", "100,10000").split(",")]
DUE = 20
TICKS = 9


def _grow(have: int, want: int) -> list[str]:
    """Waiting executions ``have``..``want``, each with a waiting run and a timer an hour out;
    returns the new runs' ids."""
    from django.db import transaction

    from executions.models import (
        Execution,
        ExecutionStatus,
        Run,
        RunStatus,
        Timer,
        TimerPurpose,
    )

    later = _now() + timedelta(hours=1)
    with transaction.atomic():
        executions = Execution.objects.bulk_create(
            [
                Execution(
                    id=f"exe_wait_{n:09d}",
                    workflow="add-subdomain",
                    status=ExecutionStatus.WAITING,
                    input={},
                    logical_identity=f"wait-{n}",
                    principal="bench",
                )
                for n in range(have, want)
            ],
            batch_size=2000,
        )
        runs = Run.objects.bulk_create(
            [
                Run(id=f"run_wait_{n:09d}", execution=execution, number=1, status=RunStatus.WAITING)
                for n, execution in zip(range(have, want), executions, strict=True)
            ],
            batch_size=2000,
        )
        Execution.objects.filter(pk__in=[e.pk for e in executions]).update(
            current_run_id=_run_id_from_execution()
        )
        Timer.objects.bulk_create(
            [
                Timer(run=run, stage="apply", key="sleep", purpose=TimerPurpose.SLEEP, due_at=later)
                for run in runs
            ],
            batch_size=2000,
        )
    _analyze()
    return [run.id for run in runs]


def _run_id_from_execution() -> object:
    """``run_wait_<n>`` for ``exe_wait_<n>``: the run each execution was given above."""
    from django.db.models import Value
    from django.db.models.functions import Concat, Substr

    return Concat(Value("run_wait_"), Substr("id", len("exe_wait_") + 1))


def _now() -> datetime:
    from executions.runtime.clock import db_now

    return db_now()


def _analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("executions_execution", "executions_run", "executions_timer"):
            cursor.execute(f"ANALYZE {table}")


def _tick_ms(runs: list[str], tick: int) -> float:
    """One tick with ``DUE`` timers come due (new timers of runs already waiting)."""
    from executions.models import Run, Timer, TimerPurpose
    from executions.runtime import scans

    due = _now() - timedelta(seconds=1)
    chosen = runs[tick * DUE % len(runs) :][:DUE] or runs[:DUE]
    Timer.objects.bulk_create(
        [
            Timer(
                run=Run(pk=run),
                stage="apply",
                key=f"poll-{tick}",
                purpose=TimerPurpose.POLL,
                due_at=due,
            )
            for run in chosen
        ]
    )
    start = time.perf_counter()
    fired = scans.timers_fire()
    elapsed = (time.perf_counter() - start) * 1000
    assert fired == len(chosen), (fired, len(chosen))
    return elapsed


def main() -> None:
    env, stack = bench_stack("bench-timers")
    os.environ.update(env)
    import django

    django.setup()
    rows = []
    try:
        have, runs, tick = 0, [], 0
        for size in SIZES:
            runs += _grow(have, size)
            have = size
            samples = []
            for _ in range(TICKS):
                samples.append(_tick_ms(runs, tick))
                tick += 1
            rows.append((size, statistics.median(samples)))
    finally:
        if stack is not None:
            stack.stop()
    base = rows[0][1]
    lines = [
        "# Timer scan benchmark",
        "",
        f"`python -m bench timers` — waiting executions, each with a run waiting on a timer "
        f"an hour out (no worker runs: a wait is rows); each tick finds {DUE} timers come due, "
        f"marks them fired, wakes their runs and publishes their messages; median of {TICKS} "
        "ticks; real PostgreSQL and Redis.",
        "",
        "| waiting executions (pending timers) | tick ms | ratio to the first |",
        "|---:|---:|---:|",
        *[f"| {size:,} | {ms:.1f} | {ms / base:.2f} |" for size, ms in rows],
        "",
        "Target: the tick at 10⁴ pending timers costs at most 1.5× the tick at 10².",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
