"""The launcher's environment handling and how it names a child's end (the process itself:
tests/integration/test_devstack.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from alfred.devstack import _ephemeral_range, exit_described, free_ports, probe, with_sandbox
from alfred.embedded import state_dir


def test_no_aws_setting_of_the_developer_reaches_the_children_in_sandbox_mode():
    # given: a developer shell with a profile, a session token and a per-service endpoint
    developer = {
        "PATH": "/usr/bin",
        "AWS_PROFILE": "production-admin",
        "AWS_SESSION_TOKEN": "real-token",
        "AWS_ENDPOINT_URL_ROUTE53": "https://route53.amazonaws.com",
        "ALFRED_DEBUG": "1",
    }
    sandbox = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8601", "AWS_ACCESS_KEY_ID": "sandbox"}

    # when
    env = with_sandbox(developer, sandbox)

    # then: only the sandbox's AWS settings are left, everything else is kept
    assert {k: v for k, v in env.items() if k.startswith("AWS_")} == sandbox
    assert env["PATH"] == "/usr/bin"
    assert env["ALFRED_DEBUG"] == "1"


def test_a_childs_end_is_named_by_its_signal_or_its_exit_code():
    killed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"])
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    assert exit_described(killed.wait()) == "killed by SIGKILL"
    assert exit_described(exited.wait()) == "exit code 3"


def test_the_state_directory_is_the_checkouts_from_any_working_directory(monkeypatch, tmp_path):
    checkout = Path(__file__).resolve().parents[2]
    monkeypatch.delenv("ALFRED_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert state_dir() == checkout / ".alfred"  # not ./.alfred: manage.py finds its database

    monkeypatch.setenv("ALFRED_STATE_DIR", "elsewhere")
    assert state_dir() == tmp_path / "elsewhere"  # a relative one, from where it runs


def test_ports_for_a_second_stack_are_free_and_outside_the_kernels_ephemeral_range():
    # A probe of a port in the ephemeral range, made before its server listens, can be given
    # that port as its own source and connect to itself; CI once read its own request back.
    low, high = _ephemeral_range()

    for _ in range(20):
        start = free_ports(4)

        assert not low <= start <= high and not low <= start + 3 <= high
        for port in range(start, start + 4):
            with socket.socket() as held:
                held.bind(("127.0.0.1", port))  # raises if it was not free


def test_a_probe_answered_by_something_that_does_not_speak_http_says_so_instead_of_raising():
    # given: a listener that echoes the request back, as a self-connected probe reads it
    listener = socket.create_server(("127.0.0.1", free_ports()))
    port = listener.getsockname()[1]

    def echo() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(conn.recv(4096))

    threading.Thread(target=echo, daemon=True).start()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # when
    with listener:
        answer = probe(opener, f"http://127.0.0.1:{port}/_sandbox/health")

    # then: not ready, and the launcher goes on waiting
    assert answer == "not HTTP (BadStatusLine)"
