"""Whether an ArgoCD application has converged on a commit, and whose sync an operation is:
pure decisions over an :class:`~providers.argocd.model.ApplicationStatus` (no I/O).

**Converged on commit X** means all of:

- ``status.sync.status == "Synced"``: the live state equals the desired state. Without it the
  cluster still runs something else than the manifests ArgoCD rendered.
- ``status.sync.revision == X`` (for a multi-source application, X is one of
  ``status.sync.revisions``): the desired state it compared against was rendered from X.
  "Synced" alone may be about an older commit that ArgoCD has not yet replaced with X (it polls
  Git every few minutes unless a webhook tells it), so being Synced at an older revision is not
  being converged on X.
- ``status.health.status == "Healthy"``: the applied resources are up (Deployments rolled out,
  Pods ready). Synced-but-Progressing is a rollout still under way; Degraded, Missing or
  Suspended is not serving the change.
- no operation running: no ``operation`` field and ``status.operationState.phase`` neither
  ``Running`` nor ``Terminating``. A sync is Synced as soon as its resources are applied, then
  waits for them to be healthy and runs PostSync hooks; until it finishes, its result is open.
- the last operation *at X* did not fail: when ``operationState`` is about X
  (``syncResult.revision``, or the requested revision of a sync that failed before it produced
  a result), its phase is ``Succeeded``, not ``Failed`` or ``Error``. A sync can apply every
  resource (Synced, even Healthy) and still fail in a hook; that failure is X's.

The last operation is normally the sync *at X*. When a commit does not change what an
application renders, ArgoCD finds it Synced at X at once and starts no operation, so its last
operation stays an older one — successful or not. Synced at X, Healthy and idle is then the
evidence: the live state equals X's manifests, and an older operation's outcome (a failed sync
of a commit that X has since replaced) says nothing about X. Such an operation is therefore not
a reason; requiring an operation at X, or an older one's success, would wait forever on an
application that is serving X. Only a failed operation at X blocks, and it makes the wait
:attr:`Convergence.failed` (ArgoCD will not retry it).

Every condition is evaluated and reported separately (:class:`Reason`), so a workflow that is
still waiting can say why ("operation_running: Running: waiting for healthy state...").

**Which sync is Alfred's.** A sync is requested with the caller's operation identity in the
request's ``infos`` (``[{"name": "alfred-operation", "value": <operation>}]``,
``ApplicationSyncRequest.infos``); ArgoCD copies them into the operation it sets
(``operation.info``) and from there into ``status.operationState.operation.info``. The
current or last operation is *this* sync's when it is at the revision and carries this
identity. An operation at the revision that carries another identity, or none (an auto-sync, a
sync from the UI, a sync of another step), is not this sync's: a revision alone cannot tell a
sync Alfred started from an older one at the same commit (drift re-synced, a branch reset back
to a commit whose sync failed long ago). Fallback, for a server that does not echo ``infos``:
given ``not_before`` (the time of the step's first attempt), an operation at the revision that
carries *no* identity and started at or after it is taken as this sync's — nothing older can
be, and a sync of that commit started since is as good as ours. ArgoCD reports ``startedAt``
to the second, so the comparison is with ``not_before`` truncated to the second, and it
assumes Alfred's and ArgoCD's clocks agree to within the time between the step's first attempt
and its POST.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from providers.argocd.model import FAILED_PHASES, PROVIDER, ApplicationStatus
from providers.errors import Rejected

# Reason codes: stable strings (they land in receipts and events).
OUT_OF_SYNC: Final = "out_of_sync"
REVISION_MISMATCH: Final = "revision_mismatch"
UNHEALTHY: Final = "unhealthy"
OPERATION_RUNNING: Final = "operation_running"
OPERATION_FAILED: Final = "operation_failed"
MAX_OPERATION: Final = 200  # characters of an operation identity


@dataclass(frozen=True)
class Reason:
    """One convergence condition that does not hold, and what was observed instead."""

    code: str  # OUT_OF_SYNC, REVISION_MISMATCH, UNHEALTHY, OPERATION_RUNNING, OPERATION_FAILED
    message: str


@dataclass(frozen=True)
class Convergence:
    application: str
    revision: str
    status: ApplicationStatus
    reasons: tuple[Reason, ...] = field(default=())

    @property
    def converged(self) -> bool:
        return not self.reasons

    @property
    def codes(self) -> frozenset[str]:
        return frozenset(reason.code for reason in self.reasons)

    @property
    def failed(self) -> bool:
        """The sync at this revision failed and nothing is running: ArgoCD's auto-sync does not
        retry a revision whose sync failed, so this will not converge on its own."""
        status = self.status
        return (
            not status.operation_running
            and status.operation_phase in FAILED_PHASES
            and status.operation_at(self.revision)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "application": self.application,
            "revision": self.revision,
            "converged": self.converged,
            "failed": self.failed,
            "reasons": [asdict(reason) for reason in self.reasons],
            "status": self.status.as_dict(),
        }


@dataclass(frozen=True)
class SyncOwner:
    """The operation a sync belongs to: its identity, and the time of the step's first attempt
    (``not_before``) for servers that do not echo a sync request's ``infos``."""

    operation: str
    not_before: dt.datetime | None = None

    @classmethod
    def of(cls, operation: object, not_before: object = None) -> SyncOwner:
        """Checked: :class:`Rejected` (repeating cannot help) for an identity that is not one
        trimmed line of 1-:data:`MAX_OPERATION` characters, or a time that is not ISO 8601
        with a time zone."""
        if (
            not isinstance(operation, str)
            or not operation
            or operation != operation.strip()
            or len(operation) > MAX_OPERATION
            or any(ch in operation for ch in "\r\n")
        ):
            raise Rejected(
                "a sync needs the caller's operation identity: one trimmed line of "
                f"1-{MAX_OPERATION} characters, not {operation!r}",
                provider=PROVIDER,
                code="invalid_operation",
            )
        if not_before is None:
            return cls(operation)
        when = not_before
        if isinstance(when, str):
            try:
                when = dt.datetime.fromisoformat(when)
            except ValueError:
                when = None
        if not isinstance(when, dt.datetime) or when.tzinfo is None:
            raise Rejected(
                f"not_before must be an ISO 8601 time with a time zone, not {not_before!r}",
                provider=PROVIDER,
                code="invalid_not_before",
            )
        return cls(operation, when.astimezone(dt.UTC))

    def owns(self, status: ApplicationStatus, revision: str) -> bool:
        """Whether the current or last operation of ``status`` is this sync to ``revision``
        (see the module docstring)."""
        if not status.operation_at(revision):
            return False
        identity = status.operation_identity
        if identity is not None:
            return identity == self.operation
        if self.not_before is None:
            return False
        started = _instant(status.operation_started_at)
        return started is not None and started >= self.not_before.replace(microsecond=0)

    def as_dict(self) -> dict[str, Any]:
        not_before = self.not_before.isoformat() if self.not_before else None
        return {"operation": self.operation, "not_before": not_before}


