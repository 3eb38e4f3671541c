"""Time skipping for a workflow's tests: run it against the stand-ins and move its durable clock
forward instead of waiting (Temporal's time-skipping test environment is the anchor; the
``durable_clock`` fixture of ``tests/conftest.py`` hands it to a test).

Alfred's one clock is the database's (docs/architecture.md, "Invariants"), which a test cannot
move. What it can move is every instant an execution holds relative to it, which is the same
thing seen from the execution: :meth:`DurableClock.advance` brings every instant the execution
(and each of its children) waits for ``seconds`` sooner — its pending timers (sleeps, polls,
retries, the deadline, an approval's expiry), its hooks' expiries, its runs' deadlines — and
moves every instant it recorded (a sleep's due time, a wait's start and next poll, a
``ctx.now`` reading, when the run paused for an operator) as far
back, in one transaction; then it fires what is due, as the beat's scan would. The workers,
the engine and the stand-ins run as they do in production: nothing is mocked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils.dateparse import parse_datetime

from executions.models import Execution, Hook, HookStatus, Run, StepReceipt, Timer, TimerStatus
from executions.runtime.scans import timers_fire

# What each kind of wait records as instants, in its receipt's output.
_RECORDED = {"sleep": ("due",), "poll": ("since", "next_poll_at")}


class DurableClock:
    def advance(self, execution_id: str, seconds: float) -> int:
        """Move the durable clock of ``execution_id`` (and its children's) forward by
        ``seconds``; returns how many timers then fired."""
        delta = timedelta(seconds=seconds)
        with transaction.atomic():
            family = self._family(execution_id)
            # the engine's lock order: the executions, then their runs, then the rest
            list(Execution.objects.select_for_update().filter(pk__in=family).order_by("pk"))
            list(Run.objects.select_for_update().filter(execution_id__in=family).order_by("pk"))
            runs = Run.objects.filter(execution_id__in=family)
            Timer.objects.filter(run__in=runs, status=TimerStatus.PENDING).update(
                due_at=F("due_at") - delta
            )
            Hook.objects.filter(
                execution_id__in=family, status=HookStatus.PENDING, expires_at__isnull=False
            ).update(expires_at=F("expires_at") - delta)
            runs.filter(deadline_at__isnull=False).update(deadline_at=F("deadline_at") - delta)
            runs.filter(paused_at__isnull=False).update(paused_at=F("paused_at") - delta)
            for receipt in StepReceipt.objects.select_for_update().filter(
                run__in=runs, kind__in=[*_RECORDED, "now"]
            ):
                receipt.output = _moved(receipt.kind, receipt.output, delta)
                receipt.save(update_fields=["output"])
        return timers_fire()

    @staticmethod
    def _family(execution_id: str) -> list[str]:
        family, generation = [execution_id], [execution_id]
        while generation:
            generation = list(
                Execution.objects.filter(parent_id__in=generation).values_list("pk", flat=True)
            )
            family += generation
        return family


def _earlier(value: str, delta: timedelta) -> str:
    parsed: datetime | None = parse_datetime(value)
    assert parsed is not None, value
    return (parsed - delta).isoformat()


def _moved(kind: str, output: Any, delta: timedelta) -> Any:
    if kind == "now":
        return _earlier(str(output), delta)
    if not isinstance(output, dict):
        return output
    return {
        key: _earlier(value, delta) if key in _RECORDED[kind] and value else value
        for key, value in output.items()
    }
