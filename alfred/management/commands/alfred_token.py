from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from alfred.models import ApiToken, Role
from alfred.tokens import token_create, token_revoke


class Command(BaseCommand):
    help = "Create, list or revoke API tokens. A new token is printed once and never again."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a token and print it once")
        create.add_argument("--name", required=True)
        create.add_argument("--role", required=True, choices=Role.values)
        sub.add_parser("list", help="list tokens (never their secrets)")
        revoke = sub.add_parser("revoke", help="revoke the active token of that name")
        revoke.add_argument("--name", required=True)

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "create":
            try:
                token, raw = token_create(name=options["name"], role=options["role"])
            except IntegrityError:
                raise CommandError(
                    f"an active token named {options['name']!r} exists; revoke it first"
                ) from None
            self.stderr.write(f"created {token.id} ({token.role}); store it now, it is shown once:")
            self.stdout.write(raw)
        elif action == "list":
            for token in ApiToken.objects.order_by("name", "-created_at"):
                state = f"revoked {token.revoked_at:%Y-%m-%d}" if token.revoked_at else "active"
                self.stdout.write(f"{token.name}\t{token.role}\t{token.prefix}…\t{state}")
        elif action == "revoke":
            if not token_revoke(name=options["name"]):
                raise CommandError(f"no active token named {options['name']!r}")
            self.stdout.write(f"revoked {options['name']}")
