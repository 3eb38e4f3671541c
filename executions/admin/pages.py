"""What the execution's admin pages show, computed apart from the admin classes (selectors for
the operator's view: reads only, no request). The templates only lay these out.

- :func:`execution_header` — status, workflow, lane (role, queue position), start state, the
  related executions and the assistance asked for.
- :func:`execution_timeline` — every run, newest first, as its stages in order, each with
  what happened inside it in time order: step receipts (with what each took), waits (timers)
  and checkpoints (hooks), outputs and errors as collapsed JSON.
- :func:`pending_approval` — the checkpoint an operator answers, its plan as its workflow
  shows it (the catalogue's ``approval_view``).

The whole history as one JSON document ("download as JSON") is ``executions.history``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.admin.utils import quote
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from alfred.principals import Caller, principal_name
from alfred.readonly import read_only
from executions import selectors
from executions.approvals import standing as approval_standing
from executions.catalog import ApprovalView, execution_subject, workflow_find
from executions.controls import CONTROLS, execution_controls
from executions.freezes import held_by
from executions.history import RUN_RECORDS
from executions.models import (
    TERMINAL_STATUSES,
    Drift,
    DriftWatch,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    Run,
    RunKind,
    Stage,
    StepReceipt,
    Timer,
)
from executions.runtime.rollback import PlannedUndo, rollback_plan_tree
from lanes.models import Lane, LaneState

EVENTS_SHOWN = 500  # the newest; every event is in the outbox events' list


def pretty(value: Any) -> str:
    """JSON for a <pre> (the template escapes it); empty for nothing recorded."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def change_url(obj: Any) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])


def _took(start: datetime | None, end: datetime | None) -> str:
    """A duration for people: ``840 ms``, ``12.3 s``, ``4 min 5 s``, ``2 h 10 min``."""
    if start is None or end is None or end < start:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute} min"


# --- the header ---------------------------------------------------------------------------


def execution_tickets(execution: Execution) -> list[str]:
    data = execution.input if isinstance(execution.input, Mapping) else {}
    tickets = data.get("ticket_ids")
    return [str(t) for t in tickets] if isinstance(tickets, list) else []


def execution_requester(execution: Execution) -> dict[str, str]:
    """Who first asked for the execution: the principal it is recorded under and the name
    people know it by (a user's, a token's; none left for one since deleted)."""
    name = (
        Execution.objects.filter(pk=execution.pk)
        .annotate(name=principal_name("principal"))
        .values_list("name", flat=True)
        .first()
    )
    return {"principal": execution.principal, "name": name or execution.principal}


def execution_identity(execution: Execution) -> dict[str, Any]:
    """What the header and the control pages name the execution by."""
    return {
        "subject": execution_subject(execution),
        "requester": execution_requester(execution),
        "tickets": execution_tickets(execution),
    }


def execution_title(execution: Execution) -> str:
    """The page's subtitle: what it does to what, then the id."""
    subject = execution_subject(execution)
    return f"{execution.workflow} {subject} · {execution.pk}" if subject else execution.pk


def _timing(execution: Execution) -> dict[str, str]:
    """What the header says the execution took: from its acceptance to the end of its work,
    and, once a rollback was asked for, what the rollback took apart (from its request to its
    end): a rollback's time is not the work's, however long after the work it was asked
    for. ``so far`` for what has not ended."""
    now = timezone.now()
    terminal = execution.status in TERMINAL_STATUSES
    rollback = execution.runs.filter(kind=RunKind.ROLLBACK).order_by("number").first()
    if rollback is None:
        end = execution.finished_at or now
        return {"took": _took(execution.created_at, end), "took_label": _label(terminal)}
    work = execution.runs.exclude(kind=RunKind.ROLLBACK).aggregate(end=Max("finished_at"))
    return {
        "took": _took(execution.created_at, work["end"] or rollback.created_at),
        "took_label": "took",
        "rollback_took": _took(rollback.created_at, execution.finished_at or now),
        "rollback_label": _label(terminal),
    }


def _label(ended: bool) -> str:
    return "took" if ended else "so far"


