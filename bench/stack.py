"""What every benchmark starts with: a fresh database and broker, migrated."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def bench_stack(name: str, **extra_env: str) -> tuple[dict[str, str], Any]:
    """The environment for the benchmark's processes, and the embedded stack it started
    under ``.alfred/<name>`` (wiped first), or None when DATABASE_URL and CELERY_BROKER_URL
    point at services already. The database is migrated."""
    from alfred.embedded import EmbeddedStack

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "ALFRED_ENV": "test",
        "ALFRED_LOG_LEVEL": "WARNING",
        # The benchmarks measure the engine and acceptance, not the per-principal throttle.
        "ALFRED_THROTTLE_TRIGGER": "off",
        "ALFRED_THROTTLE_CONTROL": "off",
        **extra_env,
    }
    stack = None
    if not (env.get("DATABASE_URL") and env.get("CELERY_BROKER_URL")):
        state = ROOT / ".alfred" / name
        shutil.rmtree(state, ignore_errors=True)
        stack = EmbeddedStack(base=state, database="alfred_bench").start()
        env.update(stack.environ(), ALFRED_STATE_DIR=str(state))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return env, stack


def bench_token(env: dict[str, str], role: str) -> str:
    """A new API token of ``role`` in the benchmark's database."""
    from alfred.devstack import token_created

    return token_created(env, name=f"bench-{uuid.uuid4().hex[:8]}", role=role)
