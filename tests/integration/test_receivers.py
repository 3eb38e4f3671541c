"""Inbound receivers: GitHub pushes (HMAC) and ArgoCD notifications (bearer secret) are
verified, deduplicated by delivery id, and bring forward the polls that watch what they name;
an unverifiable request is 401 and changes nothing. End to end: a push to the Helm repository
wakes an add-domain waiting on ArgoCD convergence long before its next poll."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from executions.models import Execution, InboundNotification, StepReceipt, Timer
from providers.sandbox.github_seed import HELM_REPO
from providers.sandbox.stack import Sandbox
from tests.conftest import wait_for
from tests.support import platform_world as world
from tests.support.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)

GITHUB_SECRET = "gh-webhook-secret-for-tests"
ARGOCD_SECRET = "argocd-notify-secret-for-tests"


@pytest.fixture(autouse=True)
def _secrets(settings: Any) -> None:
    settings.ALFRED_GITHUB_WEBHOOK_SECRET = GITHUB_SECRET
    settings.ALFRED_ARGOCD_WEBHOOK_SECRET = ARGOCD_SECRET


def push(
    client: APIClient, repo: str, *, secret: str = GITHUB_SECRET, delivery: str | None = None
) -> Any:
    body = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": repo}}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return client.post(
        "/api/v1/receivers/github",
        data=body,
        content_type="application/json",
        HTTP_X_HUB_SIGNATURE_256=signature,
        HTTP_X_GITHUB_EVENT="push",
        HTTP_X_GITHUB_DELIVERY=delivery or str(uuid.uuid4()),
    )


def test_a_forged_github_push_is_401_and_changes_nothing():
    client = APIClient()
    forged = push(client, HELM_REPO, secret="not-the-secret")
    assert forged.status_code == 401
    assert forged.json()["code"] == "authentication_failed"
    unsigned = client.post(
        "/api/v1/receivers/github",
        data=b"{}",
        content_type="application/json",
        HTTP_X_GITHUB_EVENT="push",
        HTTP_X_GITHUB_DELIVERY="d-1",
    )
    assert unsigned.status_code == 401
    assert not InboundNotification.objects.exists()


def test_a_github_push_is_received_once_per_delivery_id():
    client = APIClient()
    first = push(client, "Platform/Helm-Values", delivery="d-42")
    assert first.status_code == 200
    assert first.json() == {
        "duplicate": False,
        "topics": ["github:platform/helm-values"],
        "woken": 0,
    }
    again = push(client, "Platform/Helm-Values", delivery="d-42")
    assert again.json()["duplicate"] is True
    assert InboundNotification.objects.filter(source="github").count() == 1


def test_an_unconfigured_receiver_verifies_nothing(settings):
    settings.ALFRED_GITHUB_WEBHOOK_SECRET = ""
    assert push(APIClient(), HELM_REPO, secret="").status_code == 401


def test_argocd_notifications_need_the_bearer_secret():
    client = APIClient()
    body = {"app": "nginx-hosts", "id": "sync-1"}
    wrong = client.post(
        "/api/v1/receivers/argocd", body, format="json", HTTP_AUTHORIZATION="Bearer nope"
    )
    assert wrong.status_code == 401
    assert not InboundNotification.objects.exists()
    right = client.post(
        "/api/v1/receivers/argocd",
        body,
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {ARGOCD_SECRET}",
    )
    assert right.status_code == 200
    assert right.json()["topics"] == ["argocd:nginx-hosts"]
    no_app = client.post(
        "/api/v1/receivers/argocd",
        {"id": "x"},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {ARGOCD_SECRET}",
    )
    assert no_app.status_code == 400
    assert no_app.json()["code"] == "malformed_request"


@pytest.fixture
def slow_polling_platform() -> Iterator[Sandbox]:
    """The sandbox and a worker whose convergence waits poll only every 2 minutes."""
    with (
        world.sandbox_started() as sandbox,
        world.platform_worker(sandbox, "receivers", ALFRED_CONVERGE_POLL_SECONDS="120"),
    ):
        yield sandbox


@pytest.mark.worker
@pytest.mark.standin
def test_a_push_to_the_helm_repository_wakes_a_wait_on_argocd_before_its_next_poll(
    api, slow_polling_platform
):
    # given an add-domain waiting on ArgoCD convergence, its next poll 2 minutes away
    domain = f"d{uuid.uuid4().hex[:8]}.example.com"
    execution_id = submit(api, "add-domain", {"domain": domain}).json()["id"]
    topic = f"github:{HELM_REPO}"
    waiting = wait_for(
        lambda: Timer.objects.filter(
            run__execution_id=execution_id, status="pending", topics__contains=[topic]
        ).first(),
        timeout=60,
        interval=0.2,
    )
    time.sleep(1.5)  # the stand-in's applications converge meanwhile (0.6 s)
    # when GitHub says the Helm repository was pushed to
    started = time.monotonic()
    answer = push(APIClient(), HELM_REPO)
    assert answer.status_code == 200
    assert answer.json()["woken"] == 1
    # then the wait polls now, converges, and the execution goes on to its end
    execution = wait_for(
        lambda: (e := Execution.objects.get(pk=execution_id)).terminal and e,
        timeout=60,
        interval=0.2,
    )
    assert execution.status == "succeeded", execution.error
    assert time.monotonic() - started < 60  # far sooner than the 120 s poll
    poll = StepReceipt.objects.get(
        run_id=waiting.run_id, stage=waiting.stage, kind="poll", step_key="converged"
    )
    assert poll.output["polls"] == 2
