"""Admin logins for people: ``alfred_user set NAME --role operator|viewer`` (the password is
read from the terminal, or from stdin with ``--password-stdin``), ``list``, ``deactivate``."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from alfred.principals import caller_of
from alfred.readonly import ReadOnlyInstance
from alfred.users import GROUPS, user_deactivate, user_set


class Command(BaseCommand):
    help = "Create admin logins for operators and viewers, change their role, deactivate them."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("set", help="create a login or change its role")
        create.add_argument("username")
        create.add_argument("--role", required=True, choices=[str(r) for r in GROUPS])
        create.add_argument("--password-stdin", action="store_true")
        create.add_argument("--keep-password", action="store_true", help="change the role only")
        sub.add_parser("list", help="every login and its role")
        off = sub.add_parser("deactivate", help="the login can no longer sign in")
        off.add_argument("username")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        try:
            if action == "set":
                password = None if options["keep_password"] else self._password(options)
                user = user_set(
                    username=options["username"], role=options["role"], password=password
                )
                self.stdout.write(f"{user.get_username()}: {options['role']}")
            elif action == "list":
                for user in get_user_model().objects.order_by("username"):
                    caller = caller_of(user)
                    role = caller.role if caller else "none"
                    state = "" if user.is_active else "\tinactive"
                    flag = "\tsuperuser" if user.is_superuser else ""
                    self.stdout.write(f"{user.get_username()}\t{role}{flag}{state}")
            elif action == "deactivate":
                if not user_deactivate(username=options["username"]):
                    raise CommandError(f"no login named {options['username']}")
                self.stdout.write(f"{options['username']}: deactivated")
        except ReadOnlyInstance as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None

    def _password(self, options: dict[str, Any]) -> str:
        if options["password_stdin"]:
            return sys.stdin.readline().rstrip("\n")
        if not sys.stdin.isatty():
            raise CommandError(
                "no terminal to ask for the password on: send it on stdin with "
                "--password-stdin, or change only the role with --keep-password"
            )
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("the passwords differ")
        return first
