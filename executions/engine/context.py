"""The stage context: every side effect and every wait of a stage goes through it.

Each primitive is recorded as a receipt at its position in the stage. A stage is replayed from
the top whenever it resumes (after a wait, a retry or a crash): a completed primitive returns
its recorded output and is never executed again in that run. A replay that reaches a different
key than recorded at that position is a FatalError: the stage's code is not deterministic.

Writes are fenced: every boundary renews the lease with a compare-and-swap on the run's fence,
so a worker whose claim was taken over stops before writing anything.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from jsonschema import Draft202012Validator

from executions.engine.errors import (
    Canceled,
    FatalError,
    LeaseLost,
    RetryableError,
    Suspend,
)
from executions.models import (
    Hook,
    HookStatus,
    ReceiptStatus,
    Run,
    StepReceipt,
    Timer,
    TimerPurpose,
    TimerStatus,
)

log = logging.getLogger(__name__)

MUTATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["resource", "action", "undo"],
    "properties": {
        "resource": {"type": "string", "minLength": 1},
        "action": {"type": "string", "minLength": 1},
        "undo": {"type": "object"},
    },
}
_MUTATION = Draft202012Validator(MUTATION_SCHEMA)


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter: attempt n waits up to base·2ⁿ⁻¹, at most
    ``cap`` seconds; after ``max_attempts`` the step fails."""

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto


DEFAULT_RETRY = RetryPolicy()
ADOPTED_CHILD_POLL_SECONDS = 5.0

_RENEW_SQL = f"""
    UPDATE {Run._meta.db_table} SET lease_expires_at = %s
    WHERE id = %s AND fence = %s
    RETURNING cancel_requested_at, deadline_at
"""  # noqa: S608 - the table name comes from model metadata; values are bound


