"""Lane services. Every lane write is a compare-and-swap on (key, owner, state, version):
a writer that read a stale lane changes nothing and learns so from the row count.

Callers run inside their own transaction (acceptance is the outermost service); nothing here
opens a durable transaction but ``lane_recover``.

These services write lanes only, and return what changed (``lanes.effects``). What the
change means for the executions a lane names — events, the new owner's run, the audit entry
— is the executions side's: the outermost service hands the change to
``lane_effects().lane_changed`` before its transaction commits (the reconciler, and
``lane_recover`` itself). Nothing here imports executions.

Lock order (docs/architecture.md, "Invariants"): execution rows before the lane row. A
claim (acceptance, retry, continuation) holds its execution and then takes the lane; whoever writes
a lane and the executions it names (the reconciler, recovery) locks those executions first, through
``lane_lock`` (which locks them through the port), never the other way round: the two would
otherwise deadlock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models.functions import Now

from alfred.readonly import writes_allowed
from lanes.effects import LaneBlocked, LaneHandedOver, LaneRecovered, lane_effects
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.selectors import lane_position


class LaneRole:
    OWNER = "owner"
    QUEUED = "queued"


class LaneConflict(Exception):
    """A claim whose token differs from what the lane holds or queues (fail closed)."""

    def __init__(self, key: str, execution_id: str, token: str | None) -> None:
        super().__init__(f"lane {key} is committed to {token!r} by {execution_id}")
        self.key = key
        self.execution_id = execution_id
        self.token = token


class LaneRaceLost(Exception):
    """A compare-and-swap matched no row: another writer changed the lane first."""


@dataclass(frozen=True)
class LaneClaimResult:
    role: str
    key: str
    position: int | None = None  # 1-based place in the queue when queued
    state: str = LaneState.HELD

    @property
    def may_start(self) -> bool:
        """The claimant owns a lane that is not blocked for an operator."""
        return self.role == LaneRole.OWNER and self.state == LaneState.HELD


_LOCK_LANE_SQL = f"""
    INSERT INTO {Lane._meta.db_table} (key, state, version, reason, created_at, updated_at)
    VALUES (%s, %s, 0, '', now(), now())
    ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
    RETURNING state, owner_id, owner_token, version
"""  # noqa: S608 - the table name comes from model metadata; values are bound


def _lock_lane(key: str) -> tuple[str, str | None, str | None, int]:
    """Create the lane if it is new and take its row lock, in one statement (ON CONFLICT DO
    UPDATE locks the existing row). Claims on one lane serialize here, so the FIFO order is
    the commit order of the acceptances."""
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_LANE_SQL, [key, LaneState.FREE])
        state, owner_id, owner_token, version = cursor.fetchone()
    return state, owner_id, owner_token, version


def lane_claim(
    *, key: str, execution_id: str, token: str | None = None, urgent: bool = False
) -> LaneClaimResult:
    """Take the lane for ``execution_id`` if it is free with nobody queued, else queue.

    ``token`` set: fail closed (``LaneConflict``) when the owner or any queued claim holds a
    different token. ``urgent``: queue ahead of ordinary work (rollback, continuation or
    finalization of an execution that already mutated infrastructure).
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lane_claim must run inside the caller's transaction")
    state, owner_id, owner_token, version = _lock_lane(key)

    if owner_id == execution_id:
        # The owner asked for again (a continuation) keeps its lane. A lane that needs
        # recovery stays blocked: the request is recorded but starts only once an operator
        # has recovered the lane.
        return LaneClaimResult(LaneRole.OWNER, key, state=state)

    if token is not None:
        if state != LaneState.FREE and owner_token != token and owner_id is not None:
            raise LaneConflict(key, owner_id, owner_token)
        other = (
            LaneWaiter.objects.filter(lane_id=key)
            .exclude(token=token)
            .exclude(execution_id=execution_id)
            .order_by("priority", "id")
            .values_list("execution_id", "token")
            .first()
        )
        if other is not None:
            raise LaneConflict(key, other[0], other[1])

    if state == LaneState.FREE and not LaneWaiter.objects.filter(lane_id=key).exists():
        _swap(
            key,
            (None, LaneState.FREE, version),
            state=LaneState.HELD,
            owner_id=execution_id,
            owner_token=token,
        )
        return LaneClaimResult(LaneRole.OWNER, key)

    priority = LaneWaiter.PRIORITY_URGENT if urgent else LaneWaiter.PRIORITY_NORMAL
    # An execution already waiting (asked for again before its turn) keeps its place.
    LaneWaiter.objects.bulk_create(
        [LaneWaiter(lane_id=key, execution_id=execution_id, token=token, priority=priority)],
        ignore_conflicts=True,
    )
    return LaneClaimResult(LaneRole.QUEUED, key, position=lane_position(execution_id), state=state)


