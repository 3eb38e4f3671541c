"""``manage.py alfred_executions list|show|approve|reject|rollback|cancel|retry``: the executions
and their controls from a shell, as the operator ``cli:<actor>`` (audited like any other
caller's). Their arguments follow the API's rules: ``--plan-hash`` is refused unless it is a
plan hash (64 lower-case hex digits, the API's message), and ``--reason`` by the one rule of
every face (``alfred.text.reason_problem``), required only where the control says so
(``Control.reason_required``); a refusal is argparse's usage error (exit status 2).

``list`` prints the newest first, a line each (``--status``, ``--workflow`` and ``--awaiting
approval|lane|recovery`` filter, ``--limit`` bounds it), and says on standard error how many
it showed and whether there are more; what an execution waits for, and who can act, is its
last column (``lane recovery (operator)``: its lane is recovery_required). ``show`` prints the
resource (its ``waiting_for`` says the same, with the command that acts) and, on standard
error, the controls the caller may use and what it waits for.

Each says what happens next and, where the operator must act again, what to run:

- ``approve`` follows the run for ``--wait`` seconds (default 30) until it has taken the
  approval: the plan is being applied (or the execution ended), or — what the plan read
  changed since it was made — the approved plan is superseded by a new one, whose hash it
  names with the command that approves it (exit status 1: nothing was applied). A run no
  worker resumed in time is said to be so.
- ``rollback`` says whether its run starts now, waits in its lane's queue, or cannot start
  until an operator recovers the lane (an owner whose lane is ``recovery_required``), and
  then names the lane and the ``alfred_lanes recover`` command that starts it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.principals import Caller, Role, cli_actor, cli_caller
from alfred.text import reason_argument
from executions import selectors
from executions.admin.pages import pending_approval
from executions.api.serializers import ExecutionSerializer
from executions.approvals import standing as approval_standing
from executions.catalog import execution_subject
from executions.controls import (
    APPROVE,
    CONTROLS,
    CONTROLS_BY_NAME,
    PLAN_HASH_EXPECTED,
    PLAN_HASH_PATTERN,
    REFUSALS,
    ControlBody,
    StalePlan,
    control_perform,
    execution_controls,
)
from executions.models import Execution, ExecutionStatus, Hook
from lanes.models import Lane, LaneState


class Command(BaseCommand):
    help = (
        "List executions, show one, or approve, reject, roll back, cancel or retry it, accept "
        "its drift or start it again (audited)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="executions, newest first, a line each")
        listing.add_argument("--status", choices=ExecutionStatus.values)
        listing.add_argument("--workflow", choices=selectors.workflow_names())
        listing.add_argument(
            "--awaiting",
            choices=list(selectors.AWAITING),
            help="only those waiting for an operator's approval, queued on their lane, or held "
            "up by a lane only an operator can recover",
        )
        listing.add_argument("--limit", type=_positive, default=50, help="at most (default 50)")
        show = sub.add_parser("show", help="the execution resource, as JSON")
        show.add_argument("execution")
        for rule in CONTROLS:
            name = rule.name
            control = sub.add_parser(name, help=rule.summary)
            control.add_argument("execution")
            control.add_argument(
                "--reason",
                type=reason_argument(required=rule.reason_required),
                required=rule.reason_required,
                default="",
                help="why, for the audit log" + ("" if rule.reason_required else " (optional)"),
            )
            control.add_argument(
                "--actor", type=cli_actor, help="your name in the audit log (default: the OS user)"
            )
            if rule.plan_hash:
                control.add_argument(
                    "--plan-hash", type=_plan_hash, required=True, help=rule.plan_hash
                )
            if name == APPROVE.name:  # how the command follows it, not what it takes
                control.add_argument(
                    "--wait",
                    type=float,
                    default=30.0,
                    metavar="SECONDS",
                    help="follow the run this long until it has taken the approval (0: not at "
                    "all; default 30)",
                )
            if rule.force:
                control.add_argument(
                    "--force",
                    action="store_true",
                    help="lift the blast-radius guard (when the plan says force_required)",
                )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            rows = selectors.execution_rows(
                Caller("cli", Role.VIEWER),  # a read: it names no one, and sees everything
                workflow=options["workflow"],
                status=options["status"],
                awaiting=options["awaiting"],
            )
            limit = options["limit"]
            found = list(rows[: limit + 1])
            shown = found[:limit]
            self.stdout.write(_table(shown))
            more = "; there are more: raise --limit, or filter" if len(found) > limit else ""
            self.stderr.write(f"{len(shown)} shown, newest first{more}")
            return
        execution_id = options["execution"]
        if action == "show":
            try:
                execution = selectors.execution_get(execution_id)
            except Execution.DoesNotExist:
                raise CommandError(f"no execution {execution_id}") from None
            caller = cli_caller(options.get("actor"))
            data = ExecutionSerializer(execution, context={"caller": caller}).data
            self.stdout.write(json.dumps(data, indent=2, default=str))
            allowed = ", ".join(sorted(execution_controls(execution, caller))) or "none"
            self.stderr.write(f"controls now: {allowed}")
            waiting = data["waiting_for"]
            if waiting is not None:
                self.stderr.write(f"waits for ({waiting['who']}): {waiting['detail']}")
            subject = execution_subject(execution)
            if subject:
                self.stderr.write(f"acts on: {subject}")
            pending = pending_approval(execution, caller)
            if pending is not None:
                policy = pending["policy"]
                self.stderr.write(
                    f"plan {pending['plan_hash']} waits for approval: {policy.summary()}; the "
                    f"rule {policy.rule.name!r} asks {policy.rule.asks()}"
                )
                if policy.blocked:
                    self.stderr.write(f"  it cannot be met: {policy.blocked}")
                if pending["refusal"]:
                    self.stderr.write(
                        f"  you ({caller.name}) may not approve it: {pending['refusal']}"
                    )
                self.stderr.write("\n".join(f"  {line}" for line in pending["view"].lines()))
            return
        caller = cli_caller(options["actor"])
        reason = options["reason"]
        try:
            acted = control_perform(
                CONTROLS_BY_NAME[action],
                execution_id=execution_id,
                caller=caller,
                body=ControlBody(
                    reason=reason,
                    plan_hash=options.get("plan_hash") or "",
                    force=bool(options.get("force")),
                ),
            )
        except Execution.DoesNotExist:
            raise CommandError(f"no execution {execution_id}") from None
        except StalePlan as exc:
            if not exc.current:
                raise CommandError(f"{execution_id}: no plan waits for approval") from None
            raise CommandError(
                f"{exc}: the pending plan's hash is {exc.current}. Review it with "
                f"`manage.py alfred_executions show {execution_id}`, then {action} it with "
                f"--plan-hash {exc.current}"
            ) from None
        except REFUSALS as exc:
            raise CommandError(str(exc)) from None
        if action == "approve":
            self.stdout.write(
                _after_approval(execution_id, options["plan_hash"], wait=options["wait"])
            )
        elif action == "rollback":
            self.stdout.write(_after_rollback(execution_id))
        elif action == "redo":
            self.stdout.write(
                f"{execution_id}: started again as {acted.id} ({acted.status}); follow it with "
                f"`manage.py alfred_executions show {acted.id}`"
            )
        else:
            status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
            self.stdout.write(f"{execution_id}: {action} recorded; now {status}")


def _plan_hash(text: str) -> str:
    """``--plan-hash``: a hash as the API takes it, refused with the API's message."""
    if re.match(PLAN_HASH_PATTERN, text) is None:
        raise argparse.ArgumentTypeError(PLAN_HASH_EXPECTED)
    return text


