"""Prometheus metrics: what happened, counted where it happens, and what is stuck, read from
the database when scraped.

Two kinds, kept apart so that neither lies:

- **Events** (counters and histograms below): an acceptance, a stage, a step, a lease taken
  over, a run re-dispatched by the recovery scan, a webhook attempt, a provider call, an
  execution's transition. Each process counts its own. Under uvicorn's workers and Celery's
  prefork pool several processes count at once, so with ``PROMETHEUS_MULTIPROC_DIR`` set (a
  directory per host or pod, emptied when it starts; `make run` and the Helm chart set it)
  they write to files there and a scrape adds them up (prometheus-client's multiprocess
  mode). The web process serves them at ``/metrics``; a worker at ``/metrics`` on
  ``ALFRED_WORKER_HTTP_PORT`` (``alfred.worker_http``).
- **State** (``alfred.metrics_state``, each app's gauges registered with
  ``state_register``; on the web's ``/metrics`` only): executions by
  workflow and status, the oldest run waiting per lane and reason, timers due but unfired,
  approvals pending and their age, lanes by state, webhook backlogs, the beat lease's age,
  each worker's heartbeat. Read with a few aggregate queries over partial indexes at each
  scrape, on the database's clock: true whichever process answers, and no process keeps a
  gauge that a crash could leave stale.

This module imports nothing of Alfred's (the engine, the relay, the providers' observer and
the web all count into it). Scrapes are let in by ``scrape_allowed``: a token, or a network.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterator
from functools import cache

# Read once, before prometheus-client is imported and reads it: whether this process's counts
# go to files there (and a scrape reads every process's) or stay in its memory. A directory
# that is not there yet is made, rather than failing the first count.
MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
if MULTIPROCESS_DIR is not None:
    os.makedirs(MULTIPROCESS_DIR, exist_ok=True)

from django.conf import settings  # noqa: E402
from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

# Seconds: a step is a provider call or a database read (ms to tens of s); a stage is a few.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

ACCEPTANCES = Counter(
    "alfred_acceptances",
    "Trigger requests answered, by workflow and outcome (created, reused, continued, "
    "replayed, refused: the refusal's problem code).",
    ["workflow", "outcome"],
)
TRANSITIONS = Counter(
    "alfred_execution_transitions",
    "Executions that reached a status, by workflow and status.",
    ["workflow", "status"],
)
STAGES = Histogram(
    "alfred_stage_duration_seconds",
    "A stage's code run by a worker, by workflow, stage and outcome (succeeded, suspended, "
    "failed, canceled, lost: its lease or the database went away).",
    ["workflow", "stage", "outcome"],
    buckets=_BUCKETS,
)
STEPS = Histogram(
    "alfred_step_duration_seconds",
    "A step's function (not its replay), by workflow, stage, step function and outcome "
    "(succeeded, retrying, failed).",
    ["workflow", "stage", "step", "outcome"],
    buckets=_BUCKETS,
)
LEASE_TAKEOVERS = Counter(
    "alfred_lease_takeovers",
    "Runs claimed from another worker whose lease ran out or whose process was gone.",
    ["workflow"],
)
DUPLICATE_DELIVERIES = Counter(
    "alfred_duplicate_deliveries",
    "Stage messages a worker refused because another live worker holds the run (a message "
    "delivered again, or a recovery's that lost the race): a diagnostic, never an event.",
    ["workflow", "stage"],
)
RECOVERY_DISPATCHES = Counter(
    "alfred_recovery_dispatches",
    "Runs the recovery scan dispatched again (a start or wake message lost, a lease run out).",
)
DRIFT_CHECKS = Counter(
    "alfred_drift_checks",
    "Checks of the drift watch, by workflow and outcome (in_place, drifted, accepted: as an "
    "operator accepted it, unreadable: a provider could not be read, retired: no longer in "
    "force, postponed: running again).",
    ["workflow", "outcome"],
)
WEBHOOK_ATTEMPTS = Counter(
    "alfred_webhook_attempts",
    "Webhook delivery attempts, by endpoint and outcome (delivered, refused: a non-2xx "
    "answer, error: no answer).",
    ["endpoint", "outcome"],
)
PROVIDER_CALLS = Counter(
    "alfred_provider_calls",
    "Requests to AWS, GitHub and ArgoCD (each attempt, retries included), by provider, "
    "operation and outcome (ok, throttled, transient, conflict, not_found, rejected).",
    ["provider", "operation", "outcome"],
)
PROVIDER_BUDGET_WAIT = Histogram(
    "alfred_provider_budget_wait_seconds",
    "How long requests to AWS, GitHub and ArgoCD waited for their provider's rate budget, "
    "shared by every process (alfred.budgets): 0 when they went at once.",
    ["provider"],
    buckets=(0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
BUDGET_REFUSALS = Counter(
    "alfred_provider_budget_refusals",
    "Requests a provider's rate budget refused rather than make them wait longer than "
    "ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS: nothing was sent; the step retries later.",
    ["provider"],
)
PROVIDER_SECONDS = Histogram(
    "alfred_provider_call_duration_seconds",
    "Requests to AWS, GitHub and ArgoCD (each attempt), by provider and operation.",
    ["provider", "operation"],
    buckets=_BUCKETS,
)


def provider_call_count(provider: str, operation: str, outcome: str, seconds: float) -> None:
    """The providers' observer (``providers.observe``): each attempt counted and timed."""
    PROVIDER_CALLS.labels(provider, operation, outcome).inc()
    PROVIDER_SECONDS.labels(provider, operation).observe(seconds)


def events_registry() -> CollectorRegistry:
    """The counters and histograms of this process, or of every process writing to the
    multiprocess directory."""
    if MULTIPROCESS_DIR is None:
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=MULTIPROCESS_DIR)
    return registry


_state: list[Collector] = []


def state_register(collector: Collector) -> None:
    """An app's state gauges (``alfred.metrics_state.SqlGauges``), read at each scrape of the
    web's ``/metrics``; registered in the app's ``ready()``."""
    if collector not in _state:
        _state.append(collector)


def state_collectors() -> list[Collector]:
    return list(_state)


def exposition(*collectors: Collector) -> tuple[bytes, str]:
    """What a scrape gets, and its content type: the events, and ``collectors``' metrics."""
    registry = CollectorRegistry()
    registry.register(_Of(events_registry()))
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def scrape_allowed(authorization: str, address: str) -> bool:
    """Whether a scrape may read the metrics: with ``ALFRED_METRICS_TOKEN`` set, it sends
    that token (``Authorization: Bearer …``); without, it comes from
    ``ALFRED_METRICS_NETWORKS``."""
    token = settings.ALFRED_METRICS_TOKEN
    if token:
        scheme, _, sent = authorization.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(sent.strip(), token)
    try:
        client = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(client in network for network in _networks(tuple(settings.ALFRED_METRICS_NETWORKS)))


@cache
def _networks(cidrs: tuple[str, ...]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(cidr, strict=False) for cidr in cidrs]


class _Of(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        return iter(self.registry.collect())
