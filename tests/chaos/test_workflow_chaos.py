"""The long workflow-level chaos run (tests/support/workflow_chaos.py): fifty executions over the
five workflows; pool processes SIGKILLed a dozen times and whole workers three times, at random
moments, PostgreSQL restarted once, the broker flushed once, beat and the web process
SIGKILLed once each. `make chaos`; the quick run is in tests/integration/."""

from __future__ import annotations

import random

import pytest

from tests.support import workflow_chaos

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]


def test_fifty_executions_under_random_kills_and_every_fault_end_as_without_faults():
    schedule = ["pool"] * 12 + ["worker"] * 3 + ["database", "broker", "beat", "web"]
    random.Random(len(schedule)).shuffle(schedule)  # the order is fixed; the moments are not
    workflow_chaos.run(50, schedule, fault_gap=(1.5, 7.0), submit_gap=(0.1, 0.6), timeout=420)