def nothing_to_sync(current: Convergence) -> bool:
    """The live state already is the revision's manifests (Synced at it) and nothing runs: a
    sync would apply nothing. This also keeps a retried step from syncing again when its own
    sync ran but is no longer the last operation (ArgoCD keeps no ``info`` in its history)."""
    status = current.status
    return current.converged or (
        status.sync_status == "Synced"
        and status.at_revision(current.revision)
        and not status.operation_running
    )


def assess(status: ApplicationStatus, revision: str) -> Convergence:
    """Judge ``status`` against "converged on ``revision``" (see the module docstring)."""
    reasons: list[Reason] = []
    if status.sync_status != "Synced":
        detail = "; ".join(f"{c['type']}: {c['message']}" for c in status.conditions)
        reasons.append(
            Reason(
                OUT_OF_SYNC,
                f"sync status is {status.sync_status}" + (f" ({detail})" if detail else ""),
            )
        )
    if not status.at_revision(revision):
        observed = status.sync_revision or ", ".join(status.sync_revisions) or "no revision"
        reasons.append(Reason(REVISION_MISMATCH, f"compared at {observed}, not {revision}"))
    if status.health_status != "Healthy":
        reasons.append(
            Reason(
                UNHEALTHY,
                f"health is {status.health_status}"
                + (f": {status.health_message}" if status.health_message else ""),
            )
        )
    if status.operation_running:
        reasons.append(
            Reason(
                OPERATION_RUNNING,
                f"operation {status.operation_phase or 'requested'}"
                + (f" at {status.operation_revision}" if status.operation_revision else "")
                + (f": {status.operation_message}" if status.operation_message else ""),
            )
        )
    elif status.operation_phase in FAILED_PHASES and status.operation_at(revision):
        # A failed operation at another revision does not block: see the module docstring.
        reasons.append(
            Reason(
                OPERATION_FAILED,
                f"last operation {status.operation_phase}"
                + (f" at {status.operation_revision}" if status.operation_revision else "")
                + (f": {status.operation_message}" if status.operation_message else ""),
            )
        )
    return Convergence(status.name, revision, status, tuple(reasons))


def _instant(value: str | None) -> dt.datetime | None:
    """An RFC 3339 time from ArgoCD (``2026-01-01T00:00:00Z``); None if absent or unreadable."""
    if not value:
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
