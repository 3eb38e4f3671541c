"""The quick workflow-level chaos run (tests/support/workflow_chaos.py): ten executions over the
five workflows, each fault once: a pool process and a whole worker SIGKILLed, PostgreSQL restarted,
the broker flushed, beat and the web process SIGKILLed. The long run, fifty executions under
many more kills, is tests/chaos/test_workflow_chaos.py (`make chaos`)."""

from __future__ import annotations

import pytest

from tests.support import workflow_chaos

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]


def test_ten_executions_under_every_fault_once_end_as_without_faults():
    workflow_chaos.run(
        10,
        ["pool", "web", "database", "worker", "broker", "beat"],
        fault_gap=(0.5, 2.0),
        submit_gap=(0.2, 1.0),
        timeout=180,
    )
