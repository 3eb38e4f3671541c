"""Celery tasks: thin — take ids, call the engine. Running one twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from executions.engine.runner import run_bind


@shared_task(name="executions.tasks.run_start", acks_late=True, ignore_result=True, bind=True)
def run_start(self, run_id: str) -> dict[str, object]:
    result = run_bind(run_id, worker=self.request.hostname or "worker")
    return {"bound": result.bound, "fence": result.fence, "reason": result.reason}
