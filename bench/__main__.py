"""``python -m bench [name ...]``: run the benchmarks (all by default)."""

from __future__ import annotations

import sys

from bench import (
    acceptance,
    add_certificate,
    add_domain,
    add_subdomain,
    budgets,
    end_to_end,
    engine,
    events,
    lanes,
    overhead,
    prune,
    timers,
    update_lambda_version,
)

BENCHMARKS = {
    "acceptance": acceptance.main,
    "add_certificate": add_certificate.main,
    "add_domain": add_domain.main,
    "add_subdomain": add_subdomain.main,
    "budgets": budgets.main,
    "end_to_end": end_to_end.main,
    "engine": engine.main,
    "events": events.main,
    "lanes": lanes.main,
    "overhead": overhead.main,
    "prune": prune.main,
    "timers": timers.main,
    "update_lambda_version": update_lambda_version.main,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    for name in names:
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