def execution_header(execution: Execution) -> dict[str, Any]:
    lane = selectors.execution_lane(execution)
    hook = _pending_hook(execution)
    standing = (
        None if hook is None else approval_standing(execution, hook, execution_subject(execution))
    )
    held = held_by(execution) if execution.status == ExecutionStatus.WAITING else None
    waiting = selectors.execution_waiting(execution, lane, hook, standing, held)
    related = [
        ("predecessor", execution.predecessor),
        ("parent", execution.parent),
    ]
    children = list(
        execution.children.order_by("created_at", "id").only("id", "status", "workflow")
    )
    recorded = execution.assistance if isinstance(execution.assistance, list) else []
    return {
        "status": execution.status,
        "terminal": execution.status in TERMINAL_STATUSES,
        "workflow": execution.workflow,
        **execution_identity(execution),
        "dry_run": execution.dry_run,
        "start_state": execution.start_state,
        "start_error": pretty(execution.start_error),
        **_timing(execution),
        "lane": None
        if lane is None
        else {
            "key": lane.key,
            "role": lane.role or "none (neither holding nor queued)",
            "state": lane.state or "no lane row",
            "position": lane.position,
            "url": reverse("admin:lanes_lane_change", args=[quote(lane.key)]) if lane.state else "",
        },
        "waiting": None
        if waiting is None
        else {
            "code": waiting.code,
            "who": waiting.who,
            "detail": waiting.detail,
            "lane_url": reverse("admin:lanes_lane_change", args=[quote(waiting.lane)])
            if waiting.lane
            else "",
            "freeze_url": reverse("admin:executions_freeze_change", args=[quote(waiting.freeze)])
            if waiting.freeze
            else "",
        },
        "related": [
            {"relation": relation, "execution": other, "url": change_url(other)}
            for relation, other in related
            if other is not None
        ]
        + [{"relation": "child", "execution": c, "url": change_url(c)} for c in children],
        "assistance": [
            {
                "kind": str(item.get("kind", "")),
                "summary": str(item.get("summary") or item.get("action") or ""),
                "action": str(item.get("action", "")),
                "stage": str(item.get("stage", "")),
                "detail": pretty(item),
            }
            for item in recorded
            if isinstance(item, Mapping)
        ],
        # Asked for once, no longer owed: its rollback undid what it was asked for.
        "assistance_withdrawn": bool(recorded) and not selectors.execution_assistance(execution),
        "input": pretty(execution.input),
        "error": pretty(execution.error),
        "result": pretty(execution.result),
        "watch": execution_watch(execution)
        if execution.status == ExecutionStatus.SUCCEEDED
        else None,
    }


def execution_watch(execution: Execution) -> dict[str, Any] | None:
    """What the drift watch says of a succeeded execution: its open drift (each finding's
    what, expected and found) or how its last check went; None when it is not watched."""
    watch = DriftWatch.objects.filter(pk=execution.pk).first()
    drift = Drift.objects.filter(pk=execution.drift_id).first() if execution.drift_id else None
    if watch is None and drift is None:
        return None
    return {
        "checked_at": watch.checked_at if watch else None,
        "outcome": watch.outcome if watch else "",
        "error": watch.error if watch else "",
        "retired": watch.retired_reason if watch and watch.retired_at else "",
        "drift": None
        if drift is None
        else {
            "id": drift.pk,
            "url": reverse("admin:executions_drift_change", args=[quote(drift.pk)]),
            "first_seen_at": drift.first_seen_at,
            "last_seen_at": drift.last_seen_at,
            "findings": [
                {"what": f["what"], "expected": pretty(f["expected"]), "found": pretty(f["found"])}
                for f in drift.findings
            ],
        },
    }


# --- the timeline -------------------------------------------------------------------------


def _receipt_view(receipt: StepReceipt) -> dict[str, Any]:
    mutation = receipt.mutation if isinstance(receipt.mutation, Mapping) else None
    return {
        "receipt": receipt,
        "output": pretty(receipt.output),
        "error": pretty(receipt.error),
        "mutation": None
        if mutation is None
        else {
            "resource": str(mutation.get("resource", "")),
            "action": str(mutation.get("action", "")),
            "before": pretty(mutation.get("before")),
            "after": pretty(mutation.get("after")),
            "simulated": bool(mutation.get("simulated")),
        },
    }


def _entries(
    receipts: Iterable[StepReceipt], timers: Iterable[Timer], hooks: Iterable[Hook]
) -> list[dict[str, Any]]:
    """One stage's entries, in the order they happened. A receipt's time is when it was
    recorded, a wait's when it began (its timer's creation), a checkpoint's when it was asked."""
    entries: list[dict[str, Any]] = []
    for receipt in receipts:
        entries.append({"type": "step", "at": receipt.created_at, **_receipt_view(receipt)})
    for timer in timers:
        entries.append(
            {
                "type": "wait",
                "at": timer.created_at,
                "timer": timer,
                "took": _took(timer.created_at, timer.fired_at),
                "topics": ", ".join(str(t) for t in timer.topics or []),
            }
        )
    for hook in hooks:
        entries.append(
            {
                "type": "checkpoint",
                "at": hook.created_at,
                "hook": hook,
                "plan_hash": str((hook.payload or {}).get("plan_hash", "")),
                "took": _took(hook.created_at, hook.resolved_at),
                "payload": pretty(hook.payload),
            }
        )
    entries.sort(key=lambda entry: entry["at"])
    return entries


