"""``python -m bench overhead``: what the operations layer costs the stage path.

Metrics are counted on every stage, step, transition and provider call, and the engine opens
a span per stage and step (a no-op unless tracing is configured); logs carry the stage's
context. So the engine's throughput (``bench.engine``'s no-op workflows of 4 stages on a
worker of 2 processes, ``EXECUTIONS`` of them) and the machine's CPU time per execution are
measured on this checkout with the metrics in prometheus-client's multiprocess mode (files
under ``PROMETHEUS_MULTIPROC_DIR``, as in production), and on the commit before the
operations layer (``BASELINE``, checked out in a worktree of its own), one after the other in
each round, each on a fresh embedded stack; the report takes the median of the rounds'
ratios. The target: at most 5% fewer executions per second, and at most 5% more CPU each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "reports" / "overhead.md"
BASELINE = "345777b"  # beat's lease: the last commit before metrics, logs and traces
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "8"))
# Executions per measurement: enough that a round drains for several seconds, so a stall of
# the host weighs little in it (bench.engine's 300 drain in about two).
EXECUTIONS = os.environ.get("BENCH_EXECUTIONS", "1000")
TARGET = 0.05

# In this checkout: the in-process stage path (``bench.engine._step_overhead``) under
# cProfile, and the share of its time spent inside the operations layer's own code.
_PROFILE = """
import cProfile, pstats
from bench import engine
env, stack = engine._setup()
try:
    profile = cProfile.Profile()
    profile.enable()
    engine._step_overhead()
    profile.disable()
    stats = pstats.Stats(profile).stats
    total = sum(tottime for (_, _, tottime, _, _) in stats.values())
    ours = sum(
        tottime
        for (path, _, _), (_, _, tottime, _, _) in stats.items()
        if any(part in path for part in LAYER)
    )
    print(ours / total)
finally:
    if stack is not None:
        stack.stop()
"""
LAYER = (
    "prometheus_client",
    "opentelemetry",
    "alfred/metrics",
    "alfred/logs",
    "executions/runtime/tracing",
)

# Run in the checkout under test (its own modules first on the path), printing one number.
# Beside the throughput, the machine's CPU time while the worker drained (worker, PostgreSQL,
# Redis: /proc/stat's busy time, the host otherwise idle), per execution: what the layer adds
# to each execution's work, which a stall of the host lengthens no more than the work itself.
_MEASURE = """
import os
from bench import engine

def busy():
    fields = [int(f) for f in open("/proc/stat").readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]  # not steal: another guest's
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")

drain, spent = engine._drain, []
def timed_drain(*args, **kwargs):
    started = busy()
    try:
        drain(*args, **kwargs)
    finally:
        spent.append(busy() - started)
engine._drain = timed_drain

env, stack = engine._setup()
try:
    rate = engine._engine_throughput(env, 2)
    print(rate, spent[0] / engine.EXECUTIONS * 1000)
finally:
    if stack is not None:
        stack.stop()
"""


# The venv installs this checkout in editable mode, whose import finder would hand the
# baseline this checkout's modules wherever the baseline has none (alfred.tasks, say): a
# sitecustomize on the baseline's path takes that finder out of every process it starts.
_NO_EDITABLE = """
import sys
def ours(found):
    return "__editable__" not in getattr(found, "__module__", "")
sys.meta_path[:] = [finder for finder in sys.meta_path if ours(finder)]
sys.path_hooks[:] = [hook for hook in sys.path_hooks if ours(hook)]
sys.path_importer_cache.clear()
"""


def _measured(
    checkout: Path, metrics_dir: str | None, shim: Path | None = None
) -> tuple[float, float]:
    """Executions per second, and the machine's CPU milliseconds per execution."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    env["PYTHONPATH"] = f"{shim}{os.pathsep}{checkout}" if shim else str(checkout)
    env["BENCH_EXECUTIONS"] = EXECUTIONS
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rate, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


