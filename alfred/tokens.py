"""API token services: create (the secret is returned once), revoke, resolve."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from alfred.models import ApiToken, Role

TOKEN_PREFIX = "alf_"  # noqa: S105 - marks our tokens (secret scanners), not a secret


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(*, name: str, role: str) -> tuple[ApiToken, str]:
    if role not in Role.values:
        raise ValueError(f"role must be one of {', '.join(Role.values)}")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(name=name, role=role, prefix=raw[:10], digest=_digest(raw))
    return token, raw


def token_revoke(*, name: str) -> int:
    return ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


@transaction.atomic
def token_rotate(*, name: str, role: str) -> tuple[ApiToken, str]:
    """Revoke the active token of that name (if any) and create a new one."""
    token_revoke(name=name)
    return token_create(name=name, role=role)


def token_resolve(raw: str) -> ApiToken | None:
    if not raw.startswith(TOKEN_PREFIX):
        return None
    return ApiToken.objects.filter(digest=_digest(raw), revoked_at__isnull=True).first()
