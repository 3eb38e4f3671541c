"""``python -m bench overhead``: what the operations layer costs the stage path.

Metrics are counted on every stage, step, transition and provider call, and the engine opens
a span per stage and step (a no-op unless tracing is configured); logs carry the stage's
context. So the engine's throughput (``bench.engine``: 300 no-op workflows of 4 stages on a
worker of 2 processes) is measured on this checkout with the metrics in prometheus-client's
multiprocess mode (files under ``PROMETHEUS_MULTIPROC_DIR``, as in production), and on the
commit before the operations layer (``BASELINE``, checked out in a worktree of its own), in
turns, each on a fresh embedded stack; the report compares the medians. The target: at most
5% fewer executions per second.
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
ROUNDS = 5
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
    "executions/engine/tracing",
)

# Run in the checkout under test (its own modules first on the path), printing one number.
_MEASURE = """
import sys
from bench import engine
env, stack = engine._setup()
try:
    print(engine._engine_throughput(env, 2))
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


def _throughput(checkout: Path, metrics_dir: str | None, shim: Path | None = None) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    env["PYTHONPATH"] = f"{shim}{os.pathsep}{checkout}" if shim else str(checkout)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


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


def main() -> None:
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
            before: list[float] = []
            after: list[float] = []
            for _ in range(ROUNDS):
                before.append(_throughput(baseline, None, shim))
                with tempfile.TemporaryDirectory(prefix="alfred-metrics-") as metrics:
                    after.append(_throughput(ROOT, metrics))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(baseline)],
                cwd=ROOT,
                check=False,
                capture_output=True,
            )
    with tempfile.TemporaryDirectory(prefix="alfred-metrics-") as metrics:
        share = _profiled_share(metrics)
    old, new = statistics.median(before), statistics.median(after)
    cost = 1 - new / old
    spread = (max(before) - min(before)) / old
    verdict = "met" if cost <= TARGET else "not met"
    lines = [
        "# The operations layer's overhead on the stage path",
        "",
        "`python -m bench overhead` — `bench.engine`'s throughput (300 no-op workflows of 4 "
        "stages, a worker of 2 processes, a fresh embedded PostgreSQL and Redis each time) on "
        f"commit {BASELINE} (before metrics, JSON logs and traces) and on this checkout with "
        "its metrics in multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`, as in production; "
        f"tracing off, as by default), in turns, {ROUNDS} rounds, on this machine "
        f"({os.cpu_count()} cores).",
        "",
        "| | executions per second (each round) | median |",
        "|---|---|---:|",
        f"| before ({BASELINE}) | {', '.join(f'{r:.1f}' for r in before)} | {old:.1f} |",
        f"| this checkout | {', '.join(f'{r:.1f}' for r in after)} | {new:.1f} |",
        "",
        f"Throughput lost: {cost * 100:.1f}% (target: at most {TARGET * 100:.0f}%): {verdict}, "
        f"on runs of the same code that differ by up to {spread * 100:.0f}% among themselves.",
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
