"""A property of the lanes and the engine together, under random interleavings.

Hypothesis drives accept (new work, a reuse or a continuation), stage deliveries (any
execution, any time: a stale, duplicate or early message is delivered like any other),
cancel, retry, lane recovery (to the next in line, or to a chosen waiter), reconciler ticks,
timer and recovery scans, over a few executions on two lanes. After every step:

- at most one root execution of a lane is running, waiting or paused, and it is the owner;
- no step ran twice in a run: each run's counted change (in Redis, outside the database)
  equals its receipts of it, at most one;
- a held lane's owner is active, a blocked lane says why, every queued execution is active.

Everything is real: the services, the engine's stage runner, PostgreSQL; only the Celery
worker is replaced by this process calling what its task calls.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from celery import current_app
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from alfred.principals import cli_caller
from executions.acceptance import execution_accept
from executions.controls import InvalidState, execution_cancel, execution_retry
from executions.lanes.reconciler import lane_reconcile
from executions.models import ACTIVE_STATUSES, Execution, Stage, StepReceipt
from executions.runtime.runner import stage_execute
from executions.runtime.scans import runs_recover, timers_fire
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import LaneConflict, LaneOwnerMismatch, lane_recover
from tests.support.engine_workflows import effects

MODES = ["ok", "ok", "not_ready", "crash"]


class LanesAndRuns(RuleBasedStateMachine):
    @initialize()
    def fresh_lanes(self) -> None:
        prefix = uuid.uuid4().hex[:8]
        self.lanes = [f"prop-{prefix}-a", f"prop-{prefix}-b"]
        self.labels = [f"{prefix}-{i}" for i in range(4)]
        self.executions: list[str] = []

    # --- what integrations, workers and operators do -----------------------------------

    @rule(lane=st.integers(0, 1), which=st.integers(0, 3))
    def accept(self, lane: int, which: int) -> None:
        body = {"label": self.labels[which], "lane": self.lanes[lane], "mode": MODES[which]}
        acceptance = execution_accept(
            workflow_name="test-laned",
            body=body,
            idempotency_key=str(uuid.uuid4()),
            caller=cli_caller("prop"),
        )
        if acceptance.execution.id not in self.executions:
            self.executions.append(acceptance.execution.id)

    @rule(which=st.integers(0, 20))
    def deliver(self, which: int) -> None:
        """A stage message arrives for an execution, whoever sent it."""
        execution = self._pick(which)
        if execution is None:
            return
        run_id = Execution.objects.values_list("current_run_id", flat=True).get(pk=execution)
        stage = (
            Stage.objects.filter(run_id=run_id)
            .exclude(status="succeeded")
            .order_by("position")
            .values_list("name", flat=True)
            .first()
        )
        if stage is not None:
            stage_execute(str(run_id), stage, "prop@here:0:1", onward=False)  # one stage

    @rule(which=st.integers(0, 20))
    def cancel(self, which: int) -> None:
        execution = self._pick(which)
        if execution is not None:
            with contextlib.suppress(InvalidState):
                execution_cancel(execution_id=execution, caller=cli_caller("prop"))

    @rule(which=st.integers(0, 20))
    def retry(self, which: int) -> None:
        execution = self._pick(which)
        if execution is not None:
            with contextlib.suppress(InvalidState, LaneConflict):
                execution_retry(execution_id=execution, caller=cli_caller("prop"))

    @rule(lane=st.integers(0, 1), to=st.one_of(st.none(), st.integers(0, 20)))
    def recover(self, lane: int, to: int | None) -> None:
        key = self.lanes[lane]
        owner = Lane.objects.filter(key=key).values_list("owner_id", flat=True).first()
        target = self._pick(to) if to is not None else None
        with contextlib.suppress(Lane.DoesNotExist, LaneOwnerMismatch):
            lane_recover(key=key, expected_owner=owner, actor="prop", reason="prop", to=target)

    @rule(lane=st.integers(0, 1))
    def reconcile(self, lane: int) -> None:
        lane_reconcile(self.lanes[lane])

    @rule()
    def scan(self) -> None:
        timers_fire()
        runs_recover()

    def _pick(self, which: int | None) -> str | None:
        if not self.executions or which is None:
            return None
        return self.executions[which % len(self.executions)]

    # --- what must hold after every step -----------------------------------------------

    @invariant()
    def one_root_at_a_time_and_only_its_owner(self) -> None:
        if not hasattr(self, "lanes"):
            return
        for key in self.lanes:
            outside = list(
                Execution.objects.filter(
                    lane_key=key,
                    parent__isnull=True,
                    status__in=["running", "waiting", "paused"],
                ).values_list("id", flat=True)
            )
            assert len(outside) <= 1, f"{key}: {outside} run at once"
            if outside:
                lane = Lane.objects.get(key=key)
                assert lane.owner_id == outside[0], f"{outside[0]} runs; {lane.owner_id} owns"

    @invariant()
    def no_step_ran_twice_in_a_run(self) -> None:
        if not hasattr(self, "lanes"):
            return
        for execution in Execution.objects.filter(pk__in=self.executions):
            label = execution.input["label"]
            for run_id in execution.runs.values_list("id", flat=True):
                counted = effects(label, f"change:{run_id}")
                receipts = StepReceipt.objects.filter(
                    run_id=run_id, step_key="change", status="succeeded"
                ).count()
                assert counted == receipts <= 1, f"{run_id}: {counted} changes, {receipts}"

    @invariant()
    def lanes_are_explained(self) -> None:
        if not hasattr(self, "lanes"):
            return
        for lane in Lane.objects.filter(key__in=self.lanes).select_related("owner"):
            if lane.state == LaneState.HELD:
                assert lane.owner is not None
                assert lane.owner.status in ACTIVE_STATUSES, f"{lane.key} held by {lane.owner}"
            if lane.state == LaneState.RECOVERY_REQUIRED:
                assert lane.reason, f"{lane.key} blocked without a reason"
        for waiter in LaneWaiter.objects.filter(lane_id__in=self.lanes).select_related("execution"):
            assert waiter.execution.status in ACTIVE_STATUSES, f"{waiter} ended, still queued"


@pytest.mark.django_db(transaction=True)
def test_lanes_and_runs_keep_their_invariants_under_random_interleavings() -> None:
    run: Any = LanesAndRuns.TestCase
    run.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    try:
        run().runTest()
    finally:
        with current_app.connection_for_write() as conn:
            conn.default_channel.client.delete("stages")  # type: ignore[attr-defined]
