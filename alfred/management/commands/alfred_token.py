from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from alfred.models import ApiToken, Role
from alfred.readonly import ReadOnlyInstance
from alfred.tokens import TokenNameInvalid, token_create, token_revoke, token_rotate


class Command(BaseCommand):
    help = (
        "Create, rotate, list or revoke API tokens. A new token is printed once and never "
        "again. A rotated token acts as the same principal (it keeps its executions); a token "
        "created under a name used before is a new principal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a token and print it once")
        create.add_argument("--name", required=True)
        create.add_argument("--role", required=True, choices=Role.values)
        rotate = sub.add_parser("rotate", help="replace the active token of that name")
        rotate.add_argument("--name", required=True)
        rotate.add_argument("--role", choices=Role.values, help="default: the current role")
        sub.add_parser("list", help="list tokens (never their secrets)")
        revoke = sub.add_parser("revoke", help="revoke the active token of that name")
        revoke.add_argument("--name", required=True)

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        try:
            self._handle(action, options)
        except (ReadOnlyInstance, TokenNameInvalid) as exc:
            raise CommandError(str(exc)) from None

    def _handle(self, action: str, options: dict[str, Any]) -> None:
        if action == "rotate":
            active = ApiToken.objects.filter(name=options["name"], revoked_at__isnull=True).first()
            if active is None:
                raise CommandError(f"no active token named {options['name']}; create one")
            token, raw = token_rotate(name=active.name, role=options["role"] or active.role)
            self._show(f"rotated {active.id} → {token.id}", raw)
        elif action == "create":
            try:
                token, raw = token_create(name=options["name"], role=options["role"])
            except IntegrityError:
                raise CommandError(
                    f"an active token named {options['name']} exists; rotate or revoke it"
                ) from None
            self._show(f"created {token.id} ({token.role})", raw)
        elif action == "list":
            for token in ApiToken.objects.order_by("name", "-created_at"):
                state = f"revoked {token.revoked_at:%Y-%m-%d}" if token.revoked_at else "active"
                self.stdout.write(
                    f"{token.name}\t{token.role}\t{token.principal_id}\t{token.prefix}…\t{state}"
                )
        elif action == "revoke":
            if not token_revoke(name=options["name"]):
                raise CommandError(f"no active token named {options['name']}")
            self.stdout.write(f"revoked {options['name']}")

    def _show(self, what: str, raw: str) -> None:
        """The sentence, then the secret on a line of its own, both on stdout and in that
        order however the streams are captured (``| tail -n1`` takes just the secret)."""
        self.stdout.write(f"{what}; store it now, it is shown once:")
        self.stdout.write(raw)
