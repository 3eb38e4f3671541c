"""API token services: create (the secret is returned once), rotate, revoke, resolve."""

from __future__ import annotations

import hashlib
import re
import secrets
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from alfred.db import columns, instance, row_fetched
from alfred.ids import new_id
from alfred.models import TOKEN_NAME_MAX, ApiToken, Role
from alfred.readonly import writes_allowed

TOKEN_PREFIX = "alf_"  # noqa: S105 - marks our tokens (secret scanners), not a secret
# Letters, digits and . _ - @ : ; shown in listings and audit entries, so nothing exotic.
TOKEN_NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@:-]{{0,{TOKEN_NAME_MAX - 1}}}")


class TokenNameInvalid(ValueError):
    pass


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_name_check(name: str) -> str:
    if not TOKEN_NAME_RE.fullmatch(name):
        raise TokenNameInvalid(
            f"a token name is 1–{TOKEN_NAME_MAX} letters, digits or . _ - @ :, "
            "starting with a letter or a digit"
        )
    return name


def token_create(*, name: str, role: str, principal_id: str | None = None) -> tuple[ApiToken, str]:
    """A new token (and a new principal unless ``principal_id`` is given: rotations only)."""
    writes_allowed()
    token_name_check(name)
    if role not in Role.values:
        raise ValueError(f"role must be one of {', '.join(Role.values)}")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name,
        role=role,
        principal_id=principal_id or new_id("prn"),
        prefix=raw[:10],
        digest=_digest(raw),
    )
    return token, raw


def _name_lock(name: str) -> None:
    """Serialize the changes of one token name until the transaction ends. A row lock would
    not do: a rotation waiting on the active token's row wakes to find it revoked and the
    new one, created meanwhile, not locked — it would mint a new principal."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7231))", [name])


@transaction.atomic
def token_revoke(*, name: str) -> int:
    writes_allowed()
    _name_lock(name)
    return ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


@transaction.atomic
def token_rotate(*, name: str, role: str) -> tuple[ApiToken, str]:
    """Replace the active token of that name with a new secret that acts as the same
    principal (it keeps its executions and keys). With no active token, a new principal."""
    writes_allowed()
    _name_lock(name)
    active = ApiToken.objects.filter(name=name, revoked_at__isnull=True).first()
    token_revoke(name=name)
    return token_create(
        name=name, role=role, principal_id=active.principal_id if active is not None else None
    )


def token_resolve(raw: str) -> ApiToken | None:
    """The active token ``raw`` is, if any: every authenticated request asks, so by a
    prepared statement (alfred/db.py) rather than a query compiled each time."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 100:
        return None
    row = row_fetched(_resolve_sql(), [_digest(raw)])
    return None if row is None else instance(ApiToken, row)


@cache
def _resolve_sql() -> str:
    return (
        f"SELECT {columns(ApiToken, 't')} FROM {ApiToken._meta.db_table} t "  # noqa: S608
        "WHERE t.digest = %s AND t.revoked_at IS NULL"
    )
