"""Change freezes (docs/contract.md, "Change freezes"): windows in which executions of the
workflows and subjects a freeze covers wait before their first mutation.

An operator declares a freeze (a reason, a window — from ``starts_at``, now by default, until
``ends_at``, or until ended — and the workflows and subjects it covers, as globs like the
approval policy's), through the API, the admin or ``manage.py alfred_freezes``. While it is in
force, a stage about to make its execution's first mutation asks :func:`freeze_hold` (the
runtime's mutation gate, registered in ``ExecutionsConfig.ready``) and waits, without holding a
worker or its lane's place to anyone else, until the freeze ends: its status ``waiting``, its
``waiting_for`` naming the freeze, an ``execution.held`` event. Ending a freeze early wakes
what it holds at once; an operator may let one execution through with a reason
(:func:`freeze_exempt`, audited, an ``execution.let_through`` event).

What is never held: a dry run (it reaches no mutation), reads and plans (only a mutating step
asks), a mutating step's retry (its first attempt may have reached the provider), a rollback (an
operator's repair), and an execution whose family (it, those above it, those under them) has
mutated already (a change half made is finished rather than frozen half-way). A hold does not
count against the run's deadline (``Run.paused_at``, as an operator's pause).

The gate reads the freezes in force on every first mutation: a freeze declared while an
execution is queued or planning holds it; one declared while it is mid-change does not. Ending
a freeze or letting an execution through wakes the runs that may be deciding to hold right
now, so no wake is lost between the gate's read and the hold's timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from fnmatch import fnmatchcase

from django.db import connection, transaction
from django.db.models import Q

from alfred.principals import Caller
from alfred.readonly import writes_allowed
from executions.audit import audit_record
from executions.catalog import execution_subject, workflows_all
from executions.events import EventType
from executions.models import (
    AuditEntry,
    Execution,
    Freeze,
    FreezeExemption,
    Run,
    RunKind,
    RunStatus,
    StepReceipt,
    Timer,
    TimerPurpose,
    TimerStatus,
)
from executions.outbox import event_emit, event_key
from executions.runtime.clock import db_now
from executions.runtime.dispatch import run_wake
from executions.runtime.registry import Hold
from executions.runtime.scans import waits_hasten

# An open-ended freeze is looked at again this often: a safety net, since ending it wakes
# what it holds at once (each look claims the run and writes its status twice).
RECHECK = timedelta(hours=6)


class FreezeRefused(Exception):
    """A freeze that cannot be declared or passed as asked (the message says why)."""


class FreezeEnded(Exception):
    """The freeze has ended already."""

    def __init__(self, freeze: Freeze) -> None:
        super().__init__(f"the freeze {freeze.id} has ended already")
        self.freeze_id = freeze.id


class FreezeNotHolding(Exception):
    """An exemption asked for an execution the freeze does not hold (``why``)."""

    def __init__(self, freeze: Freeze, execution: Execution, why: str) -> None:
        super().__init__(f"the freeze {freeze.id} holds nothing of {execution.id}: {why}")
        self.freeze_id = freeze.id
        self.execution_id = execution.id


class FreezeNotPermitted(Exception):
    def __init__(self, action: str) -> None:
        super().__init__(f"only an operator may {action} a freeze")


def in_force(now: datetime) -> Q:
    """The freezes in force at ``now``."""
    return Q(starts_at__lte=now, ended_at__isnull=True) & (
        Q(ends_at__isnull=True) | Q(ends_at__gt=now)
    )


def freeze_state(freeze: Freeze, now: datetime) -> str:
    """``in force``, ``planned``, ``over`` or ``ended`` (early, by an operator) at ``now``: the
    row's own reading of :func:`in_force`, for one freeze already read."""
    if freeze.ended_at is not None:
        return "ended"
    if freeze.ends_at is not None and freeze.ends_at <= now:
        return "over"
    return "in force" if freeze.starts_at <= now else "planned"


