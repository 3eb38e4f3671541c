"""What an ArgoCD application runs, as a plain value read from its REST document (no httpx).

ArgoCD's REST API reports an application as ``GET /api/v1/applications/{name}``, a
``v1alpha1.Application``. :meth:`ApplicationStatus.from_application` reads the parts that say
what it runs — its sources, sync status and revision(s), health, and the current or last
operation (phase, revision(s), times, message, and the ``info`` that carries the identity of
the Alfred operation that requested it) — reading absent fields as ArgoCD's zero values.
:mod:`.assessment` judges such a status; :mod:`.adapter` fetches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

PROVIDER: Final = "argocd"

# The name of the sync request's ``infos`` item that carries the caller's operation identity.
OPERATION_INFO: Final = "alfred-operation"

RUNNING_PHASES: Final = frozenset({"Running", "Terminating"})
FAILED_PHASES: Final = frozenset({"Failed", "Error"})


@dataclass(frozen=True)
class Source:
    repo_url: str
    target_revision: str  # a branch, tag or commit; "" means HEAD
    path: str


@dataclass(frozen=True)
class ApplicationStatus:
    """The parts of a ``v1alpha1.Application`` that say what it runs."""

    name: str
    project: str
    sources: tuple[Source, ...]  # spec.source, or spec.sources of a multi-source application
    sync_status: str  # Synced | OutOfSync | Unknown
    sync_revision: str | None  # the revision the desired state was rendered from
    sync_revisions: tuple[str, ...]  # multi-source: one per source
    health_status: str  # Healthy | Progressing | Degraded | Suspended | Missing | Unknown
    health_message: str | None
    operation_running: bool  # an operation is requested or in progress
    # The current or last operation's phase; None if never, or requested and not yet started.
    operation_phase: str | None
    operation_revision: str | None  # syncResult.revision (or the running sync's target)
    operation_revisions: tuple[str, ...]
    operation_message: str | None
    operation_started_at: str | None  # RFC 3339, to the second (metav1.Time)
    operation_finished_at: str | None
    operation_info: tuple[dict[str, str], ...]  # the operation's info: [{name, value}]
    reconciled_at: str | None
    conditions: tuple[dict[str, str], ...]  # [{type, message}]: ComparisonError, SyncError...

    @property
    def repo_url(self) -> str | None:
        return self.sources[0].repo_url if self.sources else None

    @property
    def target_revision(self) -> str | None:
        return self.sources[0].target_revision if self.sources else None

    @property
    def path(self) -> str | None:
        return self.sources[0].path if self.sources else None

    def at_revision(self, revision: str) -> bool:
        return revision == self.sync_revision or revision in self.sync_revisions

    def operation_at(self, revision: str) -> bool:
        return revision == self.operation_revision or revision in self.operation_revisions

    @property
    def operation_identity(self) -> str | None:
        """The Alfred operation identity the current or last operation carries, if any."""
        return next(
            (item["value"] for item in self.operation_info if item["name"] == OPERATION_INFO),
            None,
        )

    @classmethod
    def from_application(cls, app: Mapping[str, Any]) -> ApplicationStatus:
        """Read an Application document; absent fields read as ArgoCD's zero values."""
        metadata = _obj(app.get("metadata"))
        spec = _obj(app.get("spec"))
        status = _obj(app.get("status"))
        sync = _obj(status.get("sync"))
        health = _obj(status.get("health"))
        state = _obj(status.get("operationState"))
        result = _obj(state.get("syncResult"))
        operation = app.get("operation")
        raw_sources = spec.get("sources") or ([spec["source"]] if spec.get("source") else [])
        sources = tuple(
            Source(
                repo_url=str(source.get("repoURL") or ""),
                target_revision=str(source.get("targetRevision") or ""),
                path=str(source.get("path") or source.get("chart") or ""),
            )
            for source in map(_obj, raw_sources)
        )
        phase = _str(state.get("phase"))
        running = bool(operation) or phase in RUNNING_PHASES
        # ArgoCD's server sets ``operation`` when it accepts a sync; the controller then replaces
        # operationState with the new operation's (Running). Until it does, operationState
        # still describes the previous operation: its phase and times are not this one's.
        previous = bool(operation) and phase not in RUNNING_PHASES
        # While a sync runs, its target is the requested operation's revision (ArgoCD's auto-sync
        # requests the resolved commit); once it ran, the result's. A sync that failed before it
        # produced a result (a manifest generation error) still names its target in the request.
        requested = _obj(_obj(operation if running and operation else state.get("operation")))
        wanted = _obj(requested.get("sync"))
        first, second = (wanted, result) if running else (result, wanted)
        op_revision = _str(first.get("revision")) or _str(second.get("revision"))
        op_revisions = tuple(first.get("revisions") or ()) or tuple(second.get("revisions") or ())
        return cls(
            name=str(metadata.get("name") or ""),
            project=str(spec.get("project") or "default"),
            sources=sources,
            sync_status=_str(sync.get("status")) or "Unknown",
            sync_revision=_str(sync.get("revision")),
            sync_revisions=tuple(str(r) for r in sync.get("revisions") or ()),
            health_status=_str(health.get("status")) or "Unknown",
            health_message=_str(health.get("message")),
            operation_running=running,
            operation_phase=None if previous else phase,
            operation_revision=op_revision,
            operation_revisions=tuple(str(r) for r in op_revisions),
            operation_message=None if previous else _str(state.get("message")),
            operation_started_at=None if previous else _str(state.get("startedAt")),
            operation_finished_at=None if previous else _str(state.get("finishedAt")),
            operation_info=tuple(
                {"name": str(item.get("name") or ""), "value": str(item.get("value") or "")}
                for item in map(_obj, requested.get("info") or ())
            ),
            reconciled_at=_str(status.get("reconciledAt")),
            conditions=tuple(
                {"type": str(c.get("type") or ""), "message": str(c.get("message") or "")}
                for c in map(_obj, status.get("conditions") or ())
            ),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON for handles and receipts."""
        data = asdict(self)
        data["sources"] = [asdict(source) for source in self.sources]
        for key in ("sync_revisions", "operation_revisions", "operation_info", "conditions"):
            data[key] = list(data[key])
        return data


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
