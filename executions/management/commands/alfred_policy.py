"""``manage.py alfred_policy check [FILE]`` and ``manage.py alfred_policy explain``: the approval
policy (``executions.approvals``; docs/runbook.md, "Approval policies") as an operator checks
it before a deploy and reads it after.

- ``check`` reads ``FILE`` (default: ``ALFRED_APPROVAL_POLICY``, or the built-in default) the
  way a starting process does, then prints each rule with who may approve it now, and exits 1
  on any problem: a file that does not parse, a rule naming no workflow Alfred runs, or a rule
  nobody can satisfy (more distinct approvers than its list holds, counted in the database).
- ``explain WORKFLOW SUBJECT`` says which rule applies to such an execution and what it asks;
  ``explain --execution ID`` the same for an execution, with where its pending approval stands.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.approvals import Policy, PolicyInvalid, policy, policy_read, rule_report
from executions.approvals import standing as approval_standing
from executions.catalog import execution_subject, workflows_all
from executions.models import Execution, Hook


class Command(BaseCommand):
    help = "Check the approval policy, or explain which rule applies to an execution."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        check = actions.add_parser("check", help="check a policy file (default: the one in force)")
        check.add_argument(
            "file", nargs="?", help="a policy file (default: ALFRED_APPROVAL_POLICY)"
        )
        explain = actions.add_parser("explain", help="which rule applies, and what it asks")
        explain.add_argument("workflow", nargs="?")
        explain.add_argument("subject", nargs="?", help="what it acts on, as `list` shows it")
        explain.add_argument("--execution", help="an execution's id instead")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "check":
            self._check(options["file"])
        else:
            self._explain(options["workflow"], options["subject"], options["execution"])

    def _check(self, path: str | None) -> None:
        try:
            checked: Policy = policy_read(path) if path else policy()
        except PolicyInvalid as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"policy: {checked.source}")
        problems = checked.problems(workflow.name for workflow in workflows_all())
        for rule in (*checked.rules, checked.default):
            report = rule_report(rule)
            self.stdout.write("\n".join(report.lines()))
            if report.unsatisfiable:
                problems.append(f"rule {rule.name!r}: {report.unsatisfiable}")
        if problems:
            raise CommandError(f"{len(problems)} problem(s): " + "; ".join(problems))
        self.stdout.write("ok: every rule can be satisfied")

    def _explain(self, workflow: str | None, subject: str | None, execution_id: str | None) -> None:
        execution = None
        if execution_id:
            try:
                execution = Execution.objects.get(pk=execution_id)
            except Execution.DoesNotExist:
                raise CommandError(f"no execution {execution_id}") from None
            workflow, subject = execution.workflow, execution_subject(execution)
        elif workflow is None or subject is None:
            raise CommandError("name a WORKFLOW and a SUBJECT, or --execution ID")
        rule = policy().rule_for(workflow, subject)
        self.stdout.write(f"{workflow} on {subject!r}: the rule {rule.name!r} ({policy().source})")
        self.stdout.write("\n".join(rule_report(rule).lines()[1:]))
        hook = (
            None
            if execution is None
            else Hook.objects.filter(execution=execution).awaiting_operator().first()
        )
        if execution is not None and hook is not None:
            standing = approval_standing(execution, hook, subject)
            self.stdout.write(f"its pending plan: {standing.summary()}")
            for principal, why in sorted(standing.shut_out.items()):
                self.stdout.write(f"  {principal} may not approve it: {why}")
            if standing.blocked:
                self.stdout.write(f"  it cannot be met: {standing.blocked}")
