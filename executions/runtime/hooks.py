"""Signalling a hook (``ctx.wait_for_hook``). The HookSignal ledger is keyed by the sender's
idempotency key: a resent signal is a no-op; the first signal of a hook is its answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from executions.events import EventType
from executions.models import Hook, HookSignal, HookStatus
from executions.outbox import event_emit, event_key
from executions.runtime.dispatch import run_wake


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
