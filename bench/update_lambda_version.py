"""End to end, update-lambda-version on the sandbox's seeded fleet ``checkout-api`` (three
functions), ``RUNS`` times in turn (default 10), production moved 2 → 3 → 2 ...: the time from
acceptance to the terminal event, split by stage, p50 and p90.

The stack is the one ``make run`` starts: PostgreSQL and Redis, one Celery worker (2
processes) and beat, and the AWS stand-in (Lambda's update status settles after
``BENCH_LAMBDA_DELAY`` s, 0.5 by default, as under ``make run``). Each run is accepted through
the acceptance service with a ticket id of its own (a new logical identity on the same lane);
the next is accepted once the lane is free again.

The split, from the database's own timestamps: ``total`` (the accepted event → the terminal
event), ``queue`` (accepted → plan starts), each stage's wall time (first start → finish, a
wait included) and the hand-offs between stages.

Writes bench/reports/update_lambda_version.md and prints it. Not in ``python -m bench``'s
list yet: run it as ``python -c 'from bench.update_lambda_version import main; main()'``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alfred.principals import cli_caller
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "update_lambda_version.md"
RUNS = int(os.environ.get("BENCH_RUNS", "10"))
LAMBDA_DELAY = float(os.environ.get("BENCH_LAMBDA_DELAY", "0.5"))
TARGET, ENVIRONMENT, LANE = "checkout-api", "production", "lambda:checkout-api:production"
STAGES = ("plan", "update_aliases", "await_updates", "verify")
PARTS = (
    "queue",
    "plan",
    "plan → update_aliases",
    "update_aliases",
    "update_aliases → await_updates",
    "await_updates",
    "await_updates → verify",
    "verify",
    "total",
)


def _celery(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "alfred", *args, "--loglevel", "WARNING"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )


def _lane_free() -> bool:
    from lanes.models import Lane

    lane = Lane.objects.filter(key=LANE).values_list("state", "owner_id").first()
    return lane is None or lane == ("free", None)


def _one(run: int, version: str) -> dict[str, float]:
    from executions.acceptance import execution_accept
    from executions.models import Execution, OutboxEvent, Stage

    deadline = time.monotonic() + 120
    while not _lane_free():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{LANE} is still held after 120 s")
        time.sleep(0.02)
    execution = execution_accept(
        workflow_name="update-lambda-version",
        body={
            "target": TARGET,
            "environment": ENVIRONMENT,
            "version": version,
            "ticket_ids": [f"BENCH-{run + 1}"],
        },
        idempotency_key=f"bench-lambda-{run}-{time.time_ns()}",
        caller=cli_caller("bench"),
    ).execution
    while not Execution.objects.get(pk=execution.pk).terminal:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{execution.id} did not finish in 120 s")
        time.sleep(0.02)
    done = Execution.objects.get(pk=execution.pk)
    if done.status != "succeeded":
        raise RuntimeError(f"{execution.id} ended {done.status}: {done.error}")
    stages = {s.name: s for s in Stage.objects.filter(run_id=done.current_run_id)}
    events = OutboxEvent.objects.filter(execution=done)
    accepted = events.get(type="execution.accepted").created_at
    terminal = events.get(type="execution.succeeded").created_at

    def span(start: Any, end: Any) -> float:
        return float((end - start).total_seconds())

    parts = {"queue": span(accepted, stages["plan"].started_at), "total": span(accepted, terminal)}
    for i, name in enumerate(STAGES):
        parts[name] = span(stages[name].started_at, stages[name].finished_at)
        if i:
            before = stages[STAGES[i - 1]]
            parts[f"{STAGES[i - 1]} → {name}"] = span(before.finished_at, stages[name].started_at)
    return parts


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    from providers.sandbox.aws import AwsStandIn, seed_aws

    aws = AwsStandIn(lambda_update_delay=LAMBDA_DELAY).start()
    seed_aws(aws.url)
    env, stack = bench_stack(
        "bench-update-lambda-version",
        ALFRED_PROVIDERS="sandbox",
        AWS_ENDPOINT_URL=aws.url,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="sandbox",
        AWS_SECRET_ACCESS_KEY="sandbox",  # noqa: S106 - the stand-in's placeholder
    )
    os.environ.update(env)
    import django

    django.setup()
    worker = _celery(
        env, "worker", "-Q", "stages,scanners,celery", "--concurrency", "2", "-n", "bench@%h"
    )
    beat = _celery(env, "beat", "--schedule", str(ROOT / ".alfred" / "bench-beat-schedule"))
    samples: list[dict[str, float]] = []
    try:
        _one(0, "3")  # warm-up: the seed has production at 2
        for i in range(1, RUNS + 1):
            samples.append(_one(i, "2" if i % 2 else "3"))
    finally:
        for process in (beat, worker):
            process.terminate()
            process.wait(30)
        aws.stop()
        if stack is not None:
            stack.stop()
    rows = [
        f"| {part} | {statistics.median(s[part] for s in samples) * 1000:.0f} "
        f"| {_percentile([s[part] for s in samples], 0.9) * 1000:.0f} |"
        for part in PARTS
    ]
    lines = [
        "# update-lambda-version benchmark",
        "",
        f"{RUNS} update-lambda-version executions in turn on the sandbox's `checkout-api` "
        f"fleet (3 functions, production moved between versions 2 and 3; "
        f"{os.cpu_count()} cores): real PostgreSQL and Redis, one Celery worker with 2 "
        "processes and beat, the AWS stand-in (moto behind it). Times in ms, from the "
        "database's timestamps.",
        "",
        "| part | p50 | p90 |",
        "|---|---:|---:|",
        *rows,
        "",
        "update_aliases is one compare-and-swap step per function (a read, the UpdateAlias, "
        "the version's status), each with its receipt; await_updates is usually one poll, "
        "as the versions were published long before (Lambda moves an alias at once).",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
