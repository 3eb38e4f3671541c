"""``manage.py alfred_freezes list|declare|end|exempt``: change freezes from a shell, as the
operator ``cli:<actor>`` (``executions.freezes``; docs/runbook.md, "Change freezes").

- ``list`` prints the freezes, newest first, each with whether it is in force and what it
  holds now.
- ``declare --reason "…" [--from ISO] [--until ISO] [--workflow GLOB …] [--subject GLOB …]``
  declares one (from now, until it is ended, over every workflow and subject by default).
- ``end FREEZE [--reason "…"]`` ends one now: what it holds goes on.
- ``exempt FREEZE EXECUTION --reason "…"`` lets one execution through.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from alfred.principals import cli_actor, cli_caller
from alfred.readonly import ReadOnlyInstance
from alfred.text import reason_argument
from executions.freezes import (
    FreezeEnded,
    FreezeNotHolding,
    FreezeRefused,
    freeze_declare,
    freeze_end,
    freeze_exempt,
    freeze_state,
    held_executions,
)
from executions.models import Execution, Freeze
from executions.runtime.clock import db_now


def _moment(text: str) -> datetime:
    value = parse_datetime(text)
    if value is None or value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: an ISO 8601 time with its offset, e.g. 2026-12-24T00:00:00Z"
        )
    return value


class Command(BaseCommand):
    help = "Change freezes: list, declare, end, let one execution through."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("list", help="the freezes, newest first")
        declare = actions.add_parser("declare", help="declare a freeze")
        declare.add_argument("--reason", required=True, type=reason_argument(required=True))
        declare.add_argument("--from", dest="starts_at", type=_moment, help="default: now")
        declare.add_argument("--until", dest="ends_at", type=_moment, help="default: until ended")
        declare.add_argument("--workflow", dest="workflows", action="append", help="a glob; repeat")
        declare.add_argument("--subject", dest="subjects", action="append", help="a glob; repeat")
        end = actions.add_parser("end", help="end a freeze now")
        end.add_argument("freeze")
        end.add_argument("--reason", default="", type=reason_argument(required=False))
        exempt = actions.add_parser("exempt", help="let one execution through a freeze")
        exempt.add_argument("freeze")
        exempt.add_argument("execution")
        exempt.add_argument("--reason", required=True, type=reason_argument(required=True))
        for sub in (declare, end, exempt):
            sub.add_argument("--actor", type=cli_actor, help="who you are (default: the OS user)")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            self._list()
            return
        caller = cli_caller(options.get("actor"))
        try:
            if action == "declare":
                freeze = freeze_declare(
                    caller=caller,
                    reason=options["reason"],
                    starts_at=options["starts_at"],
                    ends_at=options["ends_at"],
                    workflows=options["workflows"] or ["*"],
                    subjects=options["subjects"] or ["*"],
                )
                self.stdout.write(f"{freeze.id}: declared; {_window(freeze)}")
            elif action == "end":
                freeze = freeze_end(
                    caller=caller, freeze_id=options["freeze"], reason=options["reason"]
                )
                self.stdout.write(f"{freeze.id}: ended; what it held goes on")
            else:
                freeze_exempt(
                    caller=caller,
                    freeze_id=options["freeze"],
                    execution_id=options["execution"],
                    reason=options["reason"],
                )
                self.stdout.write(f"{options['execution']}: let through {options['freeze']}")
        except Freeze.DoesNotExist:
            raise CommandError(f"no freeze {options['freeze']}") from None
        except Execution.DoesNotExist:
            raise CommandError(f"no execution {options['execution']}") from None
        except (FreezeRefused, FreezeEnded, FreezeNotHolding, ReadOnlyInstance) as exc:
            raise CommandError(str(exc)) from None

    def _list(self) -> None:
        now = db_now()
        for freeze in Freeze.objects.order_by("-starts_at")[:100]:
            state = freeze_state(freeze, now)
            held = [e.id for e in held_executions(freeze)] if state == "in force" else []
            self.stdout.write(
                f"{freeze.id}  {state.upper()}  {_window(freeze)}"
                f"  workflows {', '.join(freeze.workflows)}"
                f"  subjects {', '.join(freeze.subjects)}  — {freeze.reason}"
                + (f"\n  holds: {', '.join(held)}" if held else "")
            )


def _window(freeze: Freeze) -> str:
    end = "until ended" if freeze.ends_at is None else f"until {freeze.ends_at:%Y-%m-%d %H:%M}"
    ended = f" (ended {freeze.ended_at:%Y-%m-%d %H:%M})" if freeze.ended_at else ""
    return f"from {freeze.starts_at:%Y-%m-%d %H:%M} {end} UTC{ended}"
