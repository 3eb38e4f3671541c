"""Two beats under load for ALFRED_BEAT_SOAK_SECONDS (five minutes by default), the leader
SIGKILLed half way: the scans go out once per interval all along (counted in the broker's
`scanners` queue, which no worker here consumes), the other beat takes over within its lease
and a check, and the executions submitted meanwhile each run every stage once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

from alfred.beat import LEASE
from alfred.broker import redis_url_of
from alfred.models import BeatLease
from executions.models import Execution
from tests.conftest import BeatProcess, WorkerProcess, wait_for
from tests.integration.test_engine import assert_gapless, event_types
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SOAK = float(os.environ.get("ALFRED_BEAT_SOAK_SECONDS", "300"))
SCAN = "executions.tasks.timers_scan"  # every second under alfred.settings_test


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    url = redis_url_of(settings.CELERY_BROKER_URL)
    assert url is not None
    client = redis.Redis.from_url(url)
    client.delete("scanners")
    yield client
    client.delete("scanners")
    client.close()


def scans(client: redis.Redis) -> int:
    return sum(
        1 for raw in client.lrange("scanners", 0, -1) if json.loads(raw)["headers"]["task"] == SCAN
    )


def test_two_beats_under_load_send_each_scan_once_and_hand_over_when_the_leader_dies(
    api: Any, broker: redis.Redis
) -> None:
    worker = WorkerProcess("soak").start(queues="stages,webhooks,celery", beat=False)
    beats = [BeatProcess(f"soak-beat-{n}").start() for n in (1, 2)]
    submitted: list[str] = []
    stop = threading.Event()

    def load() -> None:  # an execution every half second, all along
        try:
            while not stop.wait(0.5):
                submitted.append(
                    submit(api, "test-counter", {"label": f"soak-{time.time()}"}).json()["id"]
                )
        finally:
            connection.close()

    try:
        wait_for(lambda: scans(broker) >= 2, timeout=60)
        broker.delete("scanners")
        started = time.monotonic()
        feeding = threading.Thread(target=load)
        feeding.start()
        # the first half: counted, then the leader killed
        time.sleep(SOAK / 2)
        first_half = scans(broker)
        holder = BeatLease.objects.get(name=LEASE).holder
        (leader,) = [b for b in beats if b.proc is not None and f":{b.proc.pid}:" in holder]
        assert leader.proc is not None
        os.kill(leader.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        seen, gap, last = scans(broker), 0.0, killed
        while time.monotonic() < started + SOAK:
            now_seen = scans(broker)
            if now_seen > seen:
                gap, last, seen = max(gap, time.monotonic() - last), time.monotonic(), now_seen
            time.sleep(0.2)
        stop.set()
        feeding.join(30)
        total = scans(broker)
        for execution_id in submitted:
            wait_for(lambda i=execution_id: Execution.objects.get(pk=i).terminal, timeout=120)
    finally:
        stop.set()
        for beat in beats:
            beat.stop()
        worker.stop()

    # then the scan went out once a second (not once per beat), in both halves
    assert SOAK / 2 - 3 <= first_half <= SOAK / 2 + 3, first_half
    assert SOAK - 8 <= total <= SOAK + 3, total
    # the other beat took over within its lease (and a check) of the kill
    lease = float(os.environ["ALFRED_BEAT_LEASE_SECONDS"])
    assert gap < lease + lease / 5 + 1.5, f"no scan for {gap:.1f} s"
    assert BeatLease.objects.get(name=LEASE).holder != holder
    # and every execution submitted meanwhile ran each stage once
    assert len(submitted) >= SOAK
    for execution_id in submitted:
        assert Execution.objects.get(pk=execution_id).status == "succeeded"
        assert event_types(execution_id).count("stage.succeeded") == 3
        assert_gapless(execution_id)