class Context:
    def __init__(
        self, *, run: Run, stage: str, fence: int, input: dict[str, Any], wake: Callable[..., None]
    ) -> None:
        self.run_id = run.id
        self.execution_id = run.execution_id
        self.stage = stage
        self.fence = fence
        self.input = input
        self.dry_run = bool(input.get("dry_run", False))
        self._wake = wake  # schedules a re-dispatch of this run (a Celery countdown hint)
        self._position = 0
        self._recorded = list(
            StepReceipt.objects.filter(run_id=run.id, stage=stage).order_by("sequence")
        )

    # --- the primitives -------------------------------------------------------------------

    def step(
        self,
        key: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy = DEFAULT_RETRY,
        mutation: bool | dict[str, Any] = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once per run. ``mutation``: the output must be a
        mutation receipt (``{"resource", "action", "undo"}``, plus the given schema)."""
        receipt = self._replay(key, "step")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return receipt.output
        if receipt is not None and timezone.now() < _parse(_state(receipt)["retry_at"]):
            raise Suspend(f"retrying {key}")  # woken before the backoff is over: wait on
        self._boundary()
        attempt = receipt.attempts + 1 if receipt is not None else 1
        try:
            output = fn(*args, **kwargs)
        except RetryableError as exc:
            if attempt >= retry.max_attempts:
                raise FatalError(
                    f"step {key!r} failed {attempt} times",
                    code="retries_exhausted",
                    last_error=exc.projection(),
                ) from exc
            wait = max(retry.delay(attempt), exc.retry_after or 0.0)
            due = timezone.now() + timedelta(seconds=wait)
            self._record(
                key,
                "step",
                ReceiptStatus.RETRYING,
                existing=receipt,
                attempts=attempt,
                error=exc.projection(),
                output={"retry_at": due.isoformat()},
            )
            self._timer(f"retry:{key}:{attempt}", TimerPurpose.RETRY, due)
            raise Suspend(f"retrying {key}") from exc
        _check_json(key, output)
        if mutation:
            _check_mutation(key, output, mutation if isinstance(mutation, dict) else None)
        self._record(
            key,
            "step",
            ReceiptStatus.SUCCEEDED,
            existing=receipt,
            attempts=attempt,
            output=output,
            mutation=output if mutation else None,
        )
        return output

    def now(self) -> datetime:
        """The time, recorded: a replay sees the same instant."""
        key = f"now:{self._position}"
        receipt = self._replay(key, "now")
        if receipt is not None:
            return _parse(str(receipt.output))
        self._boundary()
        value = timezone.now()
        self._record(key, "now", ReceiptStatus.SUCCEEDED, output=value.isoformat())
        return value

    def sleep(self, key: str, seconds: float) -> None:
        """Wait ``seconds`` without holding a worker."""
        receipt = self._replay(key, "sleep")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return
        if receipt is None:
            self._boundary()
            due = timezone.now() + timedelta(seconds=seconds)
            self._record(key, "sleep", ReceiptStatus.WAITING, output={"due": due.isoformat()})
            self._timer(key, TimerPurpose.SLEEP, due)
            raise Suspend(f"sleeping {key}")
        if timezone.now() < _parse(_state(receipt)["due"]):
            raise Suspend(f"sleeping {key}")
        self._resolve(receipt, receipt.output)

    def wait_until(
        self, key: str, probe: Callable[[], Any], *, every: float, timeout: float
    ) -> Any:
        """Poll ``probe`` (a read of provider state) every ``every`` seconds until it returns
        something truthy, which is recorded and returned; FatalError ``wait_timed_out`` after
        ``timeout`` seconds. Between polls no worker is held."""
        receipt = self._replay(key, "poll")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)["value"]
        if receipt is not None and timezone.now() < _parse(_state(receipt)["next_poll_at"]):
            raise Suspend(f"polling {key}")  # woken before the next poll is due: wait on
        self._boundary()
        now = timezone.now()
        since = _parse(_state(receipt)["since"]) if receipt is not None else now
        polls = (_state(receipt)["polls"] if receipt is not None else 0) + 1
        value = probe()
        if value:
            _check_json(key, value)
            state = {"since": since.isoformat(), "polls": polls, "value": value}
            if receipt is None:
                self._record(key, "poll", ReceiptStatus.SUCCEEDED, output=state)
            else:
                self._resolve(receipt, state)
            return value
        if (now - since).total_seconds() >= timeout:
            raise FatalError(f"{key!r} not met after {timeout:.0f}s", code="wait_timed_out")
        next_poll = now + timedelta(seconds=every)
        state = {"since": since.isoformat(), "polls": polls, "next_poll_at": next_poll.isoformat()}
        self._record(key, "poll", ReceiptStatus.WAITING, existing=receipt, output=state)
        self._timer(f"{key}:{polls}", TimerPurpose.POLL, next_poll)
        raise Suspend(f"polling {key}")

    def wait_for_hook(
        self,
        name: str,
        *,
        token: str,
        payload: dict[str, Any] | None = None,
        operator: bool = False,
    ) -> dict[str, Any]:
        """Wait for a signal on ``token`` (see ``engine.hooks.hook_signal``) and return its
        payload. ``operator``: the execution shows as ``paused`` for a human meanwhile."""
        key = f"hook:{name}:{token}"
        receipt = self._replay(key, "hook")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)["signal"]
        if receipt is None:
            self._boundary()
            with transaction.atomic():
                self._renew()
                # A hook of an earlier run of this execution with this token (the same plan)
                # carries over to this run: a signal it already got still counts; a pending
                # or a canceled one waits again, for this run.
                earlier = Hook.objects.filter(token=token).first()
                if earlier is not None and earlier.execution_id != self.execution_id:
                    raise FatalError(
                        f"hook token {token!r} belongs to execution {earlier.execution_id}",
                        code="hook_token_taken",
                    )
                if earlier is not None:
                    reopened = (
                        HookStatus.SIGNALLED
                        if earlier.status == HookStatus.SIGNALLED
                        else HookStatus.PENDING
                    )
                    Hook.objects.filter(pk=earlier.pk).update(
                        run_id=self.run_id, stage=self.stage, status=reopened
                    )
                else:
                    Hook.objects.create(
                        execution_id=self.execution_id,
                        run_id=self.run_id,
                        stage=self.stage,
                        name=name,
                        token=token,
                        operator=operator,
                        payload=payload or {},
                    )
                receipt = self._insert(key, "hook", ReceiptStatus.WAITING, output={"token": token})
        hook = Hook.objects.get(token=token)
        if hook.status != HookStatus.SIGNALLED:
            raise Suspend(f"awaiting {name}", operator=operator)
        signal = hook.signals.order_by("created_at", "id").values_list("payload", flat=True)[0]
        self._resolve(receipt, {"token": token, "signal": signal})
        return signal

    def child(self, key: str, workflow: str, input: dict[str, Any]) -> dict[str, Any]:
        """Start a child execution (same transaction as its receipt, no lane slot) and wait
        for its terminal state: returns ``{"id", "status", "result", "error"}``."""
        from executions.engine.children import child_create, child_state

        receipt = self._replay(key, "child")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)
        if receipt is None:
            self._boundary()
            with transaction.atomic():
                self._renew()
                child_id, adopted = child_create(self.execution_id, workflow, input)
                receipt = self._insert(
                    key, "child", ReceiptStatus.WAITING, output={"id": child_id, "adopted": adopted}
                )
        state = child_state(_state(receipt)["id"])
        if state is None:
            if _state(receipt).get("adopted"):
                # not our child: its end wakes its own parent, not us; look again later
                due = timezone.now() + timedelta(seconds=ADOPTED_CHILD_POLL_SECONDS)
                self._timer(f"{key}:adopted", TimerPurpose.POLL, due)
            raise Suspend(f"awaiting child {key}")
        self._resolve(receipt, state)
        return state

    # --- recording ------------------------------------------------------------------------

    def _replay(self, key: str, kind: str) -> StepReceipt | None:
        position = self._position
        self._position += 1
        if position >= len(self._recorded):
            return None
        receipt = self._recorded[position]
        if receipt.step_key != key or receipt.kind != kind:
            raise FatalError(
                f"stage {self.stage!r} is not deterministic: position {position} recorded "
                f"{receipt.kind} {receipt.step_key!r}, the replay reached {kind} {key!r}",
                code="nondeterministic",
            )
        return receipt

    def _boundary(self) -> None:
        """Between two primitives: renew the lease (fenced), honour a cancel request and the
        deadline."""
        cancel_requested_at, deadline_at = self._renew()
        if cancel_requested_at is not None:
            raise Canceled("canceled at a step boundary")
        if deadline_at is not None and timezone.now() > deadline_at:
            raise FatalError("the run passed its deadline", code="timed_out")

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Keep the lease for as long as the stage runs, so that no other worker takes the run
        over (and runs a step again) behind a slow provider call or slow stage code. One
        thread per stage round; it opens its own database connection only once it renews."""
        stop = threading.Event()

        def beat() -> None:
            try:
                while not stop.wait(settings.ALFRED_LEASE_SECONDS / 3):
                    self._renew()
            except LeaseLost:
                log.warning("run %s: lease lost during a step", self.run_id)
            finally:
                connections.close_all()

        thread = threading.Thread(target=beat, name=f"lease-{self.run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _renew(self) -> tuple[datetime | None, datetime | None]:
        expires = timezone.now() + timedelta(seconds=settings.ALFRED_LEASE_SECONDS)
        with connection.cursor() as cursor:
            cursor.execute(_RENEW_SQL, [expires, self.run_id, self.fence])
            row = cursor.fetchone()
        if row is None:
            raise LeaseLost(f"run {self.run_id} is no longer ours (fence {self.fence})")
        return row[0], row[1]

    def _record(
        self,
        key: str,
        kind: str,
        status: str,
        existing: StepReceipt | None = None,
        **fields: Any,
    ) -> StepReceipt:
        """Write the receipt (fenced): one transaction, the lease renewed in it."""
        with transaction.atomic():
            self._renew()
            if existing is None:
                return self._insert(key, kind, status, **fields)
            StepReceipt.objects.filter(pk=existing.pk).update(
                status=status, fence=self.fence, **fields
            )
            return existing

    def _insert(self, key: str, kind: str, status: str, **fields: Any) -> StepReceipt:
        receipt = StepReceipt.objects.create(
            run_id=self.run_id,
            stage=self.stage,
            step_key=key,
            kind=kind,
            sequence=self._position - 1,
            status=status,
            fence=self.fence,
            **fields,
        )
        self._recorded.append(receipt)
        return receipt

    def _resolve(self, receipt: StepReceipt, output: Any) -> None:
        with transaction.atomic():
            self._renew()
            StepReceipt.objects.filter(pk=receipt.pk).update(
                status=ReceiptStatus.SUCCEEDED, output=output, fence=self.fence
            )

    def _timer(self, key: str, purpose: str, due: datetime) -> None:
        with transaction.atomic():
            self._renew()
            Timer.objects.update_or_create(
                run_id=self.run_id,
                stage=self.stage,
                key=key,
                defaults={"purpose": purpose, "due_at": due, "status": TimerStatus.PENDING},
            )
        self._wake(due)


def _state(receipt: StepReceipt) -> dict[str, Any]:
    """A wait's recorded state (a JSON object by construction)."""
    output = receipt.output
    if not isinstance(output, dict):
        raise FatalError(f"receipt {receipt.step_key!r} holds no state", code="corrupt_receipt")
    return output


def _parse(value: str) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None:
        raise FatalError(f"unreadable recorded time {value!r}", code="corrupt_receipt")
    return parsed


def _check_json(key: str, value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise FatalError(
            f"step {key!r} returned a value that is not JSON", code="bad_output"
        ) from exc


def _check_mutation(key: str, output: Any, schema: dict[str, Any] | None) -> None:
    errors = list(_MUTATION.iter_errors(output))
    if schema is not None and not errors:
        errors = list(Draft202012Validator(schema).iter_errors(output))
    if errors:
        raise FatalError(
            f"step {key!r} returned an invalid mutation receipt: {errors[0].message}",
            code="bad_mutation_receipt",
        )