def _profiled_share(metrics_dir: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    done = subprocess.run(
        [sys.executable, "-c", f"LAYER = {LAYER!r}\n{_PROFILE}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def _row(name: str, figures: list[float], digits: int) -> str:
    each = ", ".join(f"{f:.{digits}f}" for f in figures)
    return f"| {name} | {each} | {statistics.median(figures):.{digits}f} |"


def main() -> None:
    before: list[tuple[float, float]] = []
    after: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="alfred-baseline-") as base:
        baseline = Path(base) / "checkout"
        shim = Path(base) / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(_NO_EDITABLE)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(baseline), BASELINE],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            for round in range(ROUNDS):
                # Which goes first alternates: a host that warms or slows down within a round
                # favours neither side.
                for side in (0, 1) if round % 2 == 0 else (1, 0):
                    if side == 0:
                        before.append(_measured(baseline, None, shim))
                        continue
                    with tempfile.TemporaryDirectory(prefix="alfred-metrics-") as metrics:
                        after.append(_measured(ROOT, metrics))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(baseline)],
                cwd=ROOT,
                check=False,
                capture_output=True,
            )
    with tempfile.TemporaryDirectory(prefix="alfred-metrics-") as metrics:
        share = _profiled_share(metrics)
    rates_before, cpu_before = [r for r, _ in before], [c for _, c in before]
    rates_after, cpu_after = [r for r, _ in after], [c for _, c in after]
    # Each round's two runs follow one another: their ratio is what the round says.
    lost = statistics.median(
        1 - new / old for old, new in zip(rates_before, rates_after, strict=True)
    )
    added = statistics.median(new / old - 1 for old, new in zip(cpu_before, cpu_after, strict=True))
    spread = (max(rates_before) - min(rates_before)) / statistics.median(rates_before)
    cpu_spread = (max(cpu_before) - min(cpu_before)) / statistics.median(cpu_before)
    verdict = "met" if max(lost, added) <= TARGET else "not met"
    lines = [
        "# The operations layer's overhead on the stage path",
        "",
        f"`python -m bench overhead` — `bench.engine`'s throughput ({EXECUTIONS} no-op "
        "workflows of 4 stages drained by a worker of 2 processes, on a fresh embedded "
        f"PostgreSQL and Redis each time) on commit {BASELINE} (before metrics, JSON logs and "
        "traces) and on this checkout with its metrics in multiprocess mode "
        "(`PROMETHEUS_MULTIPROC_DIR`, as in production; tracing off, as by default): one "
        f"after the other, the first of the two alternating, in each of {ROUNDS} rounds, on "
        f"this machine ({os.cpu_count()} cores). Beside each run's executions per second, "
        "the machine's CPU time while the worker drained (worker, PostgreSQL and Redis "
        "together, from /proc/stat, less the time the hypervisor gave other guests), per "
        "execution.",
        "",
        "| | each round | median |",
        "|---|---|---:|",
        _row(f"executions/s before ({BASELINE})", rates_before, 1),
        _row("executions/s, this checkout", rates_after, 1),
        _row(f"CPU ms per execution before ({BASELINE})", cpu_before, 2),
        _row("CPU ms per execution, this checkout", cpu_after, 2),
        "",
        f"- Throughput lost, the median of the rounds' ratios: {lost * 100:.1f}% (runs of "
        f"the same code differ by up to {spread * 100:.0f}% among themselves).",
        f"- CPU time added per execution, likewise: {added * 100:.1f}% (runs of the same code "
        f"differ by up to {cpu_spread * 100:.0f}%).",
        f"- Target, at most {TARGET * 100:.0f}% on both: {verdict}.",
        "",
        "Profiled (cProfile, this checkout, multiprocess metrics): of the in-process stage "
        "path's time (`bench.engine`'s empty stages and no-op steps: claim, steps, completion), "
        f"{share * 100:.1f}% is spent inside the operations layer's code (prometheus-client, "
        "OpenTelemetry's API, `alfred.metrics`, `alfred.logs`, the engine's spans).",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines))
    print("\n".join(lines))
