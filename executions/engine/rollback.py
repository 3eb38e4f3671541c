"""A rollback run (DESIGN §4): one stage, ``rollback``, with no step cache of its own from
earlier runs. It loads the mutation receipts of every earlier run of the execution that is
not itself a rollback, newest first (by run, then by position in the run), and undoes each
through the compensation its ``resource``/``action`` registered (``registry``): the engine
imports no workflow and no provider.

Each compensation is stage code run under a key space of its own (``undo:<receipt id>:``), so
its reads, its batch and its waits are receipts of this run like any step: a crash replays
them, a wait frees the worker. When one is done, ``undone:<receipt id>`` is recorded; a later
rollback run (after one that failed, e.g. ``drifted``) skips what earlier ones undid. A
compensation that fails fails the run, and the execution is ``failed`` with its error.
"""

from __future__ import annotations

from typing import Any

from executions.engine.registry import compensation_get
from executions.models import ReceiptStatus, RunKind, StepReceipt

STAGE = "rollback"
STAGES = (STAGE,)


class _Scoped:
    """``ctx`` with every key under ``prefix``: one compensation's receipts apart from the
    others' in the one rollback stage."""

    def __init__(self, ctx: Any, prefix: str) -> None:
        self._ctx = ctx
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def step(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._ctx.step(self._prefix + key, fn, *args, **kwargs)

    def wait_until(self, key: str, probe: Any, **kwargs: Any) -> Any:
        return self._ctx.wait_until(self._prefix + key, probe, **kwargs)

    def sleep(self, key: str, seconds: float) -> None:
        self._ctx.sleep(self._prefix + key, seconds)

    def wait_for_hook(self, name: str, **kwargs: Any) -> Any:
        return self._ctx.wait_for_hook(self._prefix + name, **kwargs)


def receipts_to_undo(execution_id: str, before_run: int) -> list[StepReceipt]:
    """The mutation receipts a rollback undoes, in the order it undoes them."""
    return list(
        StepReceipt.objects.filter(
            run__execution_id=execution_id,
            run__number__lt=before_run,
            mutation__isnull=False,
            status=ReceiptStatus.SUCCEEDED,
        )
        .exclude(run__kind=RunKind.ROLLBACK)
        .order_by("-run__number", "-sequence")
    )


def _undone_before(execution_id: str, before_run: int) -> set[str]:
    keys = StepReceipt.objects.filter(
        run__execution_id=execution_id,
        run__number__lt=before_run,
        run__kind=RunKind.ROLLBACK,
        stage=STAGE,
        step_key__startswith="undone:",
        status=ReceiptStatus.SUCCEEDED,
    ).values_list("step_key", flat=True)
    return {key.removeprefix("undone:") for key in keys}


def rollback_stage(ctx: Any, run_number: int) -> dict[str, Any]:
    undone = _undone_before(ctx.execution_id, run_number)
    restored = []
    for receipt in receipts_to_undo(ctx.execution_id, run_number):
        mutation = receipt.mutation or {}
        if str(receipt.pk) in undone:
            continue
        compensate = compensation_get(str(mutation.get("resource")), str(mutation.get("action")))
        result = compensate(_Scoped(ctx, f"undo:{receipt.pk}:"), mutation)
        ctx.step(f"undone:{receipt.pk}", _note, receipt.pk, mutation["resource"], result)
        restored.append({"receipt": receipt.pk, "resource": mutation["resource"]})
    return {"undone": restored}


def _note(receipt: int, resource: str, result: Any) -> dict[str, Any]:
    return {"receipt": receipt, "resource": resource, "result": result}
