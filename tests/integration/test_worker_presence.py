"""A worker that is gone stops being reported after a bounded time, and is forgotten.

A real worker process proves it consumes (its heartbeat task) and marks itself present (its
main process, every period); the web's ``/metrics`` reports the workers still present. One
killed outright (SIGKILL of its whole process group, as a rescheduled pod's old name) drops
out three of its periods after its last mark, so no alert about it pages forever; the fleet's
gauge then says that no worker consumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from alfred.models import WorkerHeartbeat
from alfred.workers import FORGOTTEN_SECONDS, worker_gone, worker_seen
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_metrics import matching, value, web_scrape

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.server("worker presence written and read on another major version"),
]

PERIOD = 0.5  # the worker's ALFRED_WORKER_HEARTBEAT_SECONDS: gone 1.5 s after its last mark


@pytest.fixture
def doomed() -> Iterator[WorkerProcess]:
    worker = WorkerProcess("doomed").start(
        beat=False, environ={"ALFRED_WORKER_HEARTBEAT_SECONDS": str(PERIOD)}
    )
    try:
        yield worker
    finally:
        worker.stop()


def _reported() -> dict[str, float]:
    return {
        dict(labels)["worker"]: age
        for labels, age in matching(web_scrape(), "alfred_worker_heartbeat_age_seconds").items()
    }


def test_a_worker_killed_outright_stops_being_reported(doomed):
    # given: a worker that consumes, reported by the web
    name = wait_for(lambda: next(iter(_reported()), None), timeout=30)
    assert name.startswith("doomed@")

    # when: the whole worker is killed (no warm shutdown: its row stays behind)
    doomed.kill()

    # then: within a few of its periods it is no longer reported, and no worker consumes
    wait_for(lambda: name not in _reported(), timeout=10, interval=0.1)
    samples = web_scrape()
    assert ("alfred_workers_consuming", ()) in samples
    assert value(samples, "alfred_workers_consuming") == 0
    # and its row is kept (the runtime may still need to know it is gone)
    assert WorkerHeartbeat.objects.filter(worker=name).exists()


def test_a_starting_worker_forgets_workers_gone_long_ago(doomed):
    # given: a worker gone for longer than FORGOTTEN_SECONDS, and one gone a minute ago
    long_ago = Now() - timedelta(seconds=FORGOTTEN_SECONDS + 60)
    WorkerHeartbeat.objects.create(worker="old@pod-1", consumed_at=long_ago, seen_at=long_ago)
    recently = Now() - timedelta(seconds=60)
    WorkerHeartbeat.objects.create(worker="new@pod-2", consumed_at=recently, seen_at=recently)
    doomed.stop()

    # when: a worker starts (and consumes)
    doomed.start(beat=False, environ={"ALFRED_WORKER_HEARTBEAT_SECONDS": str(PERIOD)})
    wait_for(lambda: any(w.startswith("doomed@") for w in _reported()), timeout=30)

    # then: the long-gone row is deleted, the recent one kept (and neither is reported)
    rows = set(WorkerHeartbeat.objects.values_list("worker", flat=True))
    assert "old@pod-1" not in rows
    assert "new@pod-2" in rows
    assert not {"old@pod-1", "new@pod-2"} & set(_reported())
    # and the fleet's gauge counts the one worker that consumes
    assert value(web_scrape(), "alfred_workers_consuming") == 1


def _row(worker: str, *, seen: float, since: float, period: float = 10.0) -> None:
    """A worker's row as it would be: last marked ``seen`` seconds ago, without a gap since
    ``since`` seconds ago (the database's clock)."""
    WorkerHeartbeat.objects.create(
        worker=worker,
        consumed_at=Now() - timedelta(seconds=seen),
        seen_at=Now() - timedelta(seconds=seen),
        seen_since=Now() - timedelta(seconds=since),
        period_seconds=period,
    )


def test_a_worker_is_gone_only_while_another_worker_marks_without_a_gap(settings):
    # given: a worker unmarked for four of its 10 s periods, and another marking for a minute
    settings.ALFRED_WORKER_HEARTBEAT_SECONDS = 10.0
    _row("holder@a", seen=40, since=600)
    _row("other@b", seen=1, since=60)

    # then: the holder is gone; the other is not; of a stranger nothing is known
    assert worker_gone("holder@a")
    assert not worker_gone("other@b")
    assert not worker_gone("stranger@c")

    # and when: the database was away 40 s (the other's marks stopped too), and the other
    # marks again first
    WorkerHeartbeat.objects.filter(worker="other@b").update(seen_at=Now() - timedelta(seconds=40))
    worker_seen("other@b")

    # then: its count starts over, and the holder is not taken for gone until the other's
    # marks have gone on for as long as the holder may go unmarked (by then a live holder has
    # marked again)
    other = WorkerHeartbeat.objects.get(worker="other@b")
    assert abs(other.seen_at - other.seen_since) < timedelta(seconds=1)
    assert not worker_gone("holder@a")

    # and a mark on time (no gap) keeps the count
    WorkerHeartbeat.objects.filter(worker="other@b").update(
        seen_at=Now() - timedelta(seconds=10), seen_since=Now() - timedelta(seconds=60)
    )
    worker_seen("other@b")
    assert worker_gone("holder@a")
