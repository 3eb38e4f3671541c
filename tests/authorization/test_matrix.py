"""Every cell of the authorization matrix (tests/authorization/matrix.py) against the real
stack: real tokens, real admin logins in the groups of the migration, the real middleware.
Each cell gets a fresh world and checks the answer and, for a change, that it happened
exactly when the answer says so."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from alfred.models import ApiToken
from alfred.tokens import token_create, token_revoke
from alfred.users import user_set
from executions.models import (
    Drift,
    Execution,
    ExecutionStatus,
    Freeze,
    FreezeExemption,
    Hook,
    RunStatus,
    WebhookEndpoint,
)
from lanes.models import Lane, LaneState, LaneWaiter
from tests.authorization import matrix
from tests.support.helpers import CERTIFICATE, paused_on_a_plan, submit

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Zq8!x7pLm2#v"


@dataclass
class World:
    tokens: dict[str, str]  # column → raw bearer token
    owner_token: ApiToken
    queued: str
    failed: str
    paused: str
    plan_hash: str
    lane: str
    lane_owner: str
    freeze: str
    drifted: str
    drift: str
    webhook: str
    beat: int
    secret: str

    def fill(self, text: str) -> str:
        return text.format(
            queued=self.queued,
            failed=self.failed,
            paused=self.paused,
            plan_hash=self.plan_hash,
            lane=self.lane,
            lane_owner=self.lane_owner,
            freeze=self.freeze,
            drifted=self.drifted,
            drift=self.drift,
            owner_token=self.owner_token.pk,
            webhook=self.webhook,
            beat=self.beat,
        )


def _fail(execution_id: str) -> None:
    execution = Execution.objects.get(pk=execution_id)
    execution.status = ExecutionStatus.FAILED
    execution.finished_at = timezone.now()
    execution.error = {"code": "fatal", "message": "given"}
    execution.save()
    execution.runs.update(status=RunStatus.FAILED, finished_at=timezone.now())


def _drifted(execution_id: str) -> Drift:
    """The execution succeeded, and the drift watch since found its record changed."""
    execution = Execution.objects.get(pk=execution_id)
    execution.status, execution.finished_at = ExecutionStatus.SUCCEEDED, timezone.now()
    finding = {"what": "A drifted.example.com", "expected": {"alias": "edge"}, "found": None}
    drift = Drift.objects.create(
        execution=execution,
        findings=[finding],
        digest="d" * 64,
        first_seen_at=timezone.now(),
        last_seen_at=timezone.now(),
    )
    execution.drift = drift
    execution.save()
    execution.runs.update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    LaneWaiter.objects.filter(execution_id=execution_id).delete()  # it left its lane's queue
    Lane.objects.filter(owner_id=execution_id).update(owner=None, state=LaneState.FREE)
    return drift


@pytest.fixture
def world() -> World:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    owner, owner_raw = token_create(name="owner-bot", role="integration")
    _, other_raw = token_create(name="other-bot", role="integration")
    _, operator_raw = token_create(name="ops-bot", role="operator")
    _, revoked_raw = token_create(name="gone-bot", role="integration")
    token_revoke(name="gone-bot")
    user_set(username="viewer", role="viewer", password=PASSWORD)
    user_set(username="operator", role="operator", password=PASSWORD)

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {owner_raw}")
    queued = submit(client, "add-subdomain", {"zone": "example.com", "subdomain": "queued"})
    failed = submit(client, "add-subdomain", {"zone": "example.com", "subdomain": "failed"})
    laned = submit(client, "add-certificate", CERTIFICATE)
    paused = submit(client, "add-subdomain", {"zone": "example.com", "subdomain": "paused"})
    assert queued.status_code == failed.status_code == laned.status_code == 202
    plan_hash = "a" * 64
    paused_on_a_plan(paused.json()["id"], plan_hash)
    _fail(failed.json()["id"])
    _fail(laned.json()["id"])
    lane = Lane.objects.get(owner_id=laned.json()["id"])
    Lane.objects.filter(pk=lane.pk).update(state=LaneState.RECOVERY_REQUIRED, reason="given")
    webhook = WebhookEndpoint.objects.create(url="https://hooks.example.com/a", secret="whsec_x")
    every = IntervalSchedule.objects.create(every=5, period="seconds")
    beat = PeriodicTask.objects.create(name="scan", task="lanes.tasks.reconcile", interval=every)
    freeze = Freeze.objects.create(
        reason="world", starts_at=timezone.now(), workflows=["add-subdomain"], subjects=["*"]
    )
    drifted = submit(client, "add-subdomain", {"zone": "example.com", "subdomain": "drifted"})
    drift = _drifted(drifted.json()["id"])
    return World(
        tokens={
            "revoked": revoked_raw,
            "owner": owner_raw,
            "other": other_raw,
            "operator": operator_raw,
            "read_only": operator_raw,
        },
        owner_token=owner,
        queued=queued.json()["id"],
        failed=failed.json()["id"],
        paused=paused.json()["id"],
        plan_hash=plan_hash,
        lane=lane.key,
        lane_owner=laned.json()["id"],
        freeze=freeze.pk,
        drifted=drifted.json()["id"],
        drift=drift.pk,
        webhook=webhook.pk,
        beat=beat.pk,
        secret="whsec_x",
    )


def _client(world: World, column: str, cls: type[Client] = APIClient) -> Client:
    client = cls()
    if column in world.tokens:
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[column]}"
    if column == "viewer_session":
        client.force_login(get_user_model().objects.get(username="viewer"))
    if column in ("operator_session",) or (column == "read_only" and cls is Client):
        client.force_login(get_user_model().objects.get(username="operator"))
    return client


# What each change looks like, read back from the database.
EFFECTS: dict[str, Callable[[World], bool]] = {
    "canceled": lambda w: Execution.objects.get(pk=w.queued).status == ExecutionStatus.CANCELED,
    "approved": lambda w: Hook.objects.get(execution_id=w.paused).status == "signalled",
    "rejected": lambda w: Execution.objects.get(pk=w.paused).status == ExecutionStatus.CANCELED,
    "rolling_back": lambda w: Execution.objects.get(pk=w.failed).current_run.kind == "rollback",
    "retried": lambda w: Execution.objects.get(pk=w.failed).status == ExecutionStatus.QUEUED,
    "continued": lambda w: Execution.objects.get(pk=w.failed).status == ExecutionStatus.QUEUED,
    "recovered": lambda w: Lane.objects.get(pk=w.lane).state != LaneState.RECOVERY_REQUIRED,
    "let_through": lambda w: FreezeExemption.objects.filter(execution_id=w.queued).exists(),
    "freeze_ended": lambda w: Freeze.objects.get(pk=w.freeze).ended_at is not None,
    "drift_accepted": lambda w: Drift.objects.get(pk=w.drift).status == "accepted",
    "redone": lambda w: Execution.objects.filter(predecessor_id=w.drifted).exists(),
    "revoked": lambda w: ApiToken.objects.get(pk=w.owner_token.pk).revoked_at is not None,
    "webhook_added": lambda w: WebhookEndpoint.objects.filter(url__contains="alfred").exists(),
    "secret_rotated": lambda w: WebhookEndpoint.objects.get(pk=w.webhook).secret != w.secret,
    "lane_rewritten": lambda w: Lane.objects.get(pk=w.lane).state == LaneState.FREE,
    "token_rewritten": lambda w: ApiToken.objects.filter(name="renamed").exists(),
    "user_added": lambda w: get_user_model().objects.filter(username="mallory").exists(),
    "beat_changed": lambda w: not _beat(w).enabled,
}


def _beat(world: World) -> Any:
    from django_celery_beat.models import PeriodicTask

    return PeriodicTask.objects.get(pk=world.beat)


def _api_cells() -> list[Any]:
    return [
        pytest.param(row, column, expected, id=f"{row.label} | {column}")
        for row in matrix.API
        for column, expected in zip(matrix.COLUMNS, row.cells, strict=True)
    ]


def _answer(response: Any, world: World, listing: bool) -> str:
    status = response.status_code
    if status >= 400:
        return f"{status} {response.json()['code']}"
    if listing:
        ids = {item["id"] for item in response.json()["results"]}
        return f"{status} {'listed' if world.queued in ids else 'hidden'}"
    return str(status)


@pytest.mark.parametrize(("row", "column", "expected"), _api_cells())
def test_api(world: World, row: matrix.ApiRow, column: str, expected: str) -> None:
    client = _client(world, column)
    path = world.fill(row.path)
    body = {k: world.fill(v) if isinstance(v, str) else v for k, v in (row.body or {}).items()}
    with override_settings(ALFRED_READ_ONLY=column == "read_only"):
        if row.method == "GET":
            response = client.get(path)
        else:
            response = client.post(
                path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"matrix-{column}"
            )
    answer = _answer(response, world, listing=row.path == "/api/v1/executions")
    assert answer == expected, response.content[:500]
    if row.changes:
        assert EFFECTS[row.changes](world) is expected.startswith("2"), row.changes


def _admin_cells() -> list[Any]:
    return [
        pytest.param(row, column, expected, id=f"{row.label} | {column}")
        for row in matrix.ADMIN
        for column, expected in zip(matrix.COLUMNS, row.cells, strict=True)
    ]


@pytest.mark.parametrize(("row", "column", "expected"), _admin_cells())
def test_admin(world: World, row: matrix.AdminRow, column: str, expected: str) -> None:
    client = _client(world, column, Client)
    data = {world.fill(k): world.fill(v) if isinstance(v, str) else v for k, v in row.data.items()}
    with override_settings(ALFRED_READ_ONLY=column == "read_only"):
        response = client.post(world.fill(row.path), data)
    changed = EFFECTS[row.changes](world)
    if expected == "login":
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    elif expected == "asks":  # the confirmation page, which changes nothing until confirmed
        assert response.status_code == 200 and b'name="confirm"' in response.content
    elif expected == "refused":
        assert response.status_code in (200, 302), response.status_code
    elif expected == "done":  # redirected back, or a page of its own (a secret shown once)
        assert response.status_code in (200, 302), response.content[:2000]
    else:
        assert str(response.status_code) == expected
    assert changed is (expected == "done"), row.changes


@pytest.mark.parametrize(
    ("row", "read_only"),
    [
        pytest.param(row, read_only, id=f"{row.label} | {'read-only' if read_only else 'normal'}")
        for row in matrix.COMMANDS
        for read_only in (False, True)
    ],
)
def test_command(
    world: World, row: matrix.CommandRow, read_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = row.read_only if read_only else row.normal
    monkeypatch.setattr("sys.stdin", io.StringIO(row.stdin))
    args = [world.fill(arg) for arg in row.args]
    with override_settings(ALFRED_READ_ONLY=read_only):
        try:
            call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
            answer = "ok"
        except CommandError as exc:
            assert "read-only" in str(exc)
            answer = "refused"
    assert answer == expected


def test_the_contract_page_shows_this_matrix() -> None:
    page = (ROOT / "docs" / "contract.md").read_text()
    start, end = page.index(matrix.START), page.index(matrix.END)
    assert page[start + len(matrix.START) : end].strip() == matrix.render().strip(), (
        "docs/contract.md is stale: paste `python -m tests.authorization.matrix` between the "
        "authorization-matrix markers"
    )
