"""A worker of a read-only instance runs no stage: the message is dropped and the run stays
as it was, for a writable instance's recovery scan (alfred/readonly.py)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from executions.models import Execution, StageStatus, StartState
from executions.tasks import run_stage
from tests.support.helpers import SUBDOMAIN, submit

pytestmark = pytest.mark.django_db


def test_a_read_only_worker_drops_a_stage_message_and_changes_nothing(api):
    execution = Execution.objects.get(pk=submit(api, "add-subdomain", SUBDOMAIN).json()["id"])

    with override_settings(ALFRED_READ_ONLY=True):
        outcome = run_stage.apply(args=(str(execution.current_run_id), "plan")).get()

    assert outcome == "read_only"
    execution.refresh_from_db()
    assert execution.start_state == StartState.START_PENDING and execution.status == "queued"
    assert not execution.current_run.stages.exclude(status=StageStatus.PENDING).exists()
    assert not execution.current_run.receipts.exists()
