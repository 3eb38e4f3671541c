"""DBOS Transact on the same PostgreSQL as the engine benchmark: the peer `make bench-engine`
reports beside Alfred's engine.

Run as its own process (``python -m bench.dbos_peer <postgresql-url>``: DBOS is one global per
process) against its own system database on the benchmark's server; prints one JSON object:

- ``ms_per_step``: a workflow of ``STEPS`` no-op ``@DBOS.step`` calls against one of none,
  per step (each step checkpoints its output in PostgreSQL, as an Alfred step records a
  receipt);
- ``ms_per_empty_workflow``: ``EMPTY`` empty workflows run one after another, per workflow
  (each records its start and its end, as an empty Alfred stage is claimed and completed);
- ``four_step_per_second``: ``WORKFLOWS`` workflows of four no-op steps started at once on
  DBOS's own executor threads, from the first start to the last result.

DBOS is a ``bench`` extra (``pip install -e '.[bench]'``), never a runtime dependency.
"""

from __future__ import annotations

import json
import os
import sys
import time

STEPS = 200
EMPTY = 200
WORKFLOWS = int(os.environ.get("BENCH_EXECUTIONS", "300"))


def main(url: str) -> None:
    from dbos import DBOS

    DBOS(
        config={
            "name": "alfred-bench-peer",
            "system_database_url": url,
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def noop(i: int) -> int:
        return i

    @DBOS.workflow()
    def steps(n: int) -> None:
        for i in range(n):
            noop(i)

    @DBOS.workflow()
    def four(n: int) -> int:
        for i in range(4):
            noop(i)
        return n

    DBOS.launch()
    try:
        steps(5)  # warm-up: connections, prepared statements
        start = time.perf_counter()
        steps(0)
        base = time.perf_counter() - start
        start = time.perf_counter()
        steps(STEPS)
        many = time.perf_counter() - start

        start = time.perf_counter()
        for _ in range(EMPTY):
            steps(0)
        empty = (time.perf_counter() - start) / EMPTY

        start = time.perf_counter()
        handles = [DBOS.start_workflow(four, i) for i in range(WORKFLOWS)]
        results = [handle.get_result() for handle in handles]
        span = time.perf_counter() - start
        assert results == list(range(WORKFLOWS))
    finally:
        DBOS.destroy()
    print(
        json.dumps(
            {
                "version": _version(),
                "ms_per_step": (many - base) / STEPS * 1000,
                "ms_per_empty_workflow": empty * 1000,
                "four_step_per_second": WORKFLOWS / span,
            }
        )
    )


def _version() -> str:
    from importlib.metadata import version

    return version("dbos")


if __name__ == "__main__":
    main(sys.argv[1])
