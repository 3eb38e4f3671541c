"""What the workflow benchmarks share: the stack ``make run`` starts (PostgreSQL and Redis,
one Celery worker with 2 processes and beat) on the AWS stand-in, seeded like ``make run``;
the time from a stage's timestamps; and the report's table of p50, p90 and p99 per part,
with the engine's share."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alfred.principals import cli_caller
from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent


def _celery(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "alfred", *args, "--loglevel", "WARNING"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )


@contextmanager
def sandbox_running(name: str, *, platform: bool = False, **standin: Any) -> Iterator[None]:
    """The stack on a fresh database, the AWS stand-in started with ``standin`` options (with
    ``platform``: all three stand-ins, as ``make run`` starts them, ``standin`` their
    options); this process set up for Django against it."""
    from providers.sandbox.aws import AwsStandIn, seed_aws
    from providers.sandbox.stack import Sandbox

    providers: dict[str, str]
    if platform:
        root = ROOT / ".alfred" / f"{name}-sandbox"
        shutil.rmtree(root, ignore_errors=True)
        aws: Any = Sandbox(root=root, **standin).start()
        providers = aws.environ()
    else:
        aws = AwsStandIn(**standin).start()
        seed_aws(aws.url)
        providers = {
            "ALFRED_PROVIDERS": "sandbox",
            "AWS_ENDPOINT_URL": aws.url,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "sandbox",
            "AWS_SECRET_ACCESS_KEY": "sandbox",  # the stand-in's placeholder
        }
    stack = None
    processes: list[subprocess.Popen[bytes]] = []
    try:
        env, stack = bench_stack(name, **providers)
        os.environ.update(env)
        import django

        django.setup()
        processes = [
            _celery(
                env,
                "worker",
                "-Q",
                "stages,scanners,celery",
                "--concurrency",
                "2",
                "-n",
                "bench@%h",
            ),
            _celery(env, "beat", "--schedule", str(ROOT / ".alfred" / f"{name}-beat-schedule")),
        ]
        yield
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(30)
        aws.stop()
        if stack is not None:
            stack.stop()


@dataclass(frozen=True)
class Finished:
    """A succeeded execution, with what its timings are read from."""

    execution: Any
    stages: dict[str, Any]  # the run's Stage rows by name
    accepted: Any  # the execution.accepted event's time
    terminal: Any  # the execution.succeeded event's time


def accept_and_finish(workflow: str, body: dict[str, Any], key: str) -> Finished:
    """Accept ``body`` (through the acceptance service) and wait for it to succeed."""
    from executions.acceptance import execution_accept
    from executions.models import Execution, OutboxEvent, Stage

    execution = execution_accept(
        workflow_name=workflow, body=body, idempotency_key=key, caller=cli_caller("bench")
    ).execution
    deadline = time.monotonic() + 120
    while not Execution.objects.get(pk=execution.pk).terminal:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{execution.id} did not finish in 120 s")
        time.sleep(0.02)
    done = Execution.objects.get(pk=execution.pk)
    if done.status != "succeeded":
        raise RuntimeError(f"{execution.id} ended {done.status}: {done.error}")
    events = OutboxEvent.objects.filter(execution=done)
    return Finished(
        execution=done,
        stages={s.name: s for s in Stage.objects.filter(run_id=done.current_run_id)},
        accepted=events.get(type="execution.accepted").created_at,
        terminal=events.get(type="execution.succeeded").created_at,
    )


def span(start: Any, end: Any) -> float:
    """Seconds from ``start`` to ``end`` (datetimes)."""
    return float((end - start).total_seconds())


def stage_parts(run: Finished, names: Sequence[str]) -> dict[str, float]:
    """``queue`` (accepted → the first stage), each stage's wall time (first start → finish, a
    wait included), the hand-offs between stages, and ``total`` (accepted → terminal event)."""
    stages = run.stages
    parts = {
        "queue": span(run.accepted, stages[names[0]].started_at),
        "total": span(run.accepted, run.terminal),
    }
    for before, name in zip((None, *names), names, strict=False):
        parts[name] = span(stages[name].started_at, stages[name].finished_at)
        if before is not None:
            parts[f"{before} → {name}"] = span(stages[before].finished_at, stages[name].started_at)
    return parts


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def parts_of(names: Sequence[str], *inside: tuple[str, str]) -> tuple[str, ...]:
    """The report's rows: queue, each stage and the hand-off before it, total; ``inside``
    (stage, part) rows go right after their stage."""
    rows = ["queue"]
    for before, name in zip((None, *names), names, strict=False):
        if before is not None:
            rows.append(f"{before} → {name}")
        rows.append(name)
        rows += [f"  {part}" for stage, part in inside if stage == name]
    return (*rows, "total")


def report(
    path: Path,
    title: str,
    intro: str,
    parts: Sequence[str],
    samples: Sequence[dict[str, float]],
    outro: str,
) -> None:
    """Write (and print) the report: p50, p90 and p99 of every part, in ms, and the engine's
    share: the queue and the hand-offs between stages, where no stage runs and the time is
    the engine's own (claiming, fencing, publishing the next stage)."""

    def engine(sample: dict[str, float]) -> float:
        return sample["queue"] + sum(v for k, v in sample.items() if " → " in k)

    def cells(values: list[float]) -> str:
        return " | ".join(
            f"{q(values) * 1000:.0f}"
            for q in (
                statistics.median,
                lambda v: percentile(v, 0.9),
                lambda v: percentile(v, 0.99),
            )
        )

    rows = [f"| {part} | {cells([s[part] for s in samples])} |" for part in parts]
    head = ["| part | p50 | p90 | p99 |", "|---|---:|---:|---:|"]
    shares = [engine(s) / s["total"] for s in samples]
    share = (
        f"The engine's share (queue and hand-offs between stages, where no stage runs): "
        f"p50 {statistics.median(engine(s) for s in samples) * 1000:.0f} ms of "
        f"{statistics.median(s['total'] for s in samples) * 1000:.0f} ms, "
        f"{statistics.median(shares) * 100:.1f}% (p99 {percentile(shares, 0.99) * 100:.1f}%) "
        f"over {len(samples)} executions."
    )
    lines = [f"# {title}", "", intro, "", *head, *rows, "", share, "", outro, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print("\n".join(lines))
