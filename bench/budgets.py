"""The providers' rate budgets (``alfred.budgets``): what a draw costs, how close a shared budget
keeps to its rate across processes, and what it spares the providers.

1. **A draw that waits for nothing**: one Redis script round trip, timed over 2,000 draws.
2. **A shared budget of 20/s** drawn by 2, 4 and 8 processes at once (40 draws each): the rate
   achieved over all of them, and each draw's wait.
3. **Against the AWS stand-in metering Route53 at AWS's 5/s**: 4 processes each sending 25
   ``ListHostedZones`` with botocore's standard retries, once drawing from a 4/s budget and
   once from none. The same requests either way: what differs is how many AWS refused
   (``Throttling``, counted by the stand-in) and how long they took.

Each figure is min / median / max over ``ROUNDS`` rounds. Writes bench/reports/budgets.md.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from bench.stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "budgets.md"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def _spread(values: list[float], unit: str = "", digits: int = 2) -> str:
    return (
        f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / "
        f"{max(values):.{digits}f}{unit}"
    )


def _draws(url: str, key: str, rate: float, count: int, out: Any) -> None:
    from alfred.budgets import RedisBudget
    from providers.budgets import Rate

    budget = RedisBudget(url, {"bench": Rate(rate, max(1, int(rate)))}, longest=600.0)
    waits = []
    for _ in range(count):
        waits.append(budget.draw("bench", key, "Op"))
    out.put(waits)


def _shared(url: str, processes: int, rate: float, each: int) -> tuple[float, list[float]]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    key = uuid.uuid4().hex
    started = time.monotonic()
    drawers = [
        context.Process(target=_draws, args=(url, key, rate, each, out)) for _ in range(processes)
    ]
    for drawer in drawers:
        drawer.start()
    waits = [w for _ in drawers for w in out.get(timeout=600)]
    for drawer in drawers:
        drawer.join()
    elapsed = time.monotonic() - started
    return processes * each / elapsed, waits


def _aws_calls(env: dict[str, str], url: str, budgeted: bool, count: int, out: Any) -> None:
    os.environ.update(env)
    from alfred.budgets import RedisBudget
    from providers.aws.clients import AwsClients
    from providers.budgets import Rate, budget_install
    from providers.config import ProviderConfig

    # this process's own: the one Django's start installed from the settings is left out
    budget_install(
        RedisBudget(url, {"aws.route53": Rate(4.0, 4)}, longest=600.0) if budgeted else None
    )
    config = ProviderConfig.from_env(env).aws
    client = AwsClients.from_config(config).client("route53", max_attempts=10)
    failed = 0
    for _ in range(count):
        try:
            client.list_hosted_zones()
        except Exception:
            failed += 1
    out.put(failed)


def _against_standin(url: str, budgeted: bool) -> tuple[float, int, int]:
    from providers.sandbox.aws import RATES, AwsStandIn

    standin = AwsStandIn(rates={"route53": RATES["route53"]}).start()
    env = {
        "AWS_ENDPOINT_URL": standin.url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": f"bench{uuid.uuid4().hex[:8]}",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }
    try:
        time.sleep(1.0)  # the stand-in's bucket full, as an idle account's
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        started = time.monotonic()
        senders = [
            context.Process(target=_aws_calls, args=(env, url, budgeted, 25, out)) for _ in range(4)
        ]
        for sender in senders:
            sender.start()
        failed = sum(out.get(timeout=600) for _ in senders)
        for sender in senders:
            sender.join()
        elapsed = time.monotonic() - started
        return elapsed, standin.journal()["throttled"].get("route53", 0), failed
    finally:
        standin.stop()


def main() -> int:
    env, stack = bench_stack("bench-budgets")
    os.environ.update(env)
    import django

    django.setup()
    from alfred.broker import redis_url_of
    from alfred.budgets import RedisBudget
    from providers.budgets import Rate

    url = redis_url_of(env["CELERY_BROKER_URL"]) or env["CELERY_BROKER_URL"]
    try:
        lines = [
            "# Rate budgets",
            "",
            "`make bench-budgets` (bench/budgets.py). Each figure: min / median / max over "
            f"{ROUNDS} rounds, on this machine ({os.cpu_count()} cores), Redis embedded.",
            "",
            "## A draw that waits for nothing",
            "",
        ]
        costs = []
        for _ in range(ROUNDS):
            budget = RedisBudget(url, {"bench": Rate(1e6, 1_000_000)}, longest=1.0)
            key = uuid.uuid4().hex
            started = time.perf_counter()
            for _ in range(2000):
                budget.draw("bench", key, "Op")
            costs.append((time.perf_counter() - started) / 2000 * 1000)
        lines += [f"- per draw: {_spread(costs, ' ms', 3)} (one Redis script round trip)", ""]
        lines += [
            "## One budget of 20/s shared by several processes (40 draws each)",
            "",
            "| processes | rate achieved (/s) | median wait (s) | longest wait (s) |",
            "|---:|---:|---:|---:|",
        ]
        for processes in (2, 4, 8):
            rates, medians, longest = [], [], []
            for _ in range(ROUNDS):
                achieved, waits = _shared(url, processes, 20.0, 40)
                rates.append(achieved)
                medians.append(statistics.median(waits))
                longest.append(max(waits))
            lines.append(
                f"| {processes} | {_spread(rates)} | {_spread(medians)} | {_spread(longest)} |"
            )
        lines += [
            "",
            "The first second's worth (20) goes at once; the rest at 20/s, so 80 draws take "
            "about 3 s and 320 about 15 s: the achieved rate approaches 20/s as the burst "
            "weighs less.",
            "",
            "## 100 Route53 requests from 4 processes, the stand-in metering AWS's 5/s",
            "",
            "| | took (s) | refused by AWS (Throttling) | failed after botocore's retries |",
            "|---|---:|---:|---:|",
        ]
        for budgeted in (True, False):
            took, refused, failed = [], [], []
            for _ in range(ROUNDS):
                elapsed, throttled, lost = _against_standin(url, budgeted)
                took.append(elapsed)
                refused.append(float(throttled))
                failed.append(float(lost))
            label = "budget of 4/s" if budgeted else "no budget"
            lines.append(
                f"| {label} | {_spread(took)} | {_spread(refused, '', 0)} | "
                f"{_spread(failed, '', 0)} |"
            )
        lines += [
            "",
            "What still differs: without a budget botocore's retries (standard mode, up to 10 "
            "attempts, exponential backoff with jitter) get most requests through in the end, "
            "at the price of the refusals counted, each of which also spent the account's "
            "limit for everyone else; with it, the requests wait their turn and none is "
            "refused. The budget runs at 4/s, under AWS's 5/s, so it can be slower than "
            "retrying when nothing else shares the account.",
        ]
        REPORT.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        if stack is not None:
            stack.stop()
    return 0
