"""End to end, update-lambda-version on the sandbox's seeded fleet ``checkout-api`` (three
functions), ``RUNS`` times in turn (default 20), production moved 2 → 3 → 2 ...: the time from
acceptance to the terminal event, split by stage,
p50, p90 and p99, with the engine's share.

The stack is the one ``make run`` starts: PostgreSQL and Redis, one Celery worker (2
processes) and beat, and the AWS stand-in (Lambda's update status settles after
``BENCH_LAMBDA_DELAY`` s, 0.5 by default, as under ``make run``). Each run is accepted through
the acceptance service with a ticket id of its own (a new logical identity on the same lane);
the next is accepted once the lane is free again.

The split, from the database's own timestamps: ``total`` (the accepted event → the terminal
event), ``queue`` (accepted → plan starts), each stage's wall time (first start → finish, a
wait included) and the hand-offs between stages.

``python -m bench update_lambda_version``. Writes bench/reports/update_lambda_version.md
and prints it.
"""

from __future__ import annotations

import os
import time

from bench.sandbox import ROOT, accept_and_finish, parts_of, report, sandbox_running
from bench.sandbox import stage_parts as parts_of_run

REPORT = ROOT / "bench" / "reports" / "update_lambda_version.md"
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
LAMBDA_DELAY = float(os.environ.get("BENCH_LAMBDA_DELAY", "0.5"))
TARGET, ENVIRONMENT, LANE = "checkout-api", "production", "lambda:checkout-api:production"
STAGES = ("plan", "update_aliases", "await_updates", "verify")
PARTS = parts_of(STAGES)


def _lane_free() -> bool:
    from lanes.models import Lane

    lane = Lane.objects.filter(key=LANE).values_list("state", "owner_id").first()
    return lane is None or lane == ("free", None)


def _one(run: int, version: str) -> dict[str, float]:
    deadline = time.monotonic() + 120
    while not _lane_free():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{LANE} is still held after 120 s")
        time.sleep(0.02)
    body = {
        "target": TARGET,
        "environment": ENVIRONMENT,
        "version": version,
        "ticket_ids": [f"BENCH-{run + 1}"],
    }
    finished = accept_and_finish(
        "update-lambda-version", body, f"bench-lambda-{run}-{time.time_ns()}"
    )
    return parts_of_run(finished, STAGES)


def main() -> None:
    with sandbox_running("bench-update-lambda-version", lambda_update_delay=LAMBDA_DELAY):
        _one(0, "3")  # warm-up: the seed has production at 2
        samples = [_one(i, "2" if i % 2 else "3") for i in range(1, RUNS + 1)]
    report(
        REPORT,
        "update-lambda-version benchmark",
        f"{RUNS} update-lambda-version executions in turn on the sandbox's `checkout-api` "
        f"fleet (3 functions, production moved between versions 2 and 3; "
        f"{os.cpu_count()} cores): real PostgreSQL and Redis, one Celery worker with 2 "
        "processes and beat, the AWS stand-in (moto behind it). Times in ms, from the "
        "database's timestamps.",
        PARTS,
        samples,
        "update_aliases is one compare-and-swap step per function (a read, the UpdateAlias, "
        "the version's status), each with its receipt; await_updates is usually one poll, "
        "as the versions were published long before (Lambda moves an alias at once).",
    )
