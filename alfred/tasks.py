"""The worker's own tasks. Importing this module (Celery's autodiscovery does, in every
worker) also starts the heartbeat and the port of ``alfred.worker_http`` once the worker is
ready, and connects how it stops (``alfred.worker_stop``)."""

from __future__ import annotations

from celery import shared_task

from alfred import worker_http, worker_stop
from alfred.worker_http import HEARTBEAT_TASK
from alfred.workers import worker_heartbeat_record

__all__ = ["worker_heartbeat", "worker_http", "worker_stop"]


@shared_task(name=HEARTBEAT_TASK, ignore_result=True)
def worker_heartbeat(worker: str) -> None:
    """Run by a pool process of ``worker`` from its own queue: it consumes."""
    worker_heartbeat_record(worker)
