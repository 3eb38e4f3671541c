"""``manage.py alfred_drift list|show|enrol|check``: the drift watch from a shell
(``executions.drift``; docs/runbook.md, "Drift").

- ``list [--all] [--workflow NAME]`` prints the open drifts (``--all``: every one, newest
  first), each with its execution, subject and what changed.
- ``show DRIFT`` prints one drift's findings: what the execution left, what is there.
- ``enrol`` watches every succeeded execution not watched yet, however long ago it succeeded
  (the watch itself enrols those that succeed from now on): after a workflow gained its check.
- ``check [EXECUTION] [--wait SECONDS]`` asks a worker to check one watched execution now,
  due or not, and prints what it found (the check runs where the providers' credentials are:
  on a worker consuming ``scanners``); without one, queues the watch's tick, as beat does.

Accepting a drift or starting its operation again are the execution's controls:
``alfred_executions accept_drift EXECUTION --reason "…"`` and ``alfred_executions redo EXECUTION``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.readonly import ReadOnlyInstance, writes_allowed
from executions.catalog import execution_subject
from executions.drift import drift_summary, watch_enrol
from executions.models import Drift, DriftStatus, DriftWatch
from executions.tasks import drift_check, drift_watch


class Command(BaseCommand):
    help = "The drift watch: list and show what it found, check now."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="the open drifts (--all: every one)")
        listing.add_argument("--all", action="store_true", help="ended ones too")
        listing.add_argument("--workflow", help="only this workflow's")
        show = actions.add_parser("show", help="one drift's findings")
        show.add_argument("drift")
        actions.add_parser(
            "enrol", help="watch every succeeded execution not watched yet, however old"
        )
        check = actions.add_parser("check", help="check one execution now, or queue a tick")
        check.add_argument("execution", nargs="?")
        check.add_argument("--wait", type=float, default=30.0, help="seconds (default 30)")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        try:
            self._handle(action, options)
        except ReadOnlyInstance as exc:
            raise CommandError(str(exc)) from None

    def _handle(self, action: str, options: dict[str, Any]) -> None:
        if action == "list":
            self._list(every=options["all"], workflow=options["workflow"])
        elif action == "show":
            self._show(options["drift"])
        elif action == "enrol":
            writes_allowed()
            total = 0
            while enrolled := watch_enrol(everything=True):
                total += enrolled
            self.stdout.write(f"enrolled {total}; each is checked within a period, spread over it")
        elif options["execution"]:
            self._check(options["execution"], options["wait"])
        else:
            writes_allowed()
            drift_watch.apply_async(queue="scanners")
            self.stdout.write(
                "the watch's tick is queued for a worker: what it finds shows in "
                "`alfred_drift list` (and each execution's page)"
            )

    def _check(self, execution_id: str, wait: float) -> None:
        writes_allowed()
        watch_enrol()
        watch = DriftWatch.objects.filter(pk=execution_id, retired_at__isnull=True).first()
        if watch is None:
            raise CommandError(
                f"{execution_id} is not watched: only a succeeded execution of a workflow with "
                "a drift check, not a dry run, still in force"
            )
        drift_check.apply_async(args=(execution_id,), queue="scanners")
        deadline = time.monotonic() + wait
        while (checked := DriftWatch.objects.get(pk=execution_id)).checks == watch.checks:
            if time.monotonic() >= deadline:
                raise CommandError(
                    f"no worker checked {execution_id} within {wait:g} s: is a worker "
                    "consuming the scanners queue running?"
                )
            time.sleep(0.2)
        said = f"{execution_id}: {checked.outcome}"
        self.stdout.write(said + (f" ({checked.error})" if checked.error else ""))
        self._open_of(execution_id)

    def _list(self, *, every: bool, workflow: str | None) -> None:
        drifts = Drift.objects.select_related("execution").order_by("-id")
        if not every:
            drifts = drifts.filter(status=DriftStatus.OPEN)
        if workflow:
            drifts = drifts.filter(execution__workflow=workflow)
        shown = list(drifts[:200])
        if not shown:
            self.stdout.write("no open drift" if not every else "no drift found yet")
            return
        for drift in shown:
            self.stdout.write(
                f"{drift.id}  {drift.status.upper():10}  {drift.execution_id}  "
                f"{drift.execution.workflow} {execution_subject(drift.execution)}  "
                f"{drift_summary(drift.findings)}  (since {drift.first_seen_at:%Y-%m-%d %H:%M}Z)"
            )

    def _show(self, drift_id: str) -> None:
        drift = Drift.objects.select_related("execution").filter(pk=drift_id).first()
        if drift is None:
            raise CommandError(f"no drift {drift_id}")
        self.stdout.write(
            f"{drift.id}: {drift.status} · {drift.execution_id} ({drift.execution.workflow} "
            f"{execution_subject(drift.execution)}) · seen {drift.first_seen_at:%Y-%m-%d %H:%M}Z"
            f" – {drift.last_seen_at:%Y-%m-%d %H:%M}Z"
        )
        if drift.ended_at:
            ended = f"  ended {drift.ended_at:%Y-%m-%d %H:%M}Z by {drift.ended_by}"
            self.stdout.write(ended + (f": {drift.reason}" if drift.reason else ""))
        for finding in drift.findings:
            self.stdout.write(f"  {finding['what']}")
            self.stdout.write(f"    expected: {json.dumps(finding['expected'], sort_keys=True)}")
            self.stdout.write(f"    found:    {json.dumps(finding['found'], sort_keys=True)}")
        if drift.status == DriftStatus.OPEN:
            self.stdout.write(
                f"Accept it: manage.py alfred_executions accept_drift {drift.execution_id} "
                f'--reason "…"; or start it again: manage.py alfred_executions redo '
                f"{drift.execution_id}"
            )

    def _open_of(self, execution_id: str) -> None:
        drift = Drift.objects.filter(execution_id=execution_id, status=DriftStatus.OPEN).first()
        if drift is not None:
            self._show(drift.id)
