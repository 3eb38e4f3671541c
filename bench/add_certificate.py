"""End to end, an add-certificate on the sandbox, ``RUNS`` times in turn (default 20): the
time from acceptance to the terminal event, split by stage,
p50, p90 and p99, with the engine's share.

The stack is the one ``make run`` starts: PostgreSQL and Redis, one Celery worker (2
processes) and beat, and the AWS stand-in with the sandbox's delays: ACM publishes the
validation records ``BENCH_ACM_RECORD_DELAY`` s (1) after the request and issues the
certificate ``BENCH_ACM_ISSUE_DELAY`` s (3) after its CNAMEs are served; Route53's
PENDING → INSYNC delay is 2 s (unwaited here). Each run is a new name in example.com (and
its ``www.``), accepted through the acceptance service. add-certificate holds the
``aws-infrastructure`` lane; the runs go one after the other, so none queues.

The split, from the database's own timestamps: ``total`` (the accepted event → the terminal
event), ``queue`` (accepted → plan starts), each stage's wall time (first start → finish, a
wait included), the hand-offs between stages, and inside validate_dns the wait for ACM's
records and the batch (validate_dns starts → the batch's receipt).

``python -m bench add_certificate``. Writes bench/reports/add_certificate.md and prints it.
"""

from __future__ import annotations

import os
import uuid

from bench.sandbox import ROOT, accept_and_finish, parts_of, report, sandbox_running, span
from bench.sandbox import stage_parts as parts_of_run

REPORT = ROOT / "bench" / "reports" / "add_certificate.md"
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
RECORD_DELAY = float(os.environ.get("BENCH_ACM_RECORD_DELAY", "1.0"))
ISSUE_DELAY = float(os.environ.get("BENCH_ACM_ISSUE_DELAY", "3.0"))
STAGES = ("plan", "request", "validate_dns", "await_issued", "verify")
PARTS = parts_of(STAGES, ("validate_dns", "records wait + batch"))


def _one(label: str) -> dict[str, float]:
    from executions.models import StepReceipt

    domain = f"{label}.example.com"
    run = accept_and_finish(
        "add-certificate",
        {"domain": domain, "alternative_names": [f"www.{domain}"]},
        f"bench-{label}",
    )
    batch = StepReceipt.objects.filter(
        run_id=run.execution.current_run_id, stage="validate_dns", step_key__startswith="batch:"
    ).earliest("created_at")
    return {
        **parts_of_run(run, STAGES),
        "  records wait + batch": span(run.stages["validate_dns"].started_at, batch.created_at),
    }


def main() -> None:
    with sandbox_running(
        "bench-add-certificate", acm_record_delay=RECORD_DELAY, acm_issue_delay=ISSUE_DELAY
    ):
        _one(f"warm-{uuid.uuid4().hex[:6]}")
        samples = [_one(f"bench-{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
    report(
        REPORT,
        "add-certificate benchmark",
        f"`python -m bench add_certificate` — {RUNS} add-certificate executions (a name and "
        f"its `www.`, one zone) in turn on the sandbox ({os.cpu_count()} cores): real "
        "PostgreSQL and Redis, one Celery worker with 2 processes and beat, the AWS stand-in "
        f"with ACM publishing validation records after {RECORD_DELAY:g} s and issuing "
        f"{ISSUE_DELAY:g} s after its CNAMEs are served. Times in ms, from the database's "
        "timestamps.",
        PARTS,
        samples,
        "The records wait (polled every 1 s) and await_issued (polled every 2 s, durable "
        "timers: no worker is held) are the stand-in's delays rounded up to the poll; they "
        "dominate the total. The rest is the engine's hand-offs and the calls to the "
        "stand-in.",
    )
