"""Worker hosts of their own on this machine, for the tests where a network is cut (issue 16).

Each :class:`Host` is a network namespace (``ip netns``) joined to this one by a veth pair,
with private addresses of its own (10.231.x.y/30, nothing routes them off the machine). Its
workers run in their own PID namespace too (``unshare --pid``): as on another machine, a
worker's PID means nothing here, while the host name stays this machine's, the case where the
same-host dead-holder shortcut must not be fooled by a name.

The database and the broker stay where the test session has them; a :class:`Forwarder` in
this namespace listens on each host's gateway address and forwards to them, so everything a
host's workers say to either crosses its veth. :meth:`Host.cut` drops every packet the host
sends (a ``pfifo`` queue of length 0 on its side of the link): its connections stay open and
hang, as across a real partition, until :meth:`Host.heal`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from tests.conftest import WorkerProcess

Address = str | tuple[str, int]  # a Unix socket's path, or a TCP address


def netns_available() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


class Forwarder:
    """Listens on ``listen`` and forwards each connection to ``upstream``, both ways."""

    def __init__(self, listen: str, upstream: Address) -> None:
        self.upstream = upstream
        self.server = socket.create_server((listen, 0))
        self.port = int(self.server.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            if isinstance(self.upstream, str):
                upstream = socket.socket(socket.AF_UNIX)
            else:
                upstream = socket.socket()
            try:
                upstream.connect(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    # shutdown first: close() alone leaves a socket another thread is blocked
                    # on open (no FIN), and the database session behind it with it
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def _database_upstream() -> Address:
    db = settings.DATABASES["default"]
    host, port = db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def _broker_upstream() -> tuple[Address, int]:
    """The broker's address, and the Redis database its URL names."""
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis+socket://"):
        return url.removeprefix("redis+socket://"), 0
    parts = urlsplit(url)
    return (parts.hostname or "127.0.0.1", parts.port or 6379), int(parts.path.strip("/") or 0)


class Host:
    def __init__(self, index: int) -> None:
        tag = f"{os.getpid() % 100000}h{index}"
        self.netns = f"alfred-{tag}"
        self.outside, self.inside = f"alf{tag}a", f"alf{tag}b"
        subnet = f"10.231.{os.getpid() % 250}"
        self.gateway, self.address = f"{subnet}.{4 * index + 1}", f"{subnet}.{4 * index + 2}"
        self.forwarders: list[Forwarder] = []
        self.workers: list[WorkerProcess] = []

    def up(self) -> Host:
        self.down()  # what a killed run of the tests may have left
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _run("ip", "link", "set", self.inside, "netns", self.netns)
        _run("ip", "addr", "add", f"{self.gateway}/30", "dev", self.outside)
        _run("ip", "link", "set", self.outside, "up")
        inside = ("ip", "netns", "exec", self.netns)
        _run(*inside, "ip", "addr", "add", f"{self.address}/30", "dev", self.inside)
        _run(*inside, "ip", "link", "set", self.inside, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        database = Forwarder(self.gateway, _database_upstream())
        (broker_address, broker_db) = _broker_upstream()
        broker = Forwarder(self.gateway, broker_address)
        self.forwarders = [database, broker]
        db = settings.DATABASES["default"]
        self.environ = {
            "DATABASE_URL": (
                f"postgresql://{db.get('USER') or 'postgres'}@{self.gateway}:{database.port}"
                f"/{db['NAME']}"
            ),
            "CELERY_BROKER_URL": f"redis://{self.gateway}:{broker.port}/{broker_db}",
        }
        return self

    def down(self) -> None:
        for worker in self.workers:
            worker.stop()
        for forwarder in self.forwarders:
            forwarder.close()
        if self.forwarders:
            _sessions_ended()
        subprocess.run(["ip", "link", "del", self.outside], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)

    def worker(self, name: str, **start: Any) -> WorkerProcess:
        worker = HostWorker(name, self.netns)
        worker.start(environ={**self.environ, **start.pop("environ", {})}, **start)
        self.workers.append(worker)
        return worker

    def cut(self) -> None:
        """From now on every packet the host sends is dropped."""
        _run("ip", "netns", "exec", self.netns, "tc", "qdisc", "add", "dev", self.inside,
             "root", "pfifo", "limit", "0")  # fmt: skip

    def heal(self) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.netns, "tc", "qdisc", "del", "dev", self.inside, "root"],
            capture_output=True,
        )


def _sessions_ended(timeout: float = 10.0) -> None:
    """Wait for the database sessions the hosts' workers had to end (their backends see the
    forwarded connections close a moment later), so that nothing holds the test database
    when the session drops it."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            (others,) = cursor.fetchone()
        if not others:
            return
        time.sleep(0.1)


class HostWorker(WorkerProcess):
    """A worker started inside a host: its network namespace, and a PID namespace of its own."""

    def __init__(self, name: str, netns: str) -> None:
        super().__init__(name)
        self.netns = netns

    def _spawn(self, argv: list[str], environ: dict[str, str] | None) -> WorkerProcess:
        prefix = ["ip", "netns", "exec", self.netns, "unshare", "--pid", "--fork", "--mount-proc"]
        return super()._spawn([*prefix, *argv], environ)


@contextmanager
def hosts_up(count: int) -> Iterator[list[Host]]:
    hosts: list[Host] = []
    try:
        for index in range(count):
            hosts.append(Host(index).up())
        yield hosts
    finally:
        for host in hosts:
            host.heal()
            host.down()
