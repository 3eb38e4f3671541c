"""A hook's writes: opening one (``ctx.wait_for_hook``, in the transaction of its receipt),
signalling it, reading its answer, expiring it. The HookSignal ledger is keyed by the sender's
idempotency key: a resent signal is a no-op; the first signal of a hook is its answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from executions.events import EventType
from executions.models import Hook, HookSignal, HookStatus, Timer, TimerStatus
from executions.outbox import event_emit, event_key
from executions.runtime.dispatch import run_wake
from executions.runtime.errors import FatalError


class HookClosed(Exception):
    """The hook no longer waits (its run finished, or it was superseded)."""


@dataclass(frozen=True)
class SignalResult:
    hook_id: str
    accepted: bool  # False: a resend (same idempotency key) or a later second answer


def hook_signal(
    *, token: str, idempotency_key: str, payload: dict[str, Any], principal: str
) -> SignalResult:
    with transaction.atomic(durable=True):
        hook = Hook.objects.select_for_update().get(token=token)
        return hook_signal_locked(
            hook, idempotency_key=idempotency_key, payload=payload, principal=principal
        )


def hook_signal_locked(
    hook: Hook, *, idempotency_key: str, payload: dict[str, Any], principal: str
) -> SignalResult:
    """Signal ``hook``, locked by the caller, in the caller's transaction (a control that
    checks the execution and its hook under their locks, then answers the hook)."""
    _, created = HookSignal.objects.get_or_create(
        hook=hook,
        idempotency_key=idempotency_key,
        defaults={"payload": payload, "principal": principal},
    )
    if not created:
        return SignalResult(hook.id, accepted=False)
    if hook.status == HookStatus.SIGNALLED:
        return SignalResult(hook.id, accepted=False)
    if hook.status != HookStatus.PENDING:
        raise HookClosed(f"hook {hook.id} is {hook.status}")
    hook.status = HookStatus.SIGNALLED
    hook.resolved_at = timezone.now()
    hook.save(update_fields=["status", "resolved_at"])
    event_emit(
        execution_id=hook.execution_id,
        type=EventType.HOOK_SIGNALLED,
        key=event_key(hook.execution_id, f"{hook.id}:signalled"),
        payload={"hook": hook.id, "name": hook.name, "by": principal},
    )
    run_wake(hook.run_id)
    return SignalResult(hook.id, accepted=True)


def hook_open(
    *,
    execution_id: str,
    run_id: str,
    stage: str,
    name: str,
    token: str,
    operator: bool,
    payload: dict[str, Any],
    expires_at: datetime | None,
    now: datetime,
) -> None:
    """Open the hook ``token`` for ``stage`` of ``run_id``, superseding the execution's other
    open hooks of that ``name`` (a new checkpoint replaces the one before it). In the caller's
    transaction, with the wait's receipt.

    A hook of an earlier run of this execution with this token (the same plan) carries over to
    this run: a signal it already got still counts; a pending, superseded, expired or canceled
    one waits again, for this run. A token another execution holds is refused."""
    earlier = Hook.objects.filter(token=token).first()
    if earlier is not None and earlier.execution_id != execution_id:
        raise FatalError(
            f"hook token {token!r} belongs to execution {earlier.execution_id}",
            code="hook_token_taken",
        )
    Hook.objects.filter(
        execution_id=execution_id,
        name=name,
        status__in=(HookStatus.PENDING, HookStatus.SIGNALLED),
    ).exclude(token=token).update(status=HookStatus.SUPERSEDED, resolved_at=now)
    if earlier is not None:
        signalled = earlier.status == HookStatus.SIGNALLED
        Hook.objects.filter(pk=earlier.pk).update(
            run_id=run_id,
            stage=stage,
            status=HookStatus.SIGNALLED if signalled else HookStatus.PENDING,
            expires_at=earlier.expires_at if signalled else expires_at,
            resolved_at=earlier.resolved_at if signalled else None,
        )
        return
    Hook.objects.create(
        execution_id=execution_id,
        run_id=run_id,
        stage=stage,
        name=name,
        token=token,
        operator=operator,
        payload=payload,
        expires_at=expires_at,
    )


def hook_answer(hook: Hook) -> Any:
    """The payload of a signalled hook's first signal: its answer."""
    return hook.signals.order_by("created_at", "id").values_list("payload", flat=True)[0]


def hook_expire(hook: Hook, now: datetime) -> None:
    """Mark ``hook`` expired unless a signal got there first (the approve service refuses
    from ``expires_at`` on, by the same clock, so none can)."""
    Hook.objects.filter(pk=hook.pk, status=HookStatus.PENDING).update(
        status=HookStatus.EXPIRED, resolved_at=now
    )


def hook_expiry_cancel(run_id: str, stage: str, key: str) -> None:
    """Cancel an answered hook's expiry timer."""
    Timer.objects.filter(run_id=run_id, stage=stage, key=key, status=TimerStatus.PENDING).update(
        status=TimerStatus.CANCELED
    )
