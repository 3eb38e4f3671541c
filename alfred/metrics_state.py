"""State gauges: what is waiting, and for how long, read from the database at each scrape
of the web's ``/metrics`` (``alfred.metrics`` says why state is read rather than kept).

Each app declares its gauges as SQL (:class:`SqlGauge`) and registers them in its
``ready()`` (``alfred.metrics.state_register``); this module holds the mechanism and
Alfred's own: the beat lease and the workers' heartbeats (``alfred.workers``). Every age is on
the database's clock; each query reads what an index on active rows covers, so a scrape costs
what is active, not what is remembered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from celery import current_app
from django.conf import settings
from django.db import connection
from kombu import Queue
from kombu.exceptions import ChannelError
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alfred import workers
from alfred.models import BeatLease

log = logging.getLogger(__name__)


class SqlGauge(NamedTuple):
    """A gauge read by ``sql``: each row is the labels' values, then the sample's value."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    sql: str


class SqlGauges(Collector):
    def __init__(self, gauges: Sequence[SqlGauge]) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        with connection.cursor() as cursor:
            for gauge in self.gauges:
                family = GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)
                cursor.execute(gauge.sql)
                for *values, sample in cursor.fetchall():
                    family.add_metric([str(v) for v in values], float(sample or 0))
                yield family


ALFRED_GAUGES: tuple[SqlGauge, ...] = (
    SqlGauge(
        "alfred_beat_lease_age_seconds",
        "Since the leading beat last renewed its lease (it does every fifth of "
        "ALFRED_BEAT_LEASE_SECONDS): no beat ticks when this grows.",
        (),
        f"""SELECT extract(epoch FROM clock_timestamp() - renewed_at)
              FROM {BeatLease._meta.db_table} WHERE name = 'beat'""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_worker_heartbeat_age_seconds",
        "Since each worker still present last consumed its own heartbeat task: a worker that "
        "stopped consuming lets this grow; one gone (its main process no longer marks itself "
        "present for three of its heartbeat periods) is no longer reported.",
        ("worker",),
        f"""SELECT h.worker, extract(epoch FROM clock_timestamp() - h.consumed_at)
              FROM {workers.TABLE} h WHERE NOT ({workers.GONE})""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_workers_consuming",
        "Workers that consumed their own heartbeat task within three of their periods: at 0, "
        "no queued work is taken.",
        (),
        f"SELECT count(*) FROM {workers.TABLE} h WHERE {workers.CONSUMING}",  # noqa: S608
    ),
)


class BrokerQueues(Collector):
    """``alfred_broker_queue_messages{queue}``: the messages waiting in each broker queue,
    read from the broker at each scrape (a passive declare: Redis counts a list's length).
    ``queues`` names them when asked: the settings' own and any a workflow's stage declares.
    A queue the broker never saw holds nothing; a broker that does not answer is left out of
    the scrape (logged), and its absence is what an alert on this gauge sees."""

    NAME = "alfred_broker_queue_messages"

    def __init__(self, queues: Callable[[], Iterable[str]]) -> None:
        self.queues = queues

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            self.NAME,
            "Messages waiting in each broker queue: one that only grows has no worker "
            "consuming it (or too few).",
            labels=("queue",),
        )
        try:
            with current_app.connection_for_read() as broker:
                channel = broker.default_channel
                for name in sorted(set(self.queues())):
                    family.add_metric([name], float(_waiting(channel, name)))
        except Exception as exc:  # the broker away: no sample, not a failed scrape
            log.warning("broker queue depths not read: %s", exc)
            return
        yield family


def _waiting(channel: Any, name: str) -> int:
    try:
        declared: Any = Queue(name).bind(channel).queue_declare(passive=True)
        return int(declared.message_count)  # kombu types the answer as the queue's name
    except ChannelError:  # never declared: nothing was ever sent to it
        return 0


def settings_queues() -> set[str]:
    """The queues the settings route Alfred's tasks to, and Celery's default."""
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    return {settings.CELERY_TASK_DEFAULT_QUEUE, "celery", *routed}
