"""DBOS Transact on the same PostgreSQL as the engine benchmark: the peer `make bench-engine`
reports beside Alfred's engine. DBOS is one global per process, so each measurement is a
process of its own (``python -m bench.dbos_peer <mode> <postgresql-url> ...``) against its own
system database on the benchmark's server; each prints one JSON object.

- ``figures``: ``ms_per_step``, a workflow of ``STEPS`` no-op ``@DBOS.step`` calls against
  the median empty workflow, per step (each step checkpoints its output in PostgreSQL, as an
  Alfred step records a receipt); ``empty_ms``, each of ``EMPTY`` empty workflows timed on
  its own, run one after another (each records its start and its end, as an empty Alfred
  stage is claimed and completed): their median and mean.
- ``started <count>``: as many started at once by ``DBOS.start_workflow``, timed alike
  (DBOS's fastest way to run many, measured so in earlier versions of this bench).
- ``drain <in flight> <count>``: ``count`` workflows of four no-op steps, enqueued by a
  ``DBOSClient`` while no DBOS application runs (as Alfred's executions are accepted while
  its worker is stopped), then drained by an application whose queue runs ``in flight`` at
  a time (``all``: no limit, every one on its own executor thread). Timed as Alfred's
  drain is, from the rows' own timestamps: from the first workflow's start
  (``started_at_epoch_ms``) to the last one's end (``completed_at``). The queue is polled
  every ``POLL`` s (DBOS's default is 1 s, which would cap a queue of 2 in flight at about
  2 workflows a second: not its best).

DBOS is a ``bench`` extra (``pip install -e '.[bench]'``), never a runtime dependency.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

STEPS = 200
EMPTY = 200
POLL = 0.005
NAME = "alfred-bench-peer"


def _dbos(url: str) -> Any:
    """DBOS, configured for ``url``, with this peer's workflows registered; the workflow of
    ``n`` no-op steps."""
    from dbos import DBOS

    steps = _workflows().steps
    DBOS(config={"name": NAME, "system_database_url": url, "log_level": "WARNING"})
    return steps


@dataclass(frozen=True)
class _Workflows:
    steps: Any  # n no-op steps
    four: Any  # four no-op steps


@cache
def _workflows() -> _Workflows:
    """This peer's workflows, registered once per process (DBOS's registry is global)."""
    from dbos import DBOS

    @DBOS.step()
    def noop(i: int) -> int:
        return i

    @DBOS.workflow(name="steps")
    def steps(n: int) -> None:
        for i in range(n):
            noop(i)

    @DBOS.workflow(name="four")
    def four(n: int) -> int:
        for i in range(4):
            noop(i)
        return n

    return _Workflows(steps, four)


def figures(url: str) -> dict[str, Any]:
    from dbos import DBOS

    steps = _dbos(url)
    DBOS.launch()
    try:
        steps(5)  # warm-up: connections, prepared statements
        empty = []
        for _ in range(EMPTY):
            start = time.perf_counter()
            steps(0)
            empty.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        steps(STEPS)
        many = (time.perf_counter() - start) * 1000
    finally:
        DBOS.destroy()
    base = statistics.median(empty)
    return {
        "version": _version(),
        "ms_per_step": (many - base) / STEPS,
        "empty_ms": base,
        "empty_mean_ms": statistics.mean(empty),
    }


def drain(url: str, in_flight: str, count: int) -> dict[str, Any]:
    from dbos import DBOS, DBOSClient

    queue_name = f"bench-{in_flight}-{time.time_ns()}"
    limit = None if in_flight == "all" else int(in_flight)
    _dbos(url)  # the queue is declared in the database first, by an application
    DBOS.launch()
    try:
        DBOS.register_queue(queue_name, worker_concurrency=limit, polling_interval_sec=POLL)
    finally:
        DBOS.destroy()
    client = DBOSClient(system_database_url=url, application_name=NAME)
    try:
        ids = [
            client.enqueue({"queue_name": queue_name, "workflow_name": "four"}, i).workflow_id
            for i in range(count)
        ]
    finally:
        client.destroy()
    _dbos(url)
    DBOS.launch()
    try:
        deadline = time.monotonic() + 600
        while not _all_done(ids):
            if time.monotonic() > deadline:
                raise RuntimeError("DBOS did not drain its queue in time")
            time.sleep(0.5)
    finally:
        DBOS.destroy()
    first, last = _window(url, ids)
    return {"per_second": count / ((last - first) / 1000), "seconds": (last - first) / 1000}


def started(url: str, count: int) -> dict[str, Any]:
    """``count`` four-step workflows started at once by ``DBOS.start_workflow`` (each on an
    executor thread of its own, no queue to poll), timed as ``drain``'s are: the starts fall
    inside the window here, which counts against DBOS."""
    from dbos import DBOS

    _dbos(url)
    four = _workflows().four
    DBOS.launch()
    try:
        handles = [DBOS.start_workflow(four, i) for i in range(count)]
        assert [handle.get_result() for handle in handles] == list(range(count))
        ids = [handle.workflow_id for handle in handles]
    finally:
        DBOS.destroy()
    first, last = _window(url, ids)
    return {"per_second": count / ((last - first) / 1000), "seconds": (last - first) / 1000}


def _all_done(ids: list[str]) -> bool:
    from dbos import DBOS

    rows = DBOS.list_workflows(workflow_ids=ids, status=["SUCCESS"], load_input=False)
    return len(rows) == len(ids)


def _window(url: str, ids: list[str]) -> tuple[int, int]:
    """From the first workflow's start to the last one's end, in DBOS's own epoch ms (a
    workflow started directly, not dequeued, has no ``started_at_epoch_ms``: its
    ``created_at`` is its start)."""
    import psycopg

    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT min(coalesce(started_at_epoch_ms, created_at)), "
            "max(coalesce(completed_at, updated_at)) "
            "FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)",
            [ids],
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _version() -> str:
    from importlib.metadata import version

    return version("dbos")


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    if mode == "figures":
        print(json.dumps(figures(url)))
    elif mode == "started":
        print(json.dumps(started(url, int(rest[0]))))
    else:
        print(json.dumps(drain(url, rest[0], int(rest[1]))))
