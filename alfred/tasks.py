"""The worker's own tasks. Importing this module (Celery's autodiscovery does, in every
worker) also starts the heartbeat and the port of ``alfred.worker_http`` once the worker is
ready."""

from __future__ import annotations

from celery import shared_task

from alfred import worker_http
from alfred.worker_http import HEARTBEAT_TASK
from alfred.workers import worker_heartbeat_record

__all__ = ["worker_heartbeat", "worker_http"]


@shared_task(name=HEARTBEAT_TASK, ignore_result=True)
def worker_heartbeat(worker: str) -> None:
    """Run by a pool process of ``worker`` from its own queue: it consumes."""
    worker_heartbeat_record(worker)
