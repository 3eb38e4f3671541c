"""A lane change and what it means for the executions it names travel in one transaction
(docs/architecture.md, "Events"): the lanes services write the lane and return the change, the
executions side (the lanes' port, installed by the executions app) writes its events and the audit
entry before the lane's transaction commits — so when those cannot be written, the lane has not
changed either."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from executions.lanes.reconciler import lane_reconcile
from executions.models import AuditEntry, Execution, OutboxEvent, Run, Stage
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import lane_recover
from tests.support.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "aws-infrastructure"


def _owner_and_next(api: Any, status: str) -> tuple[str, str]:
    """Two add-domain executions on one lane; the owner ended with ``status`` after its
    planning stage started (so a canceled owner blocks the lane)."""
    owner = submit(api, "add-domain", {"domain": "one.example"}).json()["id"]
    queued = submit(api, "add-domain", {"domain": "two.example"}).json()["id"]
    run_id = Execution.objects.get(pk=owner).current_run_id
    Execution.objects.filter(pk=owner).update(status=status)
    Run.objects.filter(pk=run_id).update(status=status)
    Stage.objects.filter(run_id=run_id, name="plan").update(started_at=timezone.now())
    return owner, queued


def _outbox_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> int:
        raise RuntimeError("the outbox is unavailable")

    monkeypatch.setattr("executions.lanes.effects.event_emit", refuse)


def _lane_events() -> list[tuple[str, str]]:
    """The lane events so far, in the order written: (execution, type)."""
    rows = OutboxEvent.objects.filter(type__startswith="lane.").order_by("id")
    return list(rows.values_list("execution_id", "type"))


def test_a_release_whose_events_cannot_be_written_leaves_the_lane_as_it_was(api, monkeypatch):
    # given: a succeeded owner, another execution queued behind it
    owner, queued = _owner_and_next(api, "succeeded")
    before, events = Lane.objects.get(key=KEY), _lane_events()
    _outbox_down(monkeypatch)

    # when: the reconciler releases the lane and the events cannot be written
    with pytest.raises(RuntimeError, match="outbox"):
        lane_reconcile(KEY)

    # then: the lane is still the owner's, the next still queued, no new lane event
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id, lane.version) == (LaneState.HELD, owner, before.version)
    assert list(LaneWaiter.objects.values_list("execution_id", flat=True)) == [queued]
    assert _lane_events() == events

    # and once they can be, the release happens with its events
    monkeypatch.undo()
    lane_reconcile(KEY)
    assert Lane.objects.get(key=KEY).owner_id == queued
    assert _lane_events() == [*events, (owner, "lane.released"), (queued, "lane.acquired")]


def test_a_recovery_whose_events_cannot_be_written_is_neither_done_nor_audited(api, monkeypatch):
    # given: a canceled owner blocked its lane for an operator
    owner, queued = _owner_and_next(api, "canceled")
    lane_reconcile(KEY)
    blocked, events = Lane.objects.get(key=KEY), _lane_events()
    assert blocked.state == LaneState.RECOVERY_REQUIRED
    assert events[-1] == (owner, "lane.recovery_required")
    _outbox_down(monkeypatch)

    # when: an operator recovers it and the events cannot be written
    with pytest.raises(RuntimeError, match="outbox"):
        lane_recover(key=KEY, expected_owner=owner, actor="ops", reason="checked")

    # then: nothing happened, nothing was audited
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id, lane.version) == (
        LaneState.RECOVERY_REQUIRED,
        owner,
        blocked.version,
    )
    assert list(LaneWaiter.objects.values_list("execution_id", flat=True)) == [queued]
    assert not AuditEntry.objects.filter(action="lane.recover").exists()
    assert _lane_events() == events
