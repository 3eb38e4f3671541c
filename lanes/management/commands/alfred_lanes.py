"""``manage.py alfred_lanes list|show|recover``: the concurrency lanes from a shell; a recovery
is audited as the operator ``cli:<actor>``. Its ``--reason`` is required and judged by the rule
of every face (``alfred.text.reason_problem``, as the API's and the admin's): a refusal is
argparse's usage error (exit status 2)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.principals import cli_actor, cli_caller
from alfred.readonly import ReadOnlyInstance
from alfred.text import reason_argument
from lanes.models import Lane
from lanes.selectors import lane_list, lane_queue
from lanes.services import LaneOwnerMismatch, lane_recover


class Command(BaseCommand):
    help = "List, show and recover concurrency lanes (recover is audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="every lane: state, owner, queue length")
        show = sub.add_parser("show", help="one lane and its queue")
        show.add_argument("key")
        recover = sub.add_parser("recover", help="release a lane to the next in line")
        recover.add_argument("key")
        recover.add_argument("--owner", required=True, help="the owner you expect (or 'none')")
        recover.add_argument(
            "--reason",
            type=reason_argument(required=True),
            required=True,
            help="why, for the audit log (the API's rule: alfred.text.reason_problem)",
        )
        recover.add_argument("--to", help="a queued execution to hand the lane to")
        recover.add_argument(
            "--actor", type=cli_actor, help="your name in the audit log (default: the OS user)"
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            for row in lane_list():
                self.stdout.write(
                    f"{row.key}\t{row.state}\t{row.owner_id or '-'}\t"
                    f"queued={row.queued_count}\t{row.reason}"  # type: ignore[attr-defined]
                )
        elif action == "show":
            lane = Lane.objects.filter(key=options["key"]).first()
            if lane is None:
                raise CommandError(f"no lane {options['key']!r}")
            self.stdout.write(
                f"{lane.key}: {lane.state}, owner {lane.owner_id or '-'}, "
                f"version {lane.version}; {lane.reason}"
            )
            for position, waiter in enumerate(lane_queue(lane.key), start=1):
                self.stdout.write(f"  {position}. {waiter.execution_id} ({waiter.token or '-'})")
        elif action == "recover":
            owner = None if options["owner"] == "none" else options["owner"]
            try:
                recovered = lane_recover(
                    key=options["key"],
                    expected_owner=owner,
                    actor=cli_caller(options["actor"]).principal,
                    reason=options["reason"],
                    to=options["to"],
                )
            except Lane.DoesNotExist:
                raise CommandError(f"no lane {options['key']!r}") from None
            except (LaneOwnerMismatch, ReadOnlyInstance) as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{options['key']}: released to {recovered.owner or 'nobody (free)'}")