def covers(freeze: Freeze, workflow: str, subject: str) -> bool:
    return any(fnmatchcase(workflow, g) for g in freeze.workflows) and any(
        fnmatchcase(subject, g) for g in freeze.subjects
    )


def freeze_declare(
    *,
    caller: Caller,
    reason: str,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    workflows: Sequence[str] = ("*",),
    subjects: Sequence[str] = ("*",),
) -> Freeze:
    """Declare a freeze (operators). ``starts_at`` defaults to now (the database's clock);
    ``ends_at`` None: until an operator ends it. Refused (:class:`FreezeRefused`): no reason,
    a window that ends before it starts or is over already, a workflow glob that names no
    workflow Alfred runs, an empty list."""
    _operator(caller, "declare")
    writes_allowed()
    reason, workflows, subjects = reason.strip(), _globs(workflows), _globs(subjects)
    # Not durable: the admin's add view saves inside a transaction of its own (nothing here
    # must be committed before something else happens).
    with transaction.atomic():
        now = db_now()
        starts = starts_at or now
        problems = freeze_problems(reason, starts, ends_at, workflows, subjects, now)
        if problems:
            raise FreezeRefused("; ".join(problems))
        freeze = Freeze.objects.create(
            reason=reason,
            starts_at=starts,
            ends_at=ends_at,
            workflows=workflows,
            subjects=subjects,
            created_by=caller.principal,
        )
        _audit(caller, "freeze.declare", freeze, reason)
    return freeze


def _globs(globs: Iterable[str]) -> list[str]:
    return [str(g).strip() for g in globs if str(g).strip()]


def freeze_problems(
    reason: str,
    starts_at: datetime,
    ends_at: datetime | None,
    workflows: Sequence[str],
    subjects: Sequence[str],
    now: datetime,
) -> list[str]:
    """What keeps a freeze from being declared as asked (every face asks this one rule): no
    reason, a window that ends before it starts or is over, no glob, a workflow glob that
    matches no workflow Alfred runs."""
    problems = [] if reason.strip() else ["say why: a freeze's reason is shown to whoever it holds"]
    if ends_at is not None and ends_at <= max(starts_at, now):
        problems.append("the freeze would end before it starts, or has ended already")
    for what, globs in (("workflows", workflows), ("subjects", subjects)):
        if not globs or any(len(g) > 200 for g in globs):
            problems.append(f"{what}: one or more globs of at most 200 characters ('*': all)")
    known = {workflow.name for workflow in workflows_all()}
    unknown = [g for g in workflows if not any(fnmatchcase(name, g) for name in known)]
    if unknown:
        problems.append(f"no workflow Alfred runs matches {', '.join(unknown)}")
    return problems


def freeze_end(*, caller: Caller, freeze_id: str, reason: str = "") -> Freeze:
    """End a freeze now (operators): what it holds goes on at once."""
    _operator(caller, "end")
    writes_allowed()
    with transaction.atomic(durable=True):
        freeze = Freeze.objects.select_for_update().get(pk=freeze_id)
        now = db_now()
        if freeze.ended_at is not None or (freeze.ends_at is not None and freeze.ends_at <= now):
            raise FreezeEnded(freeze)
        freeze.ended_at, freeze.ended_by = now, caller.principal
        freeze.save(update_fields=["ended_at", "ended_by"])
        _audit(caller, "freeze.end", freeze, reason)
    # What waits on it goes on. A stage that read the freeze in force and has not armed its
    # hold yet is running: a wake owed to its run makes it look again as it suspends.
    waits_hasten([_topic(freeze)], purpose=TimerPurpose.HOLD)
    with transaction.atomic():
        for run_id in Run.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True):
            run_wake(run_id)
    return freeze


