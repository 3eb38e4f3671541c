"""End to end, add-domain (Kirby mode enabled) and onboard-domain on the sandbox, ``RUNS``
times each in turn (default 20): the time from acceptance to the terminal event, split by
stage, p50, p90 and p99, with the engine's share.

The stack is the one ``make run`` starts: PostgreSQL and Redis, one Celery worker (2
processes) and beat, and all three stand-ins with ``make run``'s delays: Route53 reports a
change INSYNC after 2 s, ACM publishes validation records after ``BENCH_ACM_RECORD_DELAY`` s
(1) and issues ``BENCH_ACM_ISSUE_DELAY`` s (3) after they are served, an ArgoCD sync takes
``BENCH_CONVERGE_DELAY`` s (3). Each add-domain is a new name in example.com, each
onboard-domain a new domain (its zone created); they hold the ``aws-infrastructure`` lane and
go one after the other, so none queues.

The split, from the database's own timestamps: ``total`` (the accepted event → the terminal
event), ``queue`` (accepted → plan starts), each stage's wall time (first start → finish, a
wait included: the certificate stage is the child add-certificate; dns includes its INSYNC
wait; routing its ArgoCD wait) and the hand-offs between stages.

``python -m bench add_domain``. Writes bench/reports/add_domain.md and prints it.
"""

from __future__ import annotations

import os
import uuid

from bench.sandbox import ROOT, accept_and_finish, parts_of, report, sandbox_running
from bench.sandbox import stage_parts as parts_of_run

REPORT = ROOT / "bench" / "reports" / "add_domain.md"
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
RECORD_DELAY = float(os.environ.get("BENCH_ACM_RECORD_DELAY", "1.0"))
ISSUE_DELAY = float(os.environ.get("BENCH_ACM_ISSUE_DELAY", "3.0"))
CONVERGE_DELAY = float(os.environ.get("BENCH_CONVERGE_DELAY", "3.0"))
ADD = ("plan", "certificate", "dns", "routing", "booking", "verify")
ONBOARD = ("plan", "hosted_zone", "certificate", "dns", "routing", "booking", "verify")


def _add(label: str) -> dict[str, float]:
    body = {"domain": f"{label}.example.com", "kirby_mode": "enabled"}
    return parts_of_run(accept_and_finish("add-domain", body, f"bench-{label}"), ADD)


def _onboard(label: str) -> dict[str, float]:
    body = {"domain": f"{label}.org"}
    return parts_of_run(accept_and_finish("onboard-domain", body, f"bench-{label}"), ONBOARD)


def main() -> None:
    with sandbox_running(
        "bench-add-domain",
        platform=True,
        route53_change_delay=2.0,
        converge_delay=CONVERGE_DELAY,
        acm_record_delay=RECORD_DELAY,
        acm_issue_delay=ISSUE_DELAY,
    ):
        _add(f"warm-{uuid.uuid4().hex[:6]}")
        added = [_add(f"b{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
        onboarded = [_onboard(f"b{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
    intro = (
        f"`python -m bench add_domain` — {RUNS} add-domain executions (Kirby mode enabled: two "
        f"Helm commits) and then {RUNS} onboard-domain executions in turn on the sandbox "
        f"({os.cpu_count()} cores): real PostgreSQL and Redis, one Celery worker with 2 "
        "processes and beat, the three stand-ins with Route53 INSYNC after 2 s, ACM records "
        f"after {RECORD_DELAY:g} s and issuance {ISSUE_DELAY:g} s after they are served, an "
        f"ArgoCD sync of {CONVERGE_DELAY:g} s. Times in ms, from the database's timestamps."
    )
    outro = (
        "Where the time goes: the certificate stage is the child add-certificate (ACM's "
        "delays rounded up to its 1 s and 2 s polls); dns is Route53's INSYNC wait (polled "
        "every 2 s); routing is ArgoCD's sync, polled every 2 s. The engine's own share is "
        "the hand-offs and the queue: tens of milliseconds."
    )
    report(REPORT, "add-domain benchmark", intro, parts_of(ADD), added, outro)
    text = REPORT.read_text()
    report(REPORT, "onboard-domain benchmark", "", parts_of(ONBOARD), onboarded, "")
    REPORT.write_text(text + "\n" + REPORT.read_text())
