"""``manage.py alfred_deploy_check [--allow-stranded REASON]``: the deploy gate. Every
migration step runs it before ``migrate`` (``make run``, the Helm pre-upgrade Job, compose's
web); docs/deploy.md, "The deploy gate".

It refuses (exit status 1) while an active execution's run started under a workflow
definition this code neither is nor keeps in ``previous``: deployed, that run would fail
``definition_changed`` at its next wake. It names each such execution and the three ways on:
drain them under the running code, keep their version in ``previous`` for this deploy, or go
on knowingly with ``--allow-stranded REASON`` (or ``ALFRED_DEPLOY_ALLOW_STRANDED=REASON`` in
the environment, for a step whose command line is fixed). With the override it lists them
and goes on (exit status 0); they fail ``definition_changed`` when they wake, and a retry runs
them under the new definition.

It also warns (and goes on) when a workflow's newest run was recorded under a version this
code does not serve: web processes still on the old code accept requests under it until the
rollout replaces them, and this code's workers will fail those runs.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.deploy_gate import runs_stranded, versions_dropped

OVERRIDE_ENV = "ALFRED_DEPLOY_ALLOW_STRANDED"


class Command(BaseCommand):
    help = "Refuse a deploy that would strand active runs under a workflow version it drops."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--allow-stranded",
            metavar="REASON",
            default="",
            help="go on although active runs would fail definition_changed, saying why (also "
            f"{OVERRIDE_ENV}=REASON)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        override = (options["allow_stranded"] or os.environ.get(OVERRIDE_ENV, "")).strip()
        for dropped in versions_dropped():
            self.stderr.write(
                f"warning: {dropped.workflow}'s newest run was recorded under version "
                f"{dropped.recorded.get('version')}, which this code no longer serves (it is "
                f"version {dropped.current['version']}): runs that web processes still on the "
                "old code accept during the rollout will fail definition_changed on the new "
                f"workers. Keep version {dropped.recorded.get('version')} in {dropped.workflow}'s "
                "`previous` for this deploy, or upgrade the workers before the web."
            )
        active, stranded = runs_stranded()
        if not stranded:
            self.stdout.write(
                f"deploy check: {active} active execution(s), every run served by this code"
            )
            return
        self.stderr.write(
            f"deploy check: {len(stranded)} of {active} active execution(s) started under a "
            "workflow definition this code neither is nor keeps; deployed, each would fail "
            "definition_changed at its next wake (an approval, a timer, a child's end):"
        )
        for run in stranded:
            self.stderr.write(f"  {run.describe()}")
        if override:
            self.stderr.write(
                f"going on: --allow-stranded / {OVERRIDE_ENV} given ({override}). Retry or roll "
                'back each execution above once it has failed (docs/runbook.md, "A deploy '
                'changed a workflow").'
            )
            return
        self.stderr.write(
            "What to do, before deploying again:\n"
            "  - drain: let them finish under the code that runs now (`manage.py "
            "alfred_executions list --awaiting approval` lists those waiting for you; approve "
            "or cancel them), then deploy;\n"
            "  - or keep each version above in its workflow's `previous` for this deploy "
            '(docs/runbook.md, "A deploy changed a workflow");\n'
            f"  - or go on knowingly: --allow-stranded REASON (or {OVERRIDE_ENV}=REASON); they "
            "fail definition_changed when they wake, and a retry runs them under the new "
            "definition."
        )
        raise CommandError(f"refused: {len(stranded)} active execution(s) would be stranded")
