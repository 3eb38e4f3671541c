"""``manage.py alfred_prune [--older-than 90d] [--archive DIR] [--dry-run]``: delete the
history (events, webhook deliveries and attempts, step receipts, timers) of executions that
ended more than the retention period ago (``ALFRED_RETENTION_DAYS`` by default), in short
batches, then the inbound notifications received before then; ``--archive DIR`` writes each
execution's history JSON there first. What stays, what is left for later and why:
``executions.retention`` and docs/runbook.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.principals import cli_actor, cli_caller
from alfred.readonly import ReadOnlyInstance
from executions.history import history_json
from executions.retention import (
    BATCH,
    DUTY,
    HistoryArchive,
    duration_parse,
    duration_text,
    executions_prune,
    prunable_preview,
    retention_period,
)


def _duration(text: str) -> Any:
    try:
        return duration_parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = "Delete the events, deliveries and receipts of executions ended long ago (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=_duration,
            default=None,
            help="ended more than this long ago: 90d, 36h, 15m (default: ALFRED_RETENTION_DAYS)",
        )
        parser.add_argument(
            "--archive",
            metavar="DIR",
            help="write each execution's history JSON to DIR/<id>.json before deleting it",
        )
        parser.add_argument(
            "--batch", type=int, default=BATCH, help=f"root executions per batch ({BATCH})"
        )
        parser.add_argument(
            "--duty",
            type=float,
            default=DUTY,
            help=f"the share of its time spent in batches, resting the rest ({DUTY}; 1: flat out)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="say how much is prunable; delete nothing"
        )
        parser.add_argument(
            "--actor", type=cli_actor, help="your name in the audit log (default: the OS user)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = options["older_than"]
        if older_than is None:  # (0s is a duration too: everything that has ended)
            older_than = retention_period()
        if options["batch"] < 1:
            raise CommandError("--batch: 1 or more")
        if not 0 < options["duty"] <= 1:
            raise CommandError("--duty: more than 0, at most 1")
        if options["dry_run"]:
            preview = prunable_preview(older_than)
            self.stdout.write(
                f"{preview['executions']} executions ended more than {duration_text(older_than)} "
                f"ago hold {preview['events']} events (with their children), and "
                f"{preview['notifications']} inbound notifications were received before then; "
                "nothing deleted"
            )
            return
        archive = None
        if options["archive"]:
            directory = Path(options["archive"])
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CommandError(f"--archive {directory}: {exc.strerror}") from None
            archive = HistoryArchive(directory, history_json)
        actor = cli_caller(options["actor"]).principal
        try:
            report = executions_prune(
                older_than=older_than,
                actor=actor,
                archive=archive,
                batch=options["batch"],
                duty=options["duty"],
            )
        except ReadOnlyInstance as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(report.summary())
