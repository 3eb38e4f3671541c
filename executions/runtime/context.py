"""The stage context: every side effect and every wait of a stage goes through it.

Each primitive is recorded as a receipt at its position in the stage. A stage is replayed from
the top whenever it resumes (after a wait, a retry or a crash): a completed primitive returns
its recorded output and is never executed again in that run. A replay that reaches a different
key than recorded at that position is a FatalError: the stage's code is not deterministic.

Writes are fenced: every boundary renews the lease with a compare-and-swap on the run's fence,
so a worker whose claim was taken over stops before writing anything. A wait writes its receipt
and its Timer in one transaction: a worker killed in between leaves neither, never a receipt
that suspends on every replay with nothing to wake it. Every time is the database's (see
``executions.runtime.clock``). A write that loses its connection is retried on a fresh one for up
to half a lease: the step before it has happened, and its receipt must not be lost with the
socket.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, TypeVar

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.utils.dateparse import parse_datetime
from jsonschema import Draft202012Validator

from alfred.db import insert_part, prepared_cursor
from alfred.metrics import STEPS
from executions.models import (
    Hook,
    HookStatus,
    ReceiptStatus,
    Run,
    Stage,
    StageStatus,
    StepReceipt,
    Timer,
    TimerPurpose,
    TimerStatus,
)
from executions.runtime.children import child_create, child_state
from executions.runtime.clock import Clock
from executions.runtime.errors import (
    Canceled,
    FatalError,
    LeaseLost,
    RetryableError,
    Suspend,
)
from executions.runtime.heartbeat import HEARTBEAT
from executions.runtime.hooks import hook_answer, hook_expire, hook_expiry_cancel, hook_open
from executions.runtime.registry import mutation_hold
from executions.runtime.rollback import child_rollback_start, child_rollback_state
from executions.runtime.stage import DEFAULT_RETRY, RetryPolicy
from executions.runtime.tracing import step_span, wait_span

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


ADOPTED_CHILD_POLL_SECONDS = 5.0


def _scaled(every: float) -> float:
    """A poll's interval as this installation spaces its polls (``ALFRED_POLL_SCALE``). A
    provider's own ``retry_after`` is never scaled: it is the provider's word."""
    return every * float(settings.ALFRED_POLL_SCALE)


# The lease runs on the database's clock, like every comparison made with it.
_RENEW_SQL = f"""
    UPDATE {Run._meta.db_table}
    SET lease_expires_at = clock_timestamp() + make_interval(secs => %s)
    WHERE id = %s AND fence = %s
    RETURNING cancel_requested_at, deadline_at, clock_timestamp()
"""  # noqa: S608 - the table name comes from model metadata; values are bound


@cache
def _record_sql(insert: str) -> str:
    """A new receipt (``insert``, a part made only when ``renewed`` has a row) written with
    the lease's fenced renewal in one statement: its answer is the database's time and the
    receipt's key, or no row when the fence moved (nothing written)."""
    return (
        f"WITH renewed AS ({_RENEW_SQL}), inserted AS ({insert}) "  # noqa: S608
        "SELECT renewed.clock_timestamp, (SELECT id FROM inserted) FROM renewed"
    )


# Errors of the connection rather than of the statement: the same write on a fresh connection
# may well succeed (a terminated backend, a failover, a pool limit).
_CONNECTION_ERRORS = (OperationalError, InterfaceError)
T = TypeVar("T")


