"""Where a stage's time goes, for bench/reports/engine.md: the worker's Python under cProfile
and the backend's statements under ``pg_stat_statements``, over ``EXECUTIONS`` no-op
executions of four stages run in this process (claim, hand-offs, terminal transition), and
``EXPLAIN (ANALYZE, BUFFERS)`` of a new run's first claim, the costliest of its statements.

``pg_stat_statements`` must be preloaded: on the embedded stack the server is restarted with
it (``ALTER SYSTEM``); on a server of your own (DATABASE_URL) it is used when it is there.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

from alfred.principals import cli_caller

EXECUTIONS = 300
STAGES_RUN = 4 * EXECUTIONS


def _accepted(tag: str, count: int) -> list[str]:
    """``count`` new executions (their input differs from every earlier one's: the same
    input would be answered with the execution that already did it), their runs."""
    from executions.acceptance import execution_accept

    first = time.time_ns() // 1000
    return [
        str(
            execution_accept(
                workflow_name="bench-noop",
                body={"n": first + i, "steps": 0},
                idempotency_key=f"profile-{tag}-{i}",
                caller=cli_caller("bench-profile"),
            ).execution.current_run_id
        )
        for i in range(count)
    ]


def _run(runs: list[str]) -> None:
    from executions.runtime.runner import stage_execute

    for run in runs:
        stage_execute(run, "s0", "bench@profile:0:1")


def _package(path: str) -> str:
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/work/" in path or path.startswith(("executions", "alfred", "workflows")):
        return path.rsplit("/main/", 1)[-1]
    if path.startswith("~") or path.startswith("<"):
        return "built-ins"
    return "standard library"


def python_profile() -> list[str]:
    """The worker's Python per stage, by package (own time), and the share spent waiting
    for the server's answers (psycopg's wait)."""
    _run(_accepted("warm", 20))
    runs = _accepted("cprofile", EXECUTIONS)
    profile = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    profile.enable()
    _run(runs)
    profile.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    by: dict[str, float] = {}
    waited = 0.0
    for (path, _, name), (_, _, own, _, _) in stats.items():
        by[_package(path)] = by.get(_package(path), 0.0) + own
        if path.endswith("psycopg/connection.py") and name == "wait":
            waited += own
    total = sum(by.values())
    top = sorted(by.items(), key=lambda item: -item[1])[:10]
    return [
        f"cProfile of {EXECUTIONS} no-op executions of four stages run in this process "
        f"({STAGES_RUN} stage transitions: the first claim, three hand-offs, the terminal "
        f"transition): {wall / STAGES_RUN * 1000:.2f} ms a stage under the profiler "
        f"({cpu / STAGES_RUN * 1000:.2f} ms of it this process's CPU), of which "
        f"{waited / STAGES_RUN * 1000:.2f} ms waiting for PostgreSQL's answers (psycopg's "
        "`wait`). Own time by package, ms a stage:",
        "",
        "| package | ms a stage | share |",
        "|---|---:|---:|",
        *(
            f"| {name} | {own / STAGES_RUN * 1000:.3f} | {own / total * 100:.0f}% |"
            for name, own in top
        ),
        "",
    ]


def statements_profile() -> list[str]:
    """The backend's statements over the same work, from ``pg_stat_statements``."""
    from django.db import connection
    from django.db.utils import DatabaseError

    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT pg_stat_statements_reset()")
    except DatabaseError as exc:
        return [f"`pg_stat_statements` is not available on this server: {exc}", ""]
    runs = _accepted("statements", EXECUTIONS)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_statements_reset()")
    _run(runs)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT calls, total_exec_time / calls, wal_bytes / calls,
                   (shared_blks_hit + shared_blks_read) / calls,
                   left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
            FROM pg_stat_statements
            WHERE query NOT LIKE '%%pg_stat_statements%%'
            ORDER BY total_exec_time DESC LIMIT 10
            """
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT sum(total_exec_time), sum(wal_bytes) FROM pg_stat_statements "
            "WHERE query NOT LIKE '%%pg_stat_statements%%'"
        )
        total_ms, total_wal = cursor.fetchone()
    return [
        f"`pg_stat_statements` over the same work ({EXECUTIONS} executions, "
        f"{STAGES_RUN} stage transitions): {float(total_ms) / STAGES_RUN:.3f} ms of "
        f"execution a stage in all, {float(total_wal) / EXECUTIONS / 1024:.1f} KB of WAL an "
        "execution. The commit's flush is not in these times.",
        "",
        "| calls a stage | exec ms each | WAL bytes each | buffers each | statement |",
        "|---:|---:|---:|---:|---|",
        *(
            f"| {calls / STAGES_RUN:.2f} | {float(mean):.3f} | {float(wal):.0f} | "
            f"{float(buffers):.0f} | `{text.replace('|', '/')}…` |"
            for calls, mean, wal, buffers, text in rows
        ),
        "",
    ]


def explain_first_claim() -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of a new run's first claim (one statement: the run
    fenced and leased, the stage and the execution running, three events), made in a
    transaction rolled back: nothing it wrote is kept."""
    from django.db import connection, transaction

    from executions.runtime.handoff import start_statement
    from executions.runtime.runner import first_claim_events

    (run,) = _accepted("explain", 1)
    worker = "bench@profile:0:1"
    statement = start_statement(
        run_id=run, stage="s0", worker=worker, events=first_claim_events(run, "s0", worker)
    )
    if statement is None:
        return ["A claim guard has no test in SQL: the first claim is not one statement.", ""]
    sql, params = statement
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        plan = [line for (line,) in cursor.fetchall()]
        transaction.set_rollback(True)
    return ["```", *plan, "```", ""]


def restarted_with_statements(stack: Any) -> Any:
    """The embedded stack restarted with ``pg_stat_statements`` preloaded (None: a server of
    the caller's own, left as it is)."""
    if stack is None:
        return None
    from django.db import connection

    from alfred.embedded import EmbeddedStack

    with connection.cursor() as cursor:
        cursor.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        cursor.execute("ALTER SYSTEM SET track_io_timing = on")
    connection.close()
    stack.stop()
    return EmbeddedStack(base=stack.base, database=stack.database).start()


def profiles(stack: Any) -> tuple[list[str], Any]:
    """The report's profile section, and the stack (restarted) for the caller to stop."""
    lines = ["## Profiles: what stands in the way", "", *python_profile()]
    stack = restarted_with_statements(stack)
    lines += [*statements_profile(), "A new run's first claim:", "", *explain_first_claim()]
    return lines, stack
