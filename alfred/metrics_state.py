"""State gauges: what is waiting, and for how long, read from the database at each scrape
of the web's ``/metrics`` (``alfred.metrics`` says why state is read rather than kept).

Each app declares its gauges as SQL (:class:`SqlGauge`) and registers them in its
``ready()`` (``alfred.metrics.state_register``); this module holds the mechanism and
Alfred's own: the beat lease and the workers' heartbeats. Every age is on the database's
clock; each query reads what an index on active rows covers, so a scrape costs what is
active, not what is remembered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from django.db import connection
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alfred.models import BeatLease, WorkerHeartbeat


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
        "Since each worker last consumed its own heartbeat task: a worker that stopped "
        "consuming lets this grow.",
        ("worker",),
        f"""SELECT worker, extract(epoch FROM clock_timestamp() - consumed_at)
              FROM {WorkerHeartbeat._meta.db_table}""",  # noqa: S608
    ),
)