class Context:
    def __init__(
        self,
        *,
        run: Run,
        stage: str,
        fence: int,
        input: Any,
        dry_run: bool,
        wake: Callable[..., None],
        clock: Clock,
        workflow: str = "",
    ) -> None:
        self.run_id = run.id
        self.execution_id = run.execution_id
        self.workflow = workflow
        self.stage = stage
        self.fence = fence
        self.input = input  # the workflow's typed input (Definition.load_input)
        self.dry_run = dry_run
        self._wake = wake  # schedules a re-dispatch of this run (a Celery countdown hint)
        self._clock = clock
        # Set by the heartbeat when renewals have failed for half a lease: the lease may lapse
        # and another worker take the run over, so the stage stops at its next boundary.
        self._renewals_failing = threading.Event()
        self._position = 0
        self._receipts: list[StepReceipt] | None = None  # read at the first primitive

    @property
    def _recorded(self) -> list[StepReceipt]:
        """The stage's receipts in this run, in order: read once, when the first primitive
        replays (a stage that calls none, or is claimed for the first time and calls one,
        reads nothing it does not need); appended to as the stage records more."""
        if self._receipts is None:
            self._receipts = list(
                StepReceipt.objects.filter(run_id=self.run_id, stage=self.stage).order_by(
                    "sequence"
                )
            )
        return self._receipts

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
        if receipt is not None:
            retry_at = _parse(_state(receipt)["retry_at"])
            if self._clock.now() < retry_at:
                # woken before the backoff is over: wait on, with the timer armed again
                self._timer(f"retry:{key}:{receipt.attempts}", TimerPurpose.RETRY, retry_at)
                raise Suspend(f"retrying {key}")
        if mutation and receipt is None and not self.dry_run:
            # a first attempt only: a retried one may have reached the provider already
            self._held(key)
        self._boundary()
        attempt = receipt.attempts + 1 if receipt is not None else 1
        timed = _StepTimer(self.workflow, self.stage, fn)
        try:
            with step_span(key, attempt):
                output = fn(*args, **kwargs)
        except RetryableError as exc:
            timed.observe("retrying" if attempt < retry.max_attempts else "failed")
            if attempt >= retry.max_attempts:
                raise FatalError(
                    f"step {key!r} failed {attempt} times",
                    code="retries_exhausted",
                    last_error=exc.projection(),
                ) from exc
            wait = max(retry.delay(attempt), exc.retry_after or 0.0)
            due = self._clock.now() + timedelta(seconds=wait)
            self._record(
                key,
                "step",
                ReceiptStatus.RETRYING,
                existing=receipt,
                timer=(f"retry:{key}:{attempt}", TimerPurpose.RETRY, due),
                attempts=attempt,
                error=exc.projection(),
                output={"retry_at": due.isoformat()},
            )
            raise Suspend(f"retrying {key}") from exc
        except BaseException:
            timed.observe("failed")
            raise
        timed.observe("succeeded")
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

    def _held(self, key: str) -> None:
        """Wait, without holding a worker, while a gate holds this mutation (a change freeze):
        a timer for when the hold ends, woken early by its topic when it is lifted; nothing
        is recorded, so the step asks again when the stage replays."""
        hold = mutation_hold(self.execution_id, self.workflow, self.run_id)
        if hold is None:
            return
        self._timer(f"hold:{key}", TimerPurpose.HOLD, hold.until, (hold.topic,))
        raise Suspend(hold.reason, hold=True)

    def output_of(self, stage: str | Callable[..., Any]) -> Any:
        """The output of an earlier stage of this run (a continuation's run carries the
        outputs of the stages it skips), named or given as its function. Fixed once that
        stage succeeded: a replay reads the same value."""
        if not isinstance(stage, str):
            stage = stage.__name__
        output = (
            Stage.objects.filter(run_id=self.run_id, name=stage, status=StageStatus.SUCCEEDED)
            .values_list("output", flat=True)
            .first()
        )
        if output is None:
            raise FatalError(
                f"stage {stage!r} has no output in this run", code="stage_output_missing"
            )
        return output

    def now(self) -> datetime:
        """The time, recorded: a replay sees the same instant."""
        key = f"now:{self._position}"
        receipt = self._replay(key, "now")
        if receipt is not None:
            return _parse(str(receipt.output))
        self._boundary()
        value = self._clock.now()
        self._record(key, "now", ReceiptStatus.SUCCEEDED, output=value.isoformat())
        return value

    def sleep(self, key: str, seconds: float) -> None:
        """Wait ``seconds`` without holding a worker."""
        receipt = self._replay(key, "sleep")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return
        if receipt is None:
            self._boundary()
            due = self._clock.now() + timedelta(seconds=seconds)
            self._record(
                key,
                "sleep",
                ReceiptStatus.WAITING,
                timer=(key, TimerPurpose.SLEEP, due),
                output={"due": due.isoformat()},
            )
            raise Suspend(f"sleeping {key}")
        due = _parse(_state(receipt)["due"])
        if self._clock.now() < due:
            self._timer(key, TimerPurpose.SLEEP, due)  # woken early: the timer armed again
            raise Suspend(f"sleeping {key}")
        self._resolve(receipt, receipt.output)

    def wait_until(
        self,
        key: str,
        probe: Callable[[], Any],
        *,
        every: float,
        timeout: float,
        wake_on: Sequence[str] = (),
    ) -> Any:
        """Poll ``probe`` (a read of provider state) every ``every`` seconds until it returns
        something truthy, which is recorded and returned; FatalError ``wait_timed_out`` after
        ``timeout`` seconds. Between polls no worker is held.

        A poll that raises :class:`RetryableError` (a provider's transient failure or its
        throttling) is a poll that saw nothing: the next one comes after ``every`` seconds, or
        after the error's ``retry_after`` if that is longer, and the wait's timeout runs on.
        The last such error is kept in the wait's receipt, and given as ``last_error`` if the
        wait times out. Any other exception fails the stage as it would anywhere.

        ``wake_on``: names (opaque to the engine) of what the probe reads; news of one
        (``executions.runtime.scans.polls_hasten``) brings the next poll forward to now. The
        poll timer stays the guarantee: news lost or never sent changes only when the poll
        happens."""
        receipt = self._replay(key, "poll")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)["value"]
        topics = sorted(set(wake_on))
        if receipt is not None:
            timer_key = f"{key}:{_state(receipt)['polls']}"
            next_poll = min(_parse(_state(receipt)["next_poll_at"]), self._due_of(timer_key))
            if self._clock.now() < next_poll:
                # woken before the next poll is due: wait on, with the timer armed again
                self._timer(timer_key, TimerPurpose.POLL, next_poll, topics)
                raise Suspend(f"polling {key}")
        self._boundary()
        now = self._clock.now()
        since = _parse(_state(receipt)["since"]) if receipt is not None else now
        polls = (_state(receipt)["polls"] if receipt is not None else 0) + 1
        failed: RetryableError | None = None
        with wait_span(key):
            try:
                value = probe()
            except RetryableError as exc:
                value, failed = None, exc
        if value:
            _check_json(key, value)
            state = {"since": since.isoformat(), "polls": polls, "value": value}
            if receipt is None:
                self._record(key, "poll", ReceiptStatus.SUCCEEDED, output=state)
            else:
                self._resolve(receipt, state)
            return value
        last_error = failed.projection() if failed is not None else None
        if (now - since).total_seconds() >= timeout:
            raise FatalError(
                f"{key!r} not met after {timeout:.0f}s",
                code="wait_timed_out",
                **({"last_error": last_error} if last_error else {}),
            )
        wait = max(_scaled(every), (failed.retry_after or 0.0) if failed is not None else 0.0)
        next_poll = now + timedelta(seconds=wait)
        state = {"since": since.isoformat(), "polls": polls, "next_poll_at": next_poll.isoformat()}
        if last_error:
            state["last_error"] = last_error
        self._record(
            key,
            "poll",
            ReceiptStatus.WAITING,
            existing=receipt,
            timer=(f"{key}:{polls}", TimerPurpose.POLL, next_poll, topics),
            output=state,
        )
        raise Suspend(f"polling {key}")

    def wait_for_hook(
        self,
        name: str,
        *,
        token: str,
        payload: dict[str, Any] | None = None,
        operator: bool = False,
        expires_in: float | None = None,
        expired_code: str = "hook_expired",
    ) -> dict[str, Any]:
        """Wait for a signal on ``token`` (see ``executions.runtime.hooks.hook_signal``) and
        return its payload. ``operator``: the execution shows as ``paused`` for a human meanwhile.

        Opening a hook supersedes the execution's other open hooks of that ``name`` (a new
        checkpoint replaces the one before it). ``expires_in`` seconds after it opened, an
        unanswered hook expires: a timer wakes the run, the hook becomes ``expired`` and the
        wait fails with ``FatalError(expired_code)``; a signal after that is refused."""
        key = f"hook:{name}:{token}"
        receipt = self._replay(key, "hook")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)["signal"]
        if receipt is None:
            self._boundary()
            now = self._clock.now()
            expires_at = now + timedelta(seconds=expires_in) if expires_in is not None else None

            def open_hook() -> None:
                hook_open(
                    execution_id=self.execution_id,
                    run_id=self.run_id,
                    stage=self.stage,
                    name=name,
                    token=token,
                    operator=operator,
                    payload=payload or {},
                    expires_at=expires_at,
                    now=now,
                )

            expiry = (f"{key}:expiry", TimerPurpose.EXPIRY, expires_at) if expires_at else None
            receipt = self._record(
                key,
                "hook",
                ReceiptStatus.WAITING,
                also=open_hook,
                timer=expiry,
                output={"token": token},
            )
        hook = Hook.objects.get(token=token)
        if hook.status != HookStatus.SIGNALLED:
            expired = hook.status == HookStatus.EXPIRED or (
                hook.status == HookStatus.PENDING
                and hook.expires_at is not None
                and self._clock.now() >= hook.expires_at
            )
            if expired:
                self._expire(hook)
                raise FatalError(
                    f"{name} was not answered by {hook.expires_at:%Y-%m-%d %H:%M:%S} UTC",
                    code=expired_code,
                    hook=hook.id,
                    expired_at=hook.expires_at.isoformat() if hook.expires_at else None,
                )
            raise Suspend(f"awaiting {name}", operator=operator)
        signal = hook_answer(hook)
        self._resolve(receipt, {"token": token, "signal": signal})
        self._durably(lambda: hook_expiry_cancel(self.run_id, self.stage, f"{key}:expiry"))
        return signal

    def _expire(self, hook: Hook) -> None:
        """Mark ``hook`` expired unless a signal got there first (the approve service refuses
        from ``expires_at`` on, by the same clock, so none can)."""
        self._durably(lambda: hook_expire(hook, self._clock.now()))

    def child(self, key: str, workflow: str, input: dict[str, Any]) -> dict[str, Any]:
        """Start a child execution (same transaction as its receipt, no lane slot) and wait
        for its terminal state: returns ``{"id", "status", "result", "error"}``."""
        receipt = self._replay(key, "child")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)
        if receipt is None:
            self._boundary()
            started: dict[str, Any] = {}

            def start_child() -> None:
                started["id"], started["adopted"] = child_create(self.execution_id, workflow, input)

            receipt = self._record(
                key, "child", ReceiptStatus.WAITING, also=start_child, output=started
            )
        state = child_state(_state(receipt)["id"])
        if state is None:
            if _state(receipt).get("adopted"):
                # not our child: its end wakes its own parent, not us; look again later
                due = self._clock.now() + timedelta(seconds=_scaled(ADOPTED_CHILD_POLL_SECONDS))
                self._timer(f"{key}:adopted", TimerPurpose.POLL, due)
            raise Suspend(f"awaiting child {key}")
        self._resolve(receipt, state)
        return state

    def rollback_child(self, key: str, child_id: str) -> dict[str, Any]:
        """Roll the child ``child_id`` back through its own rollback run (asked for in the
        transaction of this receipt, dispatched after commit; it runs under its root's
        lane) and wait for it: returns ``{"id", "status", "error"}``, ``status`` being
        ``rolled_back`` when it undid everything."""
        receipt = self._replay(key, "child_rollback")
        if receipt is not None and receipt.status == ReceiptStatus.SUCCEEDED:
            return _state(receipt)
        if receipt is None:
            self._boundary()
            started: dict[str, Any] = {}

            def start_rollback() -> None:
                started.update(child_rollback_start(self.execution_id, child_id))

            receipt = self._record(
                key, "child_rollback", ReceiptStatus.WAITING, also=start_rollback, output=started
            )
        recorded = _state(receipt)
        state = child_rollback_state(recorded["id"], recorded["run"])
        if state is None:
            raise Suspend(f"awaiting the rollback of child {child_id}")
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
        deadline. A heartbeat that could not renew for half a lease stops the stage here: the
        lease may have lapsed, and the run may be another worker's by now."""
        if self._renewals_failing.is_set():
            raise LeaseLost(f"run {self.run_id}: lease renewals failed for half a lease")
        cancel_requested_at, deadline_at = self._durably(self._renew, atomic=False)
        if cancel_requested_at is not None:
            raise Canceled("canceled at a step boundary")
        if deadline_at is not None and self._clock.now() > deadline_at:
            raise FatalError("the run passed its deadline", code="timed_out")

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Keep the lease for as long as the stage runs, so that no other worker takes the run
        over (and runs a step again) behind a slow provider call or slow stage code: the
        process's heartbeat thread (``executions.runtime.heartbeat``) renews it while the
        block runs, and renews it no more once the block is left."""
        with HEARTBEAT.holding(self):
            yield

    def _renew(self) -> tuple[datetime | None, datetime | None]:
        with prepared_cursor() as cursor:
            cursor.execute(_RENEW_SQL, [settings.ALFRED_LEASE_SECONDS, self.run_id, self.fence])
            row = cursor.fetchone()
        if row is None:
            raise LeaseLost(f"run {self.run_id} is no longer ours (fence {self.fence})")
        self._clock.reset(row[2])
        return row[0], row[1]

    def _durably(
        self,
        write: Callable[[], T],
        *,
        landed: Callable[[], bool] | None = None,
        atomic: bool = True,
    ) -> T:
        """``write()`` in a transaction with the lease renewed in it (fenced) — or, not
        ``atomic``, ``write`` alone (the renewal itself: one statement). A connection error
        is retried on a fresh connection for up to half a lease: what the stage did before
        it has happened, and its record must not be lost with a socket. ``landed`` tells
        whether an attempt whose commit's answer was lost did commit after all."""
        give_up = time.monotonic() + settings.ALFRED_LEASE_SECONDS / 2
        attempt = 0
        while True:
            attempt += 1
            try:
                if attempt > 1 and landed is not None and landed():
                    return None  # type: ignore[return-value]
                if not atomic:
                    return write()
                with transaction.atomic():
                    self._renew()
                    return write()
            except _CONNECTION_ERRORS as exc:
                if connection.in_atomic_block or time.monotonic() > give_up:
                    raise
                log.warning("run %s: write failed (%s); again, reconnected", self.run_id, exc)
                connection.close()
                time.sleep(min(0.1 * attempt, 1.0))

    def _record(
        self,
        key: str,
        kind: str,
        status: str,
        existing: StepReceipt | None = None,
        *,
        timer: tuple[str, str, datetime] | tuple[str, str, datetime, list[str]] | None = None,
        also: Callable[[], None] | None = None,
        **fields: Any,
    ) -> StepReceipt:
        """Write the receipt (fenced), and in the same transaction what must travel with it:
        the wait's ``timer`` (key, purpose, due) and the writes of ``also`` (run first, so a
        value it computes can land in ``fields``)."""
        position = self._position - 1
        if existing is None and timer is None and also is None:
            return self._record_new(key, kind, status, position, fields)

        def write() -> StepReceipt:
            if also is not None:
                also()
            if existing is None:
                receipt = self._receipt(key, kind, status, position, fields)
                receipt.save(force_insert=True)
            else:
                StepReceipt.objects.filter(pk=existing.pk).update(
                    status=status, fence=self.fence, **fields
                )
                receipt = existing
            if timer is not None:
                self._arm(*timer)
            return receipt

        def landed() -> bool:
            return existing is None and self._stored(position, key) is not None

        receipt = self._durably(write, landed=landed) or self._stored(position, key)
        if timer is not None:
            self._wake(timer[2], self._clock.now())
        if existing is None:
            assert receipt is not None  # noqa: S101 - written, or found written
            self._recorded.append(receipt)
        return receipt  # type: ignore[return-value]

    def _receipt(
        self, key: str, kind: str, status: str, position: int, fields: dict[str, Any]
    ) -> StepReceipt:
        """A new receipt of this stage under this fence, not saved yet."""
        return StepReceipt(
            run_id=self.run_id,
            stage=self.stage,
            step_key=key,
            kind=kind,
            sequence=position,
            status=status,
            fence=self.fence,
            **fields,
        )

    def _record_new(
        self, key: str, kind: str, status: str, position: int, fields: dict[str, Any]
    ) -> StepReceipt:
        """``_record``'s common case, a new receipt with nothing beside it: written with the
        lease's renewal in one statement, its own transaction (one round trip, where a
        transaction of the two would take four)."""
        receipt = self._receipt(key, kind, status, position, fields)
        insert, row = insert_part(receipt, when="renewed")
        sql = _record_sql(insert)

        def write() -> StepReceipt:
            with prepared_cursor() as cursor:
                cursor.execute(sql, [settings.ALFRED_LEASE_SECONDS, self.run_id, self.fence, row])
                found = cursor.fetchone()
            if found is None:
                raise LeaseLost(f"run {self.run_id} is no longer ours (fence {self.fence})")
            self._clock.reset(found[0])
            receipt.pk, receipt._state.adding = found[1], False
            return receipt

        written = self._durably(
            write, landed=lambda: self._stored(position, key) is not None, atomic=False
        ) or self._stored(position, key)
        assert written is not None  # noqa: S101 - written, or found written
        self._recorded.append(written)
        return written

    def _stored(self, position: int, key: str) -> StepReceipt | None:
        return StepReceipt.objects.filter(
            run_id=self.run_id, stage=self.stage, sequence=position, step_key=key, fence=self.fence
        ).first()

    def _resolve(self, receipt: StepReceipt, output: Any) -> None:
        self._durably(
            lambda: StepReceipt.objects.filter(pk=receipt.pk).update(
                status=ReceiptStatus.SUCCEEDED, output=output, fence=self.fence
            )
        )

    def _arm(self, key: str, purpose: str, due: datetime, topics: Sequence[str] = ()) -> None:
        Timer.objects.update_or_create(
            run_id=self.run_id,
            stage=self.stage,
            key=key,
            defaults={
                "purpose": purpose,
                "due_at": due,
                "status": TimerStatus.PENDING,
                "topics": list(topics),
            },
        )

    def _timer(self, key: str, purpose: str, due: datetime, topics: Sequence[str] = ()) -> None:
        """Arm a timer (again), idempotently: a replay woken before its due time arms it once
        more, so that a timer fired early never strands the run."""
        self._durably(lambda: self._arm(key, purpose, due, topics))
        self._wake(due, self._clock.now())

    def _due_of(self, key: str) -> datetime:
        """When the timer ``key`` of this stage is due now: news may have brought it forward
        (``scans.polls_hasten``) before the time the receipt planned."""
        due = (
            Timer.objects.filter(run_id=self.run_id, stage=self.stage, key=key)
            .values_list("due_at", flat=True)
            .first()
        )
        return due if due is not None else datetime.max.replace(tzinfo=UTC)


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


class _StepTimer:
    """A step function's duration, into ``alfred_step_duration_seconds`` once it ends."""

    def __init__(self, workflow: str, stage: str, fn: Callable[..., Any]) -> None:
        name = getattr(fn, "__name__", type(fn).__name__)
        self.labels = (workflow, stage, f"{fn.__module__.rsplit('.', 1)[-1]}.{name}")
        self.started = time.monotonic()

    def observe(self, outcome: str) -> None:
        STEPS.labels(*self.labels, outcome).observe(time.monotonic() - self.started)
