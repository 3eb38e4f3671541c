"""Celery tasks: thin — take ids, call the engine. Running one twice changes nothing."""

from __future__ import annotations

import os

from celery import shared_task

from executions.engine.runner import run_bind


@shared_task(name="executions.tasks.run_start", acks_late=True, ignore_result=True, bind=True)
def run_start(self, run_id: str) -> dict[str, object]:
    worker = f"{self.request.hostname or 'worker'}:{os.getpid()}"
    result = run_bind(run_id, worker=worker)
    return {"bound": result.bound, "fence": result.fence, "reason": result.reason}