def freeze_exempt(*, caller: Caller, freeze_id: str, execution_id: str, reason: str) -> Execution:
    """Let ``execution_id`` through the freeze (operators, with a reason): it goes on at once.
    Audited on the execution, and an ``execution.let_through`` event."""
    _operator(caller, "let an execution through")
    writes_allowed()
    reason = reason.strip()
    if not reason:
        raise FreezeRefused("say why this one may change things during the freeze")
    with transaction.atomic(durable=True):
        execution = Execution.objects.select_for_update().get(pk=execution_id)
        freeze = Freeze.objects.get(pk=freeze_id)
        now = db_now()
        if execution.terminal:
            raise FreezeNotHolding(freeze, execution, f"it is {execution.status}")
        if not Freeze.objects.filter(in_force(now), pk=freeze.pk).exists():
            raise FreezeNotHolding(freeze, execution, "the freeze is not in force")
        if not _family_covered(freeze, _lineage(execution)):
            raise FreezeNotHolding(freeze, execution, "the freeze does not cover it")
        _, created = FreezeExemption.objects.get_or_create(
            freeze=freeze,
            execution=execution,
            defaults={"principal": caller.principal, "reason": reason},
        )
        if created:
            audit_record(caller, "execution.let_through", execution.id, reason, freeze=freeze.id)
            event_emit(
                execution_id=execution.id,
                type=EventType.LET_THROUGH,
                key=event_key(execution.id, f"let_through:{freeze.id}"),
                payload={"freeze": freeze.id, "by": caller.principal, "reason": reason},
            )
        # The run first, then its timers (the engine's lock order); woken whether or not its
        # hold is armed yet: a stage deciding to hold looks again as it suspends.
        for run_id in _family_runs(execution):
            run_wake(run_id)
            Timer.objects.filter(
                run_id=run_id,
                purpose=TimerPurpose.HOLD,
                status=TimerStatus.PENDING,
                topics__contains=[_topic(freeze)],
            ).update(status=TimerStatus.FIRED, fired_at=now)
    return execution


def freeze_hold(execution_id: str, workflow: str, run_id: str) -> Hold | None:
    """The runtime's mutation gate: the freeze that holds this mutation, if any (the one
    that ends last, so the hold is waited out once).

    An execution and the children it started are one change: a freeze covers a child when it
    covers the child or any execution above it, holds none of them once any of them has
    mutated (a change half made is finished), and lets through what an exemption of any of
    them lets through. Never a rollback's run."""
    now = db_now()
    freezes = list(Freeze.objects.filter(in_force(now)))
    if not freezes:
        return None
    execution = Execution.objects.select_related("current_run").get(pk=execution_id)
    run = execution.current_run
    if run is None or run.id != run_id or run.kind == RunKind.ROLLBACK:
        return None
    lineage = _lineage(execution)
    exempt = set(
        FreezeExemption.objects.filter(execution__in=[e.pk for e in lineage]).values_list(
            "freeze_id", flat=True
        )
    )
    holding = [f for f in freezes if f.id not in exempt and _family_covered(f, lineage)]
    if not holding or _family_mutated(lineage[-1].pk):
        return None
    freeze = max(holding, key=lambda f: f.ends_at or datetime.max.replace(tzinfo=now.tzinfo))
    until = (
        "until it is ended"
        if freeze.ends_at is None
        else f"until {freeze.ends_at:%Y-%m-%d %H:%M} UTC"
    )
    with transaction.atomic():
        Execution.objects.select_for_update().filter(pk=execution_id).first()  # the lock order
        event_emit(
            execution_id=execution_id,
            type=EventType.HELD,
            key=event_key(execution_id, f"{run_id}:held:{freeze.id}"),
            payload={
                "freeze": freeze.id,
                "reason": freeze.reason,
                "ends_at": None if freeze.ends_at is None else freeze.ends_at.isoformat(),
                "run": run_id,
            },
        )
    return Hold(
        reason=f"held by the change freeze {freeze.id} {until}: {freeze.reason}",
        topic=_topic(freeze),
        until=now + RECHECK if freeze.ends_at is None else freeze.ends_at,
    )


