"""Who is asking (docs/contract.md, "Authentication, roles and ownership"): a :class:`Caller` is a
stable principal id and a role.

- An API token's principal is ``ApiToken.principal_id`` (``prn_…``), minted when the token is
  created and carried over only by a rotation (``token_rotate``): a token created later
  under a name that was used before is a new principal and owns nothing of the old one's.
- An admin user's principal is ``user:<pk>``; their role comes from permissions, never from
  ``is_staff``: ``executions.operate`` makes an operator (the ``alfred-operators`` group),
  ``executions.view_execution`` on a staff user a viewer (``alfred-viewers``).
- A management command acts as ``cli:<actor>`` with the operator role: whoever can run it
  has the machine's authority already. The actor is ``--actor`` or else the OS user who ran
  it (``getpass.getuser()``); a shell with neither is refused rather than audited as nobody.

Roles: an integration triggers, and reads, cancels and retries what it owns; a viewer reads
everything and changes nothing; an operator may do everything.
"""

from __future__ import annotations

import argparse
import getpass
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import models
from django.db.models import CharField, OuterRef, Subquery, Value
from django.db.models.functions import Cast, Coalesce, Concat

OPERATE_PERMISSION = "executions.operate"
VIEW_PERMISSION = "executions.view_execution"
OPERATORS_GROUP = "alfred-operators"
VIEWERS_GROUP = "alfred-viewers"


class Role(models.TextChoices):
    INTEGRATION = "integration", "Integration"  # trigger; read, cancel, retry its own
    VIEWER = "viewer", "Viewer"  # read everything, change nothing
    OPERATOR = "operator", "Operator"  # everything: also approve, roll back, recover lanes


@dataclass(frozen=True)
class Caller:
    principal: str  # the stable id executions, keys and audit entries are recorded under
    role: str
    name: str = ""  # for people: the token's or the user's name, in audit entries

    @property
    def operates(self) -> bool:
        return self.role == Role.OPERATOR

    @property
    def reads_all(self) -> bool:
        return self.role in (Role.OPERATOR, Role.VIEWER)

    def owns(self, principal: str) -> bool:
        return principal == self.principal

    def may_act_on(self, owner: str) -> bool:
        """Cancel, retry or continue an execution owned by ``owner``."""
        return self.operates or (self.role == Role.INTEGRATION and self.owns(owner))


def caller_of(user: Any) -> Caller | None:
    """The caller behind ``request.user`` (an ApiToken or a Django user), or None: anonymous,
    inactive, or a user without any Alfred permission."""
    if isinstance(user, _api_token()):
        return Caller(user.principal_id, user.role, user.name)
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    principal = f"user:{user.pk}"
    if user.has_perm(OPERATE_PERMISSION):
        return Caller(principal, Role.OPERATOR, user.get_username())
    if user.is_staff and user.has_perm(VIEW_PERMISSION):
        return Caller(principal, Role.VIEWER, user.get_username())
    return None


def _api_token() -> Any:
    """The token model, looked up in Django's registry when asked for: this module is
    imported before the models are loaded (a command's or a benchmark's caller), and the
    models import its roles."""
    return apps.get_model("alfred", "ApiToken")


def cli_actor(value: str) -> str:
    """An argparse type for a command's ``--actor``: a short printable name, audited as
    ``cli:<actor>``."""
    if not (0 < len(value) <= 100 and value.isprintable()):
        raise argparse.ArgumentTypeError("1–100 printable characters")
    return value


def cli_caller(actor: str | None = None) -> Caller:
    """The operator a management command acts as: ``actor`` (``--actor``), else the OS user.

    Raises :class:`~django.core.management.CommandError` when neither names anyone (no
    ``--actor`` and no login name in the environment or the password database)."""
    if actor is None:
        try:
            actor = cli_actor(getpass.getuser())
        except (OSError, KeyError, argparse.ArgumentTypeError):
            raise CommandError("say who you are with --actor NAME (no OS user to name)") from None
    return Caller(f"cli:{actor}", Role.OPERATOR, actor)


def principal_name(field: str) -> Any:
    """An expression for the name people know the principal in ``field`` by (an annotation
    of a changelist's rows, one query for the page): a user's username (``user:<pk>``), an
    API token's name (``prn_…``, its newest token's), else None. ``cli:<actor>`` and Alfred's
    own actors (``alfred:…``) are names already."""
    users = (
        get_user_model()
        .objects.annotate(principal=Concat(Value("user:"), Cast("pk", CharField())))
        .filter(principal=OuterRef(field))
    )
    tokens = _api_token().objects.filter(principal_id=OuterRef(field)).order_by("-created_at")
    return Coalesce(
        Subquery(users.values("username")[:1]),
        Subquery(tokens.values("name")[:1]),
        output_field=CharField(),
    )
