"""What the add-domain and onboard-domain tests share: the three stand-ins in one sandbox
(AWS seeded like `make run`, the GitHub stand-in's two platform repositories on real Git,
ArgoCD's applications following their branch heads), short delays, and a real Celery worker
whose providers are the sandbox's.

Every count a test makes comes from the stand-ins' own records: the change batches Route53
applied (their comments name the execution), the certificates in moto's account (tagged with
the execution), the commits on each branch (their ``Alfred-Operation`` trailers name it), the
hosted zones, and ArgoCD's operations."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from providers.gitops import parse_message
from providers.sandbox.github_seed import BOOKING_REPO, BRANCH, HELM_REPO
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess
from tests.support.aws_world import ready

DELAYS: dict[str, Any] = {
    "route53_change_delay": 0.3,
    "converge_delay": 0.6,
    "acm_record_delay": 0.2,
    "acm_issue_delay": 0.5,
}


@contextmanager
def sandbox_started(**options: Any) -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory(prefix="alfred-sandbox-") as root:
        sandbox = Sandbox(root=Path(root), **{**DELAYS, **options}).start()
        try:
            yield sandbox
        finally:
            sandbox.stop()


@contextmanager
def platform_worker(sandbox: Sandbox, name: str, **env: str) -> Iterator[WorkerProcess]:
    """A started (and ready) worker on the sandbox's providers, with ``env`` on top."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**sandbox.environ(), **env}.items():
            patch.setenv(key, value)
        worker = WorkerProcess(name)
        try:
            yield ready(worker.start())
        finally:
            worker.stop()


def commits_of(sandbox: Sandbox, repo: str, execution_id: str) -> list[dict[str, Any]]:
    """The commits on the branch made for ``execution_id`` (newest first), parsed."""
    found = []
    for commit in sandbox.github.log(repo, BRANCH):
        parsed = parse_message(commit["message"])
        if parsed is not None and parsed.operation.startswith(f"{execution_id}:"):
            found.append({**commit, "parsed": parsed})
    return found


def helm_commits(sandbox: Sandbox, execution_id: str) -> list[dict[str, Any]]:
    return commits_of(sandbox, HELM_REPO, execution_id)


def booking_commits(sandbox: Sandbox, execution_id: str) -> list[dict[str, Any]]:
    return commits_of(sandbox, BOOKING_REPO, execution_id)


def helm_file(sandbox: Sandbox, path: str) -> str:
    return sandbox.github.read_file(HELM_REPO, BRANCH, path) or ""


def booking_file(sandbox: Sandbox, path: str) -> str:
    return sandbox.github.read_file(BOOKING_REPO, BRANCH, path) or ""


def batches_of(sandbox: Sandbox, execution_id: str) -> list[Any]:
    return [b for b in sandbox.aws.route53.change_batches if execution_id in (b.comment or "")]
