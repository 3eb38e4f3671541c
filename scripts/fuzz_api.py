#!/usr/bin/env python3
"""Fuzz Alfred's API with Schemathesis against a live stack: `make fuzz`.

Starts `make run`'s launcher (embedded PostgreSQL and Redis, the sandbox providers, web,
worker and beat) on free ports in a state directory of its own, with the per-principal
throttles off (a fuzzer is one principal sending thousands of requests), creates an operator
token and runs Schemathesis over /api/schema/ twice against it:

1. **as a newcomer would**, with Schemathesis's default configuration (every default check and
   phase; the file tests/fuzz/default.toml is empty) and ``--max-examples 30 --seed 1``: the
   schema must be true as served, with no exception written down for it;
2. **the project's pass**, every check and phase of tests/fuzz/schemathesis.toml (more
   examples, the stream read briefly, the exceptions that file explains).

Then it stops the stack and exits 0 only if both passes found nothing (no server error, no
schema non-conformance, no valid request refused). Arguments are passed on to the second
pass's `schemathesis run` (e.g. --max-examples 5).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alfred.devstack import READY, free_port_base, token_created  # noqa: E402 - after the path

BIN = Path(sys.executable).parent


def main() -> int:
    state = ROOT / ".alfred" / f"fuzz-{os.getpid()}"
    base = free_port_base()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ALFRED_", "DJANGO_"))},
        "ALFRED_STATE_DIR": str(state),
        "ALFRED_PORT": str(base + 4),
        "ALFRED_SANDBOX_PORT_BASE": str(base),
        "ALFRED_THROTTLE_TRIGGER": "off",
        "ALFRED_THROTTLE_CONTROL": "off",
    }
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    url = f"http://127.0.0.1:{base + 4}"
    log = state.with_suffix(".log")
    state.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        stack = subprocess.Popen(
            [sys.executable, "-m", "alfred.devstack"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        ready(stack, log)
        token = operator_token(env)
        print(f"fuzz-api: Alfred at {url} (log {log.relative_to(ROOT)})", flush=True)
        codes = {}
        for name, config, args in PASSES:
            print(f"fuzz-api: pass {name!r}", flush=True)
            codes[name] = schemathesis(
                url, token, config, [*args, *(sys.argv[1:] if name == "project" else [])]
            )
        print("fuzz-api: " + ", ".join(f"{name} exit {code}" for name, code in codes.items()))
        return max(codes.values())
    finally:
        stop(stack)
        shutil.rmtree(state, ignore_errors=True)


FUZZ = ROOT / "tests" / "fuzz"
PASSES: tuple[tuple[str, Path, list[str]], ...] = (
    ("default", FUZZ / "default.toml", ["--max-examples", "30", "--seed", "1"]),
    ("project", FUZZ / "schemathesis.toml", []),
)


def schemathesis(url: str, token: str, config: Path, args: list[str]) -> int:
    return subprocess.call(
        [
            str(BIN / "schemathesis"),
            "--config-file",
            str(config),
            "run",
            f"{url}/api/schema/",
            "--header",
            f"Authorization: Bearer {token}",
            *args,
        ],
        cwd=ROOT,
    )


def ready(stack: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while READY.encode() not in log.read_bytes():
        if stack.poll() is not None or time.monotonic() > deadline:
            sys.stderr.write(log.read_text(errors="replace")[-6000:])
            raise SystemExit("fuzz-api: the stack did not start")
        time.sleep(0.5)


def operator_token(env: dict[str, str]) -> str:
    return token_created(env, name="fuzz", role="operator")


def stop(stack: subprocess.Popen[bytes]) -> None:
    if stack.poll() is None:
        stack.send_signal(signal.SIGINT)
        try:
            stack.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait(10)


if __name__ == "__main__":
    sys.exit(main())
