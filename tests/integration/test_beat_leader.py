"""Several beats, one leader: the lease itself on the database's clock, then two real
``celery beat`` processes against the test database and broker, with no worker consuming:
what they send is counted in the broker's own queues, by task."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import psycopg
import pytest
import redis
from django.conf import settings
from django.db.models.functions import Now

from alfred.beat import LEASE, beat_lease_release, beat_lease_try
from alfred.broker import redis_url_of
from alfred.models import BeatLease
from tests.conftest import BeatProcess, subprocess_database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ("scanners", "webhooks")
# One beat's schedule under alfred.settings_test: the timer scan and the recovery scan every
# second, the lane reconciler every 5 s, the webhook scan every 30 s.
EVERY = {
    "executions.tasks.timers_scan": 1.0,
    "executions.tasks.runs_recover": 1.0,
    "lanes.tasks.reconcile": 5.0,
}


def test_one_holder_at_a_time_on_the_databases_clock():
    # given a lease taken by one beat (one a beat of an earlier test may have left, run out)
    BeatLease.objects.filter(name=LEASE).update(expires_at=Now() - timedelta(seconds=1))
    epoch = beat_lease_try("a", 0.5)
    assert epoch is not None
    # then another is refused while it lasts, and its holder renews it (same epoch)
    assert beat_lease_try("b", 0.5) is None
    assert beat_lease_try("a", 0.5) == epoch
    # when it runs out, the other takes it over (a new epoch), and the first has lost it
    time.sleep(0.6)
    assert beat_lease_try("b", 0.5) == epoch + 1
    assert beat_lease_try("a", 0.5) is None
    # a holder that gives it up hands over at once
    beat_lease_release("b")
    assert beat_lease_try("a", 30) == epoch + 2
    beat_lease_release("b")  # not the holder: changes nothing
    assert beat_lease_try("b", 30) is None


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    url = redis_url_of(settings.CELERY_BROKER_URL)
    assert url is not None, "the test stack's broker is plain Redis"
    client = redis.Redis.from_url(url)
    client.delete(*QUEUES)
    yield client
    client.delete(*QUEUES)
    client.close()


@pytest.fixture
def beats() -> Iterator[list[BeatProcess]]:
    started = [BeatProcess(f"beat-{n}").start() for n in (1, 2)]
    try:
        yield started
    finally:
        for beat in started:
            beat.stop()


def sent(client: redis.Redis) -> Counter[str]:
    """The periodic tasks sent so far, by task name, from the broker's queues."""
    found: Counter[str] = Counter()
    for queue in QUEUES:
        for raw in client.lrange(queue, 0, -1):
            found[json.loads(raw)["headers"]["task"]] += 1
    return found


def logged_at(output: str, text: str) -> float:
    """When the first log line holding ``text`` was written (its timestamp, in seconds)."""
    line = next(line for line in output.splitlines() if text in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # noqa: DTZ007


def leader(beats: list[BeatProcess]) -> BeatProcess:
    holder = BeatLease.objects.get(name=LEASE).holder
    (found,) = [b for b in beats if b.proc is not None and f":{b.proc.pid}:" in holder]
    return found


def test_two_beats_send_each_scan_once_per_interval_and_a_killed_leader_is_replaced(broker, beats):
    # given two beats, one of which leads once they are up
    wait_for(lambda: sent(broker)["executions.tasks.timers_scan"] >= 2, timeout=60)
    first = leader(beats)
    epoch = BeatLease.objects.get(name=LEASE).epoch
    # when they run side by side for 15 s
    broker.delete(*QUEUES)
    time.sleep(15)
    counted = sent(broker)
    # then each scan went out once per interval, not once per beat
    for task, every in EVERY.items():
        expected = 15 / every
        assert expected - 2 <= counted[task] <= expected + 2, (task, counted)
    assert leader(beats) is first
    # when the leader is killed outright
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)
    killed_at = time.monotonic()
    broker.delete(*QUEUES)
    # then the other takes the lease over once it runs out, and the scans go on
    wait_for(lambda: sent(broker)["executions.tasks.timers_scan"] >= 1, timeout=15)
    took = time.monotonic() - killed_at
    lease = float(os.environ["ALFRED_BEAT_LEASE_SECONDS"])
    assert took < lease + lease / 5 + 1.0 + 1.0, f"no scan for {took:.1f} s after the kill"
    (other,) = [b for b in beats if b is not first]
    assert leader(beats) is other
    assert BeatLease.objects.get(name=LEASE).epoch == epoch + 1
    assert "leads (lease epoch" in other.output()


def test_a_leader_stopped_gracefully_hands_over_at_once(broker, beats):
    wait_for(lambda: sent(broker)["executions.tasks.timers_scan"] >= 2, timeout=60)
    first = leader(beats)
    epoch = BeatLease.objects.get(name=LEASE).epoch
    (other,) = [b for b in beats if b is not first]
    # when it is stopped (SIGTERM), in the middle of whatever it was doing
    stopping = time.monotonic()
    first.stop()
    # then it went at once, giving the lease up, and the other took it before it ran out
    lease = float(os.environ["ALFRED_BEAT_LEASE_SECONDS"])
    assert time.monotonic() - stopping < 5, "the beat hung on SIGTERM"
    gave_up = logged_at(first.output(), "gave up the lease")
    taken = f"leads (lease epoch {epoch + 1})"
    wait_for(lambda: taken in other.output(), timeout=lease + 1)
    took = logged_at(other.output(), taken) - gave_up
    assert took < lease / 2, f"the other waited {took:.1f} s: for the lease to run out?"


def test_a_beat_whose_stop_is_stuck_exits_within_its_bound():
    # given a beat that leads, and its lease's table locked by someone else (as the
    # transaction a SIGTERM interrupts may hold the rows its last writes need)
    beat = BeatProcess("stuck-stop").start(environ={"ALFRED_BEAT_STOP_SECONDS": "3"})
    try:
        wait_for(lambda: "leads" in beat.output(), timeout=60)
        with psycopg.connect(subprocess_database_url(), autocommit=False) as holder:
            holder.execute(f"LOCK TABLE {BeatLease._meta.db_table} IN ACCESS EXCLUSIVE MODE")
            # when it is asked to stop
            began = time.monotonic()
            assert beat.proc is not None
            os.killpg(beat.proc.pid, signal.SIGTERM)
            # then it ends within its bound (it waited on the lock for ever before), saying so
            beat.proc.wait(3 + 7)
            took = time.monotonic() - began
            holder.rollback()
        assert took < 3 + 7
        assert "still stopping after 3 s (ALFRED_BEAT_STOP_SECONDS): exiting" in beat.output()
    finally:
        beat.kill()