def _step_durations(entries: list[dict[str, Any]], start: datetime | None) -> None:
    """What a step took: from the previous entry of its stage (or the stage's start) to its
    receipt. A step's own start is not recorded; this is the time the stage spent on it."""
    previous = start
    for entry in entries:
        if entry["type"] == "step":
            entry["took"] = _took(previous, entry["at"])
        previous = entry["at"]


def _run_view(run: Run, current: bool) -> dict[str, Any]:
    receipts: dict[str, list[StepReceipt]] = {}
    timers: dict[str, list[Timer]] = {}
    hooks: dict[str, list[Hook]] = {}
    for receipt in run.receipts.all():
        receipts.setdefault(receipt.stage, []).append(receipt)
    for timer in run.timers.all():
        timers.setdefault(timer.stage, []).append(timer)
    for hook in run.hooks.all():
        hooks.setdefault(hook.stage, []).append(hook)
    stages: list[dict[str, Any]] = []
    named = set()
    for stage in run.stages.all():
        named.add(stage.name)
        stages.append(_stage_view(stage.name, stage, receipts, timers, hooks))
    # A rollback run's compensations (and any entry of a stage with no stage row) still show.
    for name in sorted({*receipts, *timers, *hooks} - named):
        stages.append(_stage_view(name, None, receipts, timers, hooks))
    return {
        "run": run,
        "current": current,
        "took": _took(run.started_at, run.finished_at),
        "error": pretty(run.error),
        "stages": stages,
    }


def _stage_view(
    name: str,
    stage: Stage | None,
    receipts: Mapping[str, list[StepReceipt]],
    timers: Mapping[str, list[Timer]],
    hooks: Mapping[str, list[Hook]],
) -> dict[str, Any]:
    entries = _entries(receipts.get(name, ()), timers.get(name, ()), hooks.get(name, ()))
    _step_durations(entries, stage.started_at if stage else None)
    return {
        "name": name,
        "stage": stage,
        "status": stage.status if stage else "",
        "took": _took(stage.started_at, stage.finished_at) if stage else "",
        "output": pretty(stage.output) if stage else "",
        "error": pretty(stage.error) if stage else "",
        "entries": entries,
    }


def execution_timeline(execution: Execution) -> list[dict[str, Any]]:
    """Every run, newest first, each as its stages and what happened in them (five queries,
    whatever the number of runs)."""
    runs = execution.runs.order_by("-number").prefetch_related(*RUN_RECORDS)
    return [_run_view(run, run.pk == execution.current_run_id) for run in runs]


# --- the approval -------------------------------------------------------------------------


def _pending_hook(execution: Execution) -> Hook | None:
    return execution.hooks.awaiting_operator().first()


def pending_approval(execution: Execution, caller: Caller | None = None) -> dict[str, Any] | None:
    """The operator checkpoint the execution waits on (as the API's ``pending_approval``),
    with its plan as its workflow shows it, where its approval stands under the policy
    (``policy``: :class:`~executions.approvals.Standing`) and, given the ``caller``, why they
    may not approve it (``refusal``, "" when they may)."""
    hook = _pending_hook(execution)
    if hook is None:
        return None
    payload = hook.payload if isinstance(hook.payload, Mapping) else {}
    workflow = workflow_find(execution.workflow)
    policy = approval_standing(execution, hook, execution_subject(execution))
    refusal = ""
    if caller is not None and any(g.principal == caller.principal for g in policy.given):
        refusal = "you approved this plan already"
    elif caller is not None:
        refusal = policy.refusal(caller)
    return {
        "policy": policy,
        "refusal": refusal,
        "hook": hook,
        "plan_hash": str(payload.get("plan_hash", "")),
        "summary": str(payload.get("summary", "")),
        "view": workflow.approval_view(payload) if workflow is not None else ApprovalView(),
        "expires_at": hook.expires_at,
        # display only: the service decides expiry on the database's clock
        "expired": hook.expires_at is not None and hook.expires_at <= timezone.now(),
        "force_required": bool(payload.get("force_required")),
        "requested_at": hook.created_at,
        "payload": pretty(hook.payload),
    }


