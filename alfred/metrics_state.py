"""State gauges: what is waiting, and for how long, read from the database at each scrape
of the web's ``/metrics`` (``alfred.metrics`` says why state is read rather than kept).

Each app declares its gauges as SQL (:class:`SqlGauge`) and registers them in its
``ready()`` (``alfred.metrics.state_register``); this module holds the mechanism and
Alfred's own: the beat lease and the workers' heartbeats (``alfred.workers``). Every age is on
the database's clock; each query reads what an index on active rows covers, so a scrape costs
what is active, not what is remembered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from django.db import connection
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alfred import workers
from alfred.models import BeatLease


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