def _swap(key: str, expected: tuple[str | None, str, int], **changes: object) -> None:
    """Write ``changes`` iff the lane is still (owner, state, version) = ``expected``."""
    owner_id, state, version = expected
    # ``auto_now`` does not apply to a queryset update: the time is set here, on every write.
    changed = Lane.objects.filter(key=key, owner_id=owner_id, state=state, version=version).update(
        version=version + 1, updated_at=Now(), **changes
    )
    if changed != 1:
        raise LaneRaceLost(f"lane {key} changed under us (expected version {version})")


class LaneOwnerMismatch(Exception):
    """An operator named an owner the lane no longer has (someone acted first)."""

    def __init__(
        self, key: str, expected: str | None, actual: str | None, message: str = ""
    ) -> None:
        def owner(execution: str | None) -> str:
            return "no owner" if execution is None else f"owner {execution}"

        super().__init__(
            message or f"lane {key} has {owner(actual)} now; you named {owner(expected)}"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class LaneOwnerActive(LaneOwnerMismatch):
    """The lane cannot go to another execution: its owner has started and may be changing
    infrastructure right now. Cancel it first."""

    def __init__(self, key: str, owner: str, status: str) -> None:
        super().__init__(
            key, owner, owner, f"lane {key} is owned by {owner}, which is {status}: cancel it first"
        )


class LaneNotQueued(LaneOwnerMismatch):
    """``to`` names no execution queued on the lane."""

    def __init__(self, key: str, owner: str | None, to: str) -> None:
        super().__init__(key, owner, owner, f"{to} is not queued on lane {key}")


def _head(key: str, active_statuses: frozenset[str]) -> str | None:
    """The queued execution next in line (an ended one is not eligible)."""
    return (
        LaneWaiter.objects.filter(lane_id=key, execution__status__in=sorted(active_statuses))
        .order_by("priority", "id")
        .values_list("execution_id", flat=True)
        .first()
    )


def lane_lock(key: str, *, wait: bool = True, also: Iterable[str] = ()) -> Lane | None:
    """Lock the executions ``key`` names — its owner, the next in line, and ``also`` — then
    the lane (the lock order), in the caller's transaction. The lane is read without a lock
    first to learn whom to lock; should it name others once locked (a handover or a claim
    in between), the locks are taken again. None: no such lane, or (``wait=False``) one of
    the rows is held by another writer right now."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lane_lock must run inside the caller's transaction")
    effects = lane_effects()
    active = effects.active_statuses
    locked: set[str] = set()
    for _ in range(10):
        seen = list(Lane.objects.filter(key=key).values_list("owner_id", flat=True))
        if not seen:
            return None
        wanted = {i for i in (seen[0], _head(key, active), *also) if i is not None} - locked
        if wanted:
            rows = effects.executions_lock(wanted, skip_locked=not wait)
            if not wait and len(rows) < len(wanted):
                return None
            locked |= set(rows) | wanted  # ids of executions that do not exist lock nothing
        lane = Lane.objects.select_for_update(skip_locked=not wait).filter(key=key).first()
        if lane is None:
            return None
        if {lane.owner_id, _head(key, active)} - {None} <= locked:
            return lane
    raise LaneRaceLost(f"lane {key} kept changing hands while it was being locked")


def lane_leave(*, execution_id: str) -> bool:
    """Take ``execution_id`` out of its lane's queue (a canceled waiter). Its row is locked
    by the caller; the queue row goes, the lane row is not touched. Returns whether it was
    queued."""
    deleted, _ = LaneWaiter.objects.filter(execution_id=execution_id).delete()
    return bool(deleted)


def lane_hand_over(
    lane: Lane, *, reason: str, to: str | None = None, changed_nothing: bool = False
) -> LaneHandedOver:
    """Release ``lane`` (locked by the caller through ``lane_lock``, with ``to``) and give it
    to the next in line — or to the queued execution ``to``. Returns the hand-over (its
    ``owner`` None when nobody waits: the lane is free), which the caller passes to
    ``lane_effects().lane_changed`` in this transaction. ``changed_nothing``: the leaving
    owner's tenure proved it changed nothing (a readiness failure); any other leaving owner
    marks the lane ``held_past_readiness``."""
    waiters = LaneWaiter.objects.filter(lane_id=lane.key)
    # Only an execution still waiting is eligible: one canceled while queued leaves the queue.
    waiters.exclude(execution__status__in=sorted(lane_effects().active_statuses)).delete()
    waiter = (waiters.filter(execution_id=to) if to else waiters.order_by("priority", "id")).first()
    if to and waiter is None:
        raise LaneNotQueued(lane.key, lane.owner_id, to)
    expected = (lane.owner_id, lane.state, lane.version)
    held: dict[str, bool] = (
        {"held_past_readiness": True} if lane.owner_id is not None and not changed_nothing else {}
    )
    if waiter is None:
        _swap(
            lane.key,
            expected,
            state=LaneState.FREE,
            owner_id=None,
            owner_token=None,
            reason=reason,
            **held,
        )
    else:
        _swap(
            lane.key,
            expected,
            state=LaneState.HELD,
            owner_id=waiter.execution_id,
            owner_token=waiter.token,
            reason="",
            **held,
        )
        waiter.delete()
    return LaneHandedOver(
        key=lane.key,
        version=lane.version + 1,
        reason=reason,
        previous=lane.owner_id,
        owner=waiter.execution_id if waiter is not None else None,
    )


def try_lane_remove(change: LaneHandedOver) -> bool:
    """Delete the lane ``change`` freed, if it never guarded anything: still as the hand-over
    left it (no owner, free, its version: the compare-and-swap), nobody waiting on it, and
    never held past a readiness failure (see ``lanes.models``). The caller holds the lane's
    row lock (``lane_lock``) and has established that the leaving owner changed nothing.
    A claim waiting on the row lock (``_lock_lane``'s upsert) inserts the lane anew once
    this commits; a stale writer's compare-and-swap matches no row. Returns whether it went."""
    if change.owner is not None or LaneWaiter.objects.filter(lane_id=change.key).exists():
        return False
    removed, _ = Lane.objects.filter(
        key=change.key,
        owner_id=None,
        state=LaneState.FREE,
        version=change.version,
        held_past_readiness=False,
    ).delete()
    return bool(removed)


def lane_mark_recovery_required(lane: Lane, *, reason: str) -> LaneBlocked:
    """Block ``lane`` (locked by the caller through ``lane_lock``) for an operator. Returns
    the change, which the caller passes to ``lane_effects().lane_changed`` in this
    transaction."""
    _swap(
        lane.key,
        (lane.owner_id, lane.state, lane.version),
        state=LaneState.RECOVERY_REQUIRED,
        reason=reason,
    )
    return LaneBlocked(key=lane.key, version=lane.version + 1, reason=reason, owner=lane.owner_id)


def lane_recover(
    *, key: str, expected_owner: str | None, actor: str, reason: str, to: str | None = None
) -> LaneRecovered:
    """An operator recovers a lane. Names the owner they saw: a lane that changed hands
    meanwhile is refused. An owner that is active again (retried or continued while the lane
    was blocked) gets its lane back and starts — or, with ``to``, goes back to the head of
    the queue while ``to`` takes the lane; an owner that has started already is never
    displaced (``LaneOwnerActive``). Otherwise the lane goes to the next in line, or to
    ``to``. Audited: the executions side records the recovery with its events and starts the
    run, in this transaction (``lane_effects().lane_changed``)."""
    writes_allowed()
    effects = lane_effects()
    with transaction.atomic(durable=True):
        lane = lane_lock(key, also=[to] if to else [])
        if lane is None:
            raise Lane.DoesNotExist(f"no lane {key}")
        if lane.owner_id != expected_owner:
            raise LaneOwnerMismatch(key, expected_owner, lane.owner_id)
        owner = effects.execution_standing(lane.owner_id) if lane.owner_id else None
        resumed, handed_over = None, None
        if owner is not None and owner.active and to is None:
            _swap(
                key,
                (lane.owner_id, lane.state, lane.version),
                state=LaneState.HELD,
                reason="",
                held_past_readiness=True,  # an operator recovered it: it stays listed
            )
            resumed = owner.id
        else:
            if owner is not None and owner.active:
                if owner.started:
                    raise LaneOwnerActive(key, owner.id, owner.status)
                # Not started: it keeps its request, at the head of the queue.
                LaneWaiter.objects.create(
                    lane_id=key,
                    execution_id=owner.id,
                    token=lane.owner_token,
                    priority=LaneWaiter.PRIORITY_URGENT,
                )
            handed_over = lane_hand_over(lane, reason=f"recovered by {actor}: {reason}", to=to)
        recovered = LaneRecovered(
            key=key,
            actor=actor,
            reason=reason,
            expected_owner=expected_owner,
            resumed=resumed,
            handed_over=handed_over,
        )
        effects.lane_changed(recovered)
        return recovered