def superseded_plan(execution: Execution, plan_hash: str) -> dict[str, Any] | None:
    """When ``plan_hash`` names an earlier plan of this execution that is no longer the one
    waiting: what became of it, and the hash of the plan waiting now (if any)."""
    if not plan_hash:
        return None
    current = _pending_hook(execution)
    current_hash = str((current.payload or {}).get("plan_hash", "")) if current else ""
    if plan_hash == current_hash:
        return None
    earlier = (
        execution.hooks.filter(operator=True, payload__plan_hash=plan_hash)
        .order_by("-created_at")
        .first()
    )
    if earlier is None:
        return None
    return {
        "plan_hash": plan_hash,
        "status": PLAN_FATES.get(earlier.status, earlier.status),
        "hook_status": earlier.status,
        "current_hash": current_hash,
    }


# What became of a plan, in an operator's words (a hook's status is the engine's: "signalled"
# says a signal reached the wait, not what the operator did).
PLAN_FATES: dict[str, str] = {
    HookStatus.SIGNALLED: "already approved",
    HookStatus.SUPERSEDED: "superseded",
    HookStatus.EXPIRED: "expired: nobody approved it in time",
    HookStatus.CANCELED: "no longer waiting: rejected, or the execution was canceled",
}


def approvals_pending() -> dict[str, Any]:
    """What waits for an operator, for the admin index: paused executions and lanes that
    need recovering, with where to find them (the one execution itself when there is one)."""
    paused = selectors.executions_awaiting(Execution.objects.all(), "approval")
    ids = list(paused.order_by("created_at").values_list("id", flat=True)[:2])
    changelist = reverse("admin:executions_execution_changelist")
    stuck = Lane.objects.filter(state=LaneState.RECOVERY_REQUIRED).count()
    return {
        "approvals": paused.count() if ids else 0,
        "approvals_url": reverse("admin:executions_execution_change", args=[quote(ids[0])])
        if len(ids) == 1
        else f"{changelist}?{urlencode({'awaiting': 'approval'})}",
        "recoveries": stuck,
        "recoveries_url": reverse("admin:lanes_lane_changelist")
        + "?"
        + urlencode({"state__exact": LaneState.RECOVERY_REQUIRED}),
    }


# --- controls and the page ----------------------------------------------------------------


def offered_controls(execution: Execution, caller: Caller) -> list[str]:
    """The controls to offer, in the controls' order: none on a read-only instance."""
    if read_only():
        return []
    allowed = execution_controls(execution, caller)
    return [control.name for control in CONTROLS if control.name in allowed]


def rollback_steps(execution: Execution) -> list[dict[str, Any]]:
    """What a rollback asked for now does, in its order, children included (the engine's own
    :func:`~executions.runtime.rollback.rollback_plan`, which the run follows): each step's
    receipt and mutation, and under a child's rollback the steps of the child's own run."""
    return [_undo_view(execution.pk, planned) for planned in rollback_plan_tree(execution.pk)]


def _undo_view(execution_id: str, planned: PlannedUndo) -> dict[str, Any]:
    undo = planned.undo
    return {
        **_receipt_view(undo.receipt),
        "execution_id": execution_id,
        "resource": undo.resource,
        "action": undo.action,
        "child": undo.child,
        "child_status": planned.child_status,
        "child_url": reverse("admin:executions_execution_change", args=[quote(undo.child)])
        if undo.child
        else "",
        "then": [_undo_view(str(undo.child), step) for step in planned.then],
    }


def rollback_lines(steps: Iterable[Mapping[str, Any]], within: str = "") -> list[str]:
    """The same steps as lines of text, in order (the bulk action's confirmation); a child's
    own steps follow it, each naming the child."""
    lines = []
    for step in steps:
        receipt = step["receipt"]
        where = f"run #{receipt.run.number}, {receipt.stage} / {receipt.step_key}"
        if step["child"]:
            what = f"roll back the child {step['child']} ({step['child_status'] or 'unknown'})"
            if not step["then"]:
                what += ": rolled back already, nothing to do"
        else:
            what = f"undo {step['action'] or 'the change'} of {step['resource']}"
        lines.append(f"{within}{what} ({where})")
        lines += rollback_lines(step["then"], f"{step['child']}: ") if step["child"] else []
    return lines


def execution_events(execution: Execution) -> dict[str, Any]:
    events = list(execution.events.order_by("-sequence")[:EVENTS_SHOWN])
    return {
        "events": [{"event": e, "payload": pretty(e.payload)} for e in reversed(events)],
        "events_total": execution.last_sequence,
        "events_url": reverse("admin:executions_outboxevent_changelist")
        + "?"
        + urlencode({"q": execution.pk}),
    }


# --- the history as JSON ------------------------------------------------------------------