def _lineage(execution: Execution) -> list[Execution]:
    """The execution and those above it, up to its root (last)."""
    found = [execution]
    while found[-1].parent_id is not None and len(found) < 20:
        found.append(Execution.objects.get(pk=found[-1].parent_id))
    return found


def _family_covered(freeze: Freeze, lineage: Sequence[Execution]) -> bool:
    return any(covers(freeze, e.workflow, execution_subject(e)) for e in lineage)


_FAMILY_MUTATED_SQL = f"""
    WITH RECURSIVE family AS (
        SELECT id FROM {Execution._meta.db_table} WHERE id = %s
        UNION ALL
        SELECT e.id FROM {Execution._meta.db_table} e JOIN family f ON e.parent_id = f.id
    )
    SELECT EXISTS (
        SELECT 1 FROM {StepReceipt._meta.db_table} r
        JOIN {Run._meta.db_table} u ON u.id = r.run_id
        WHERE u.execution_id IN (SELECT id FROM family) AND r.mutation IS NOT NULL
    )
"""  # noqa: S608 - names from model metadata; the value is bound


def _family_mutated(root_id: str) -> bool:
    """Whether the root or any execution under it has made a change (in any run)."""
    with connection.cursor() as cursor:
        cursor.execute(_FAMILY_MUTATED_SQL, [root_id])
        return bool(cursor.fetchone()[0])


def _family_runs(execution: Execution) -> list[str]:
    """The current runs of the execution and the executions under it (an exemption of a root
    lets its children through)."""
    found: list[str] = []
    level = [execution.pk]
    while level and len(found) < 1000:
        rows = list(Execution.objects.filter(pk__in=level).values_list("pk", "current_run_id"))
        found += [run_id for _, run_id in rows if run_id]
        level = list(Execution.objects.filter(parent_id__in=level).values_list("pk", flat=True))
    return found


def held_by(execution: Execution) -> Freeze | None:
    """The freeze the execution's current run waits on (a pending hold), if any."""
    topics = (
        Timer.objects.filter(
            run_id=execution.current_run_id,
            purpose=TimerPurpose.HOLD,
            status=TimerStatus.PENDING,
        )
        .values_list("topics", flat=True)
        .first()
    )
    ids = [t.removeprefix("freeze:") for t in topics or () if t.startswith("freeze:")]
    return Freeze.objects.filter(pk__in=ids).first() if ids else None


def held_executions(freeze: Freeze) -> list[Execution]:
    """The executions the freeze holds now (a pending hold on its topic)."""
    runs = Timer.objects.filter(
        purpose=TimerPurpose.HOLD, status=TimerStatus.PENDING, topics__contains=[_topic(freeze)]
    ).values_list("run_id", flat=True)
    return list(Execution.objects.filter(current_run_id__in=runs).order_by("created_at"))


def _topic(freeze: Freeze) -> str:
    return f"freeze:{freeze.id}"


def _operator(caller: Caller, action: str) -> None:
    if not caller.operates:
        raise FreezeNotPermitted(action)


def _audit(caller: Caller, action: str, freeze: Freeze, reason: str) -> None:
    AuditEntry.objects.create(
        actor=caller.principal,
        action=action,
        target_type="freeze",
        target_id=freeze.id,
        reason=reason,
        data={
            "actor_name": caller.name,
            "role": caller.role,
            "starts_at": freeze.starts_at.isoformat(),
            "ends_at": None if freeze.ends_at is None else freeze.ends_at.isoformat(),
            "workflows": freeze.workflows,
            "subjects": freeze.subjects,
        },
    )


__all__ = [
    "FreezeEnded",
    "FreezeNotHolding",
    "FreezeNotPermitted",
    "FreezeRefused",
    "covers",
    "freeze_declare",
    "freeze_end",
    "freeze_exempt",
    "freeze_hold",
    "freeze_problems",
    "freeze_state",
    "held_by",
    "held_executions",
    "in_force",
]