_plan_hash.__name__ = "plan hash"


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number, at least 1")
    return int(text)


def _table(executions: list[Execution]) -> str:
    """Aligned columns: id, workflow, what it acts on, status, lane, created (UTC), what it
    waits for."""
    header = ("ID", "WORKFLOW", "SUBJECT", "STATUS", "LANE", "CREATED (UTC)", "WAITS FOR")
    lines = [header] + [
        (
            execution.id,
            execution.workflow,
            execution_subject(execution) or "-",
            execution.status + (" (dry run)" if execution.dry_run else ""),
            execution.lane_key or "-",
            execution.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            _waits_for(execution),
        )
        for execution in executions
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _waits_for(execution: Execution) -> str:
    """From :func:`executions.selectors.execution_rows`' marks: what, and who can act."""
    return selectors.waits_for_mark(execution) or "-"


def _pending_plan(execution_id: str) -> Hook | None:
    return Hook.objects.filter(execution_id=execution_id).awaiting_operator().first()


def _after_approval(execution_id: str, plan_hash: str, *, wait: float) -> str:
    """What became of the approval once the run took it, read until ``wait`` runs out: the
    approval was recorded, but the run reads what it changes again before it changes it."""
    deadline = time.monotonic() + wait
    while True:
        execution = Execution.objects.only("status", "error", "workflow", "input", "principal").get(
            pk=execution_id
        )
        pending = _pending_plan(execution_id)
        current = str(pending.payload.get("plan_hash", "")) if pending is not None else ""
        if pending is not None and current == plan_hash:
            # Still waiting on this plan: the policy asks for more approvals than these.
            policy = approval_standing(execution, pending, execution_subject(execution))
            if policy.owed:
                more = (
                    f"it cannot get them as the policy stands: {policy.blocked}"
                    if policy.blocked
                    else "another operator approves it with the same --plan-hash"
                )
                return (
                    f"{execution_id}: your approval of plan {plan_hash} is recorded "
                    f"({policy.summary()}); the rule {policy.rule.name!r} asks for "
                    f"{policy.owed} more before it applies: {more}"
                )
        if pending is not None and current != plan_hash:
            until = f" (until {pending.expires_at.isoformat()})" if pending.expires_at else ""
            raise CommandError(
                f"{execution_id}: the plan {plan_hash} you approved was superseded before it "
                "was applied (what it read changed since it was made); nothing was changed. "
                f"A new plan waits for approval{until}: {current}. Review it with `manage.py "
                f"alfred_executions show {execution_id}`, then approve it with `manage.py "
                f"alfred_executions approve {execution_id} --plan-hash {current} --reason "
                '"…"`'
            )
        if execution.status == ExecutionStatus.FAILED:
            error = execution.error or {}
            raise CommandError(
                f"{execution_id}: plan {plan_hash} approved; the execution then failed: "
                f"{error.get('code', 'error')}: {error.get('message', '')}"
            )
        if execution.status != ExecutionStatus.PAUSED:
            return (
                f"{execution_id}: plan {plan_hash} approved and being applied; "
                f"now {execution.status}"
            )
        if time.monotonic() >= deadline:
            return (
                f"{execution_id}: approval of plan {plan_hash} recorded; no worker has resumed "
                f"the run yet (waited {wait:g} s). Before it changes anything it reads it "
                "again, and asks for a new approval if it changed: follow it with "
                f"`manage.py alfred_executions show {execution_id}`"
            )
        time.sleep(0.25)


def _after_rollback(execution_id: str) -> str:
    """Whether the rollback's run starts now; if it cannot, why and what starts it."""
    execution = selectors.execution_get(execution_id)
    lane_view = selectors.execution_lane(execution)
    recorded = f"{execution_id}: rollback recorded"
    if (
        lane_view is None
        or lane_view.role is None
        or (lane_view.role == "owner" and lane_view.state == LaneState.HELD)
    ):
        return f"{recorded}; its run starts now (now {execution.status})"
    lane = Lane.objects.get(key=lane_view.key)
    blocked = (
        f"lane {lane.key} is blocked for an operator (recovery_required: {lane.reason})"
        if lane.state == LaneState.RECOVERY_REQUIRED
        else None
    )
    recover = (
        f"`manage.py alfred_lanes recover {shlex.quote(lane.key)} --owner {lane.owner_id} "
        '--reason "…"`'
    )
    if lane_view.role == "owner" and blocked:
        return (
            f"{recorded}, but its run cannot start: its {blocked}. Once you have checked "
            f"what the execution left behind, recover the lane to start the rollback: {recover}"
        )
    text = (
        f"{recorded}; its run waits on lane {lane.key} (position {lane_view.position}, "
        f"behind {lane.owner_id}) and starts when the lane is handed to it"
    )
    if blocked:
        text += f". The {blocked}; recovering it hands it to the rollback first: {recover}"
    return text
