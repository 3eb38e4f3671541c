"""Set up the demo of `make run`: an operator login and an integration token, then print how
to reach everything. The demo token is rotated on every run (the previous one is revoked), so
exactly one demo token exists and the printed curl always works."""

from __future__ import annotations

import json
import os
import secrets
import shlex
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from alfred.embedded import state_dir
from alfred.models import Role
from alfred.readonly import ReadOnlyInstance, read_only
from alfred.tokens import token_rotate
from alfred.users import user_set

DEMO_USER = "operator"
DEMO_TOKEN = "demo-integration"  # noqa: S105 - a token name, not a secret


class Command(BaseCommand):
    help = "Create the demo operator login and rotate the demo integration token (dev only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "alfred_bootstrap sets up the development demo; in production create logins "
                "with alfred_user and tokens with alfred_token"
            )
        if read_only():
            raise CommandError(str(ReadOnlyInstance()))
        password = self._operator_password()
        _, raw = token_rotate(name=DEMO_TOKEN, role=Role.INTEGRATION)
        base = os.environ.get("ALFRED_LOCAL_URL", settings.ALFRED_PUBLIC_URL)
        # A name the seed does not have, new on every start: the curl creates a record and
        # runs to the end without an operator (an existing name would wait for approval).
        demo = f"demo-{secrets.token_hex(3)}"
        body = json.dumps({"zone": "example.com", "subdomain": demo, "ticket_ids": ["OPS-1"]})
        curl = " ".join(
            [
                "curl -sS -X POST",
                shlex.quote(f"{base}/api/v1/workflows/add-subdomain/executions"),
                "-H",
                shlex.quote(f"Authorization: Bearer {raw}"),
                "-H",
                shlex.quote("Content-Type: application/json"),
                "-H",
                shlex.quote(f"Idempotency-Key: {demo}"),
                "-d",
                shlex.quote(body),
            ]
        )
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"  Admin      {base}/admin/   (login: {DEMO_USER} / {password})",
                    f"  API docs   {base}/api/docs/",
                    f"  API token  {raw}   (integration; shown once, rotated each start)",
                    "",
                    "  Submit a workflow (under make run, once it says it is ready):",
                    f"  {curl}",
                    "",
                ]
            )
        )

    def _operator_password(self) -> str:
        """The demo operator's password is generated once and kept in the state directory, so
        it stays the same across restarts of `make run`."""
        path = Path(state_dir()) / "operator-password"
        if path.exists():
            password = path.read_text().strip()
        else:
            password = secrets.token_urlsafe(12)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(password + "\n")
            path.chmod(0o600)
        # An operator (the alfred-operators group), not a superuser: it can cancel, retry and
        # recover lanes, but not add users or switch off the beat schedule.
        user = get_user_model().objects.filter(username=DEMO_USER).first()
        keep = user is not None and user.check_password(password)
        user_set(username=DEMO_USER, role=Role.OPERATOR, password=None if keep else password)
        return password
