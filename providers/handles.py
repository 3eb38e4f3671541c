"""Handles: the JSON evidence of provider work that was started.

Every operation that starts provider work (a Route53 change batch, an ACM request, an alias
update, a commit, a sync) returns a :class:`Handle`. It is plain JSON so a workflow stores it in
its step receipt as it is, and a later stage, a retry after a crash or an operator can pass it
back to the adapter's ``inspect(handle)`` (the provider's current view of that work) or, where
the provider allows, ``stop(handle)``.

``status`` is the provider's own word (``PENDING``/``INSYNC``, ``PENDING_VALIDATION``/
``ISSUED``, ``Successful``, a commit SHA's ``landed``...); ``done`` says whether the work has
reached a state it will not leave on its own, and ``ok`` whether that state is the one the
caller wanted. ``observations`` carries what was read back (records, versions, revisions).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypedDict


class Handle(TypedDict):
    provider: str  # the adapter: aws.route53, aws.acm, aws.lambda, github, argocd
    kind: str  # what was started: change, certificate, alias_update, commit, sync
    id: str | None  # the provider's id for it (change id, ARN, commit SHA); None if lost
    status: str
    done: bool
    ok: bool
    observations: dict[str, Any]
    observed_at: str  # ISO 8601, UTC


def handle(
    *,
    provider: str,
    kind: str,
    id: str | None,
    status: str,
    done: bool,
    ok: bool,
    observations: dict[str, Any] | None = None,
) -> Handle:
    return Handle(
        provider=provider,
        kind=kind,
        id=id,
        status=status,
        done=done,
        ok=ok,
        observations=observations or {},
        observed_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
    )


class StopUnsupported(Exception):
    """The provider cannot stop this kind of work once started (a Route53 change batch)."""
