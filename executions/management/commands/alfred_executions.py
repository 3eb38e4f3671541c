"""``manage.py alfred_executions show|approve|rollback|cancel|retry EXECUTION``: the controls
from a shell, as the operator ``cli:<actor>`` (audited like any other caller's)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.principals import cli_actor, cli_caller
from executions import selectors
from executions.api.serializers import ExecutionSerializer
from executions.controls import (
    REFUSALS,
    StalePlan,
    execution_approve,
    execution_cancel,
    execution_controls,
    execution_retry,
    execution_rollback,
)
from executions.models import Execution


class Command(BaseCommand):
    help = "Show an execution, or approve, roll back, cancel or retry it (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        show = sub.add_parser("show", help="the execution resource, as JSON")
        show.add_argument("execution")
        for name, text in [
            ("approve", "approve the pending plan, named by its hash"),
            ("rollback", "undo what the execution changed, from its receipts"),
            ("cancel", "cancel (a running step finishes first)"),
            ("retry", "a new run on a failed or canceled execution"),
        ]:
            control = sub.add_parser(name, help=text)
            control.add_argument("execution")
            control.add_argument("--reason", required=name in ("approve", "rollback"), default="")
            control.add_argument(
                "--actor", type=cli_actor, help="your name in the audit log (default: the OS user)"
            )
            if name == "approve":
                control.add_argument("--plan-hash", required=True)
                control.add_argument(
                    "--force",
                    action="store_true",
                    help="lift the blast-radius guard (when the plan says force_required)",
                )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
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
            return
        caller = cli_caller(options["actor"])
        reason = options["reason"]
        try:
            if action == "approve":
                execution_approve(
                    execution_id=execution_id,
                    caller=caller,
                    plan_hash=options["plan_hash"],
                    force=options["force"],
                    reason=reason,
                )
            elif action == "rollback":
                execution_rollback(execution_id=execution_id, caller=caller, reason=reason)
            elif action == "cancel":
                execution_cancel(execution_id=execution_id, caller=caller, reason=reason)
            else:
                execution_retry(execution_id=execution_id, caller=caller, reason=reason)
        except Execution.DoesNotExist:
            raise CommandError(f"no execution {execution_id}") from None
        except StalePlan as exc:
            raise CommandError(f"{exc}: the pending plan's hash is {exc.current}") from None
        except REFUSALS as exc:
            raise CommandError(str(exc)) from None
        status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
        self.stdout.write(f"{execution_id}: {action} recorded; now {status}")
