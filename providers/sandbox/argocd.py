"""An ArgoCD API server stand-in whose applications follow the head of their branch.

It serves the ``v1alpha1.Application`` documents of ArgoCD's REST API for applications
registered in-process (:meth:`ArgoCDStandIn.add_application`), each tracking a branch of a
repository whose head ``heads(repo, branch)`` reports, and rendering the directory ``path``
whose tree ``trees(repo, sha, path)`` reports (``make run`` wires both to the GitHub stand-in,
so an application converges on what was actually committed).

Behaviour, as with ``syncPolicy.automated`` and a Git webhook (no polling delay):

- Registered, the application runs its branch head: Synced, Healthy, last operation Succeeded.
- When the head moves to X without changing the tree at the application's ``path`` (``trees``
  reports the same tree SHA at X as at the revision the cluster runs), the refresh finds the
  live state equal to X's manifests: it is Synced at X at once, and no operation starts (the
  last operation stays the older one, whatever its outcome). Without ``trees``, or when either
  tree is unknown (``None``), every head move changes what it renders.
- When the head moves to X otherwise, a sync to X starts (``operation`` present,
  ``operationState.phase`` Running, health Progressing). For the first half of
  ``converge_delay`` it is OutOfSync (the resources are being applied), for the second half
  Synced at X but still Progressing and Running (waiting for the rollout). After
  ``converge_delay`` it is Synced at X, Healthy, no ``operation``, ``operationState`` Succeeded
  with ``syncResult.revision`` X.
- A head that moves during a sync is synced once that sync finishes. A revision whose sync
  failed is not retried automatically (ArgoCD's auto-sync skips it), only by a new commit or a
  manual sync.
- ``add_application(..., auto_sync=False)``: a moved head only makes it OutOfSync; ``POST
  /api/v1/applications/{name}/sync`` starts a sync, ``DELETE .../operation`` terminates it.
  The request's ``infos`` (``[{"name", "value"}]``) become the operation's ``info``, in
  ``operation.info`` and ``status.operationState.operation.info``, as ArgoCD's server copies
  ``ApplicationSyncRequest.infos`` into the ``Operation`` it sets.
- :meth:`ArgoCDStandIn.drift`: the live state drifts from the desired one (someone edited a
  resource in the cluster): OutOfSync at the same revision, still Healthy, the last operation
  unchanged. With auto-sync (``selfHeal``) a sync to the head starts; without, it stays
  OutOfSync until a sync succeeds.

Every operation ever started is kept for the tests (:meth:`ArgoCDStandIn.operations`), so a test
can count syncs, whether or not they succeeded.

Nothing runs in the background: every request computes the state from timestamps (``clock``),
so the state is monotonic and deterministic given the clock and the sequence of requests.

With ``state`` (``make run``'s ``.alfred/sandbox/argocd.json``) the applications, their
operations and history, and the resource versions are saved after every change and read back
at the next start (:mod:`providers.sandbox.state`): a sync running at a restart goes on from
its start time (wall clock), and an application keeps its uid.

Faithful edges: bearer auth (``Authorization: Bearer`` or the ``argocd.token`` cookie; 401 with
``{"error", "code": 16, "message"}`` otherwise); a missing application is 404 only to a query
that names a project (``?project=``) and 403 "permission denied" otherwise, as ArgoCD does so as
not to reveal which applications exist; an application in another project than the one named
is 403; a sync while an operation runs is 400 FailedPrecondition; terminating with no operation
is 400 "Unable to terminate operation. No operation is in progress".

Faults (``standin.faults.arm(operation, kind, ...)`` or ``POST /_sandbox/faults``). Operations:
``application:<name>`` (reading it, and its convergence), ``sync:<name>``,
``terminate:<name>``, ``applications`` (the list); ``*`` matches all. Kinds:

- ``never_converge`` (standing: it holds while armed; arm it with ``times=None``): a sync of
  that application never finishes — it stays Running and Progressing. With
  ``phase="Failed"`` (or ``"Error"``) it fails instead when it would have finished:
  ``operationState`` Failed with ``params["message"]`` (or ArgoCD's usual message), health
  Degraded, OutOfSync. Cleared, a held sync finishes at the next request.
- ``throttle``: 429 with ``Retry-After: params["retry_after"]`` (default 1).
- ``server_error``: answer ``params["status"]`` (default 502 Bad Gateway, as a proxy in front of
  ArgoCD does). With ``applied=True`` the request takes effect first (the proxy lost ArgoCD's
  answer); otherwise it does not.
- ``lose_response`` (all stand-ins): the request takes effect, its response is dropped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import unquote

from providers.sandbox.server import Request, Response, StandIn, _Lost
from providers.sandbox.state import StateFile

logger = logging.getLogger(__name__)

# The demo applications (``seed_demo``), named here so the launcher and configuration can
# refer to them.
APP_NGINX_INGRESS: Final = "nginx-ingress"
APP_MYSTIQUE: Final = "mystique"
APP_CALIPSO: Final = "calipso"
APP_NEXT_DEIMOS: Final = "next-deimos"
HELM_VALUES_REPO: Final = "platform/helm-values"
NGINX_BOOKING_REPO: Final = "platform/nginx-booking"
DEMO_APPLICATIONS: Final = (
    (APP_NGINX_INGRESS, HELM_VALUES_REPO, "charts/nginx"),
    (APP_MYSTIQUE, HELM_VALUES_REPO, "charts/mystique"),
    (APP_CALIPSO, NGINX_BOOKING_REPO, "calipso"),
    (APP_NEXT_DEIMOS, NGINX_BOOKING_REPO, "next-deimos"),
)

NEVER_CONVERGE: Final = "never_converge"
THROTTLE: Final = "throttle"
SERVER_ERROR: Final = "server_error"

NAMESPACE: Final = "argocd"
IN_CLUSTER: Final = "https://kubernetes.default.svc"
FAILED_PHASES: Final = frozenset({"Failed", "Error"})
SYNC_FAILED_MESSAGE: Final = "one or more synchronization tasks completed unsuccessfully"

# gRPC codes in ArgoCD's error bodies.
_UNAUTHENTICATED, _PERMISSION_DENIED, _NOT_FOUND = 16, 7, 5
_INVALID_ARGUMENT, _FAILED_PRECONDITION, _RESOURCE_EXHAUSTED = 3, 9, 8


@dataclass
class _Operation:
    revision: str
    started_at: float
    automated: bool
    phase: str = "Running"
    message: str = "one or more tasks are running"
    finished_at: float | None = None
    held_at: float | None = None  # the last time a never_converge fault held it open
    health_after: str = "Healthy"
    info: list[dict[str, str]] = field(default_factory=list)  # the sync request's infos


@dataclass
class _Application:
    name: str
    project: str
    repo: str
    branch: str
    path: str
    auto_sync: bool
    created_at: float
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    # The revision whose manifests the cluster runs: the last successful sync, or a later head
    # that renders the same (see _advance).
    live: str | None = None
    operation: _Operation | None = None  # the current or the last operation
    operations: list[_Operation] = field(default_factory=list)  # every one started, in order
    history: list[dict[str, Any]] = field(default_factory=list)
    seen_head: str | None = None
    drifted: bool = False  # the live state differs from the manifests of ``live``
    version: int = 1


class ArgoCDStandIn(StandIn):
    name = "argocd"

    def __init__(
        self,
        *,
        heads: Callable[[str, str], str | None],
        trees: Callable[[str, str, str], str | None] | None = None,
        token: str = "sandbox-token",  # noqa: S107 - a local stand-in's fixed token
        converge_delay: float = 3.0,
        host: str = "127.0.0.1",
        port: int = 0,
        repo_url_base: str = "https://github.com",
        clock: Callable[[], float] = time.time,
        state: StateFile | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self.heads = heads
        self.trees = trees
        self.token = token
        self.converge_delay = converge_delay
        self.repo_url_base = repo_url_base.rstrip("/")
        self.clock = clock
        self._apps: dict[str, _Application] = {}
        self._lock = threading.Lock()
        self._version = 0
        self._tree_cache: dict[tuple[str, str, str], str] = {}
        self._state = state
        saved = state.load() if state is not None else None
        if saved is not None:
            self._version = int(saved["version"])
            for app in saved["applications"]:
                restored = _application_from_json(app)
                self._apps[restored.name] = restored

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """The lock; on the way out, the state saved if anything changed under it (every
        change moves ``_version``: it is ArgoCD's resourceVersion)."""
        with self._lock:
            before = self._version
            try:
                yield
            finally:
                if self._state is not None and self._version != before:
                    self._state.save(
                        {
                            "version": self._version,
                            "applications": [_application_json(a) for a in self._apps.values()],
                        }
                    )

    # -- in-process helpers ----------------------------------------------------------------

    def add_application(
        self,
        name: str,
        *,
        repo: str,
        branch: str = "main",
        path: str,
        project: str = "default",
        auto_sync: bool = True,
    ) -> dict[str, Any]:
        """Register an application (``repo`` is ``owner/name``) running its branch head now."""
        with self._changing():
            now = self.clock()
            app = _Application(name, project, repo, branch, path, auto_sync, created_at=now)
            head = self._head(app)
            app.seen_head = head
            if head is not None:
                app.live = head
                app.operation = _Operation(
                    revision=head,
                    started_at=now,
                    automated=True,
                    phase="Succeeded",
                    message="successfully synced (all tasks run)",
                    finished_at=now,
                )
                app.operations.append(app.operation)
                self._record(app, app.operation)
            app.version = self._next_version()
            self._apps[name] = app
            return self._document(app, now)

    def application(self, name: str) -> dict[str, Any] | None:
        """The Application document as it is served now (None if not registered)."""
        with self._changing():
            app = self._apps.get(name)
            if app is None:
                return None
            now = self.clock()
            self._advance(app, now)
            return self._document(app, now)

    def drift(self, name: str) -> None:
        """The live state of ``name`` drifts from its manifests (a resource edited in the
        cluster): OutOfSync until a sync succeeds (auto-sync's selfHeal starts one)."""
        with self._changing():
            app = self._apps[name]
            self._advance(app, self.clock())
            app.drifted = True
            app.version = self._next_version()

    def remove_application(self, name: str) -> None:
        with self._changing():
            if self._apps.pop(name, None) is not None:
                self._next_version()

    def names(self) -> list[str]:
        with self._changing():
            return sorted(self._apps)

    def operations(self, name: str) -> list[dict[str, Any]]:
        """Every operation started on ``name`` (the registration's included), oldest first:
        revision, initiated_by (``automated`` or ``alfred``), phase, started_at, finished_at,
        info (the sync request's ``infos``)."""
        with self._changing():
            app = self._apps.get(name)
            if app is None:
                return []
            self._advance(app, self.clock())
            return [
                {
                    "revision": op.revision,
                    "initiated_by": "automated" if op.automated else "alfred",
                    "phase": op.phase,
                    "started_at": op.started_at,
                    "finished_at": op.finished_at,
                    "info": [dict(item) for item in op.info],
                }
                for op in app.operations
            ]

    def journal(self) -> dict[str, Any]:
        """Every operation started on each application (:meth:`operations`)."""
        return {"operations": {name: self.operations(name) for name in self.names()}}

    # -- requests --------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | _Lost:
        if not self._authenticated(request):
            message = (
                "invalid session: token signature is invalid"
                if request.headers.get("authorization") or "argocd.token=" in _cookie(request)
                else "no session information"
            )
            return _error(401, _UNAUTHENTICATED, message)
        parts = [unquote(part) for part in request.path.strip("/").split("/")]
        if parts[:3] != ["api", "v1", "applications"]:
            return _error(404, _NOT_FOUND, "Not Found")
        if len(parts) == 3 and request.method == "GET":
            return self._list(request)
        if len(parts) == 4 and request.method == "GET":
            return self._get(request, parts[3])
        if len(parts) == 5 and parts[4] == "sync" and request.method == "POST":
            return self._sync(request, parts[3])
        if len(parts) == 5 and parts[4] == "operation" and request.method == "DELETE":
            return self._terminate(request, parts[3])
        return _error(405 if len(parts) <= 5 else 404, 12, "Method Not Allowed")

    def _list(self, request: Request) -> Response | _Lost:
        if refused := self._refused("applications"):
            return refused
        projects = set(request.query.get("projects", []) + request.query.get("project", []))
        wanted = request.arg("name")
        with self._changing():
            now = self.clock()
            items = []
            for app in sorted(self._apps.values(), key=lambda a: a.name):
                if (projects and app.project not in projects) or (wanted and app.name != wanted):
                    continue
                self._advance(app, now)
                items.append(self._document(app, now))
            body = {"metadata": {"resourceVersion": str(self._version)}, "items": items}
        return self._deliver("applications", Response.json(200, body))

    def _get(self, request: Request, name: str) -> Response | _Lost:
        operation = f"application:{name}"
        if refused := self._refused(operation):
            return refused
        with self._changing():
            app = self._find(name, request.arg("project"))
            if isinstance(app, Response):
                return app
            now = self.clock()
            self._advance(app, now)
            document = self._document(app, now)
        return self._deliver(operation, Response.json(200, document))

    def _sync(self, request: Request, name: str) -> Response | _Lost:
        operation = f"sync:{name}"
        if refused := self._refused(operation):
            return refused
        body = request.json() if request.body else {}
        body = body if isinstance(body, dict) else {}
        with self._changing():
            app = self._find(name, body.get("project") or request.arg("project"))
            if isinstance(app, Response):
                return app
            now = self.clock()
            self._advance(app, now)
            if app.operation is not None and app.operation.phase == "Running":
                return _error(400, _FAILED_PRECONDITION, "another operation is already in progress")
            head = self._head(app)
            asked = str(body.get("revision") or app.branch)
            revision = head if asked in (app.branch, "HEAD") else asked
            if revision is None:
                return _error(
                    400,
                    _INVALID_ARGUMENT,
                    f"unable to resolve '{asked}' to a commit SHA in {self._repo_url(app)}",
                )
            if app.auto_sync and revision != head:
                return _error(
                    400,
                    _INVALID_ARGUMENT,
                    f"Cannot sync to {asked}: auto-sync currently set to {app.branch}",
                )
            info = _infos(body.get("infos"))
            if info is None:
                return _error(
                    400, _INVALID_ARGUMENT, "infos must be a list of {name, value} objects"
                )
            app.operation = _Operation(
                revision=revision, started_at=now, automated=False, info=info
            )
            app.operations.append(app.operation)
            app.version = self._next_version()
            document = self._document(app, now)
        return self._deliver(operation, Response.json(200, document))

    def _terminate(self, request: Request, name: str) -> Response | _Lost:
        operation = f"terminate:{name}"
        if refused := self._refused(operation):
            return refused
        with self._changing():
            app = self._find(name, request.arg("project"))
            if isinstance(app, Response):
                return app
            now = self.clock()
            self._advance(app, now)
            running = app.operation
            if running is None or running.phase != "Running":
                return _error(
                    400,
                    _INVALID_ARGUMENT,
                    "Unable to terminate operation. No operation is in progress",
                )
            running.phase, running.message = "Failed", "Operation terminated"
            running.finished_at = now
            app.version = self._next_version()
        return self._deliver(operation, Response.json(200, {}))

    # -- state -----------------------------------------------------------------------------

    def _advance(self, app: _Application, now: float) -> None:
        """Bring ``app`` up to ``now``: finish the running sync if it is due, refresh against
        the head, then start a sync to it if auto-sync calls for it. Bounded: each round
        finishes or starts one sync."""
        for _ in range(4):
            running = app.operation
            if running is not None and running.phase == "Running":
                if not self._finish(app, running, now):
                    return
                continue
            head = self._head(app)
            if head != app.seen_head:
                app.seen_head = head
                app.version = self._next_version()
            if head is not None and head != app.live and self._renders_same(app, head):
                # ArgoCD's refresh compares the live state with the head's manifests: equal, the
                # application is Synced at the head, and neither auto-sync nor anything else
                # starts an operation.
                app.live = head
                app.version = self._next_version()
                return
            failed_here = (
                running is not None and running.phase in FAILED_PHASES and running.revision == head
            )
            in_sync = head == app.live and not app.drifted
            if not app.auto_sync or head is None or in_sync or failed_here:
                return
            app.operation = _Operation(revision=head, started_at=now, automated=True)
            app.operations.append(app.operation)
            app.version = self._next_version()

    def _finish(self, app: _Application, running: _Operation, now: float) -> bool:
        due = running.started_at + self.converge_delay
        fault = self.faults.peek(f"application:{app.name}", NEVER_CONVERGE)
        phase = str(fault.params.get("phase") or "") if fault else ""
        if fault is not None and phase not in FAILED_PHASES:
            running.held_at = now  # it has been seen running until now: it finishes later
            return False
        # Never before a moment at which it was reported running.
        end = max(due, running.held_at or due)
        if now < end:
            return False
        running.finished_at = end
        if fault is not None:
            running.phase = phase
            running.message = str(fault.params.get("message") or SYNC_FAILED_MESSAGE)
            running.health_after = "Degraded"
        else:
            running.phase, running.message = "Succeeded", "successfully synced (all tasks run)"
            app.live = running.revision
            app.drifted = False
            self._record(app, running)
        app.version = self._next_version()
        return True

    def _record(self, app: _Application, done: _Operation) -> None:
        app.history.append(
            {
                "revision": done.revision,
                "deployedAt": _time(done.finished_at or done.started_at),
                "deployStartedAt": _time(done.started_at),
                "id": len(app.history),
                "source": self._source(app),
                "initiatedBy": _initiator(done),
            }
        )

    def _renders_same(self, app: _Application, head: str) -> bool:
        """Whether ``head`` has the same tree at ``app.path`` as the revision the cluster runs
        (False when that cannot be told: no ``trees``, the cluster runs nothing yet, an unknown
        tree)."""
        if self.trees is None or app.live is None:
            return False
        live = self._tree(self.trees, app, app.live)
        return live is not None and live == self._tree(self.trees, app, head)

    def _tree(
        self, trees: Callable[[str, str, str], str | None], app: _Application, sha: str
    ) -> str | None:
        key = (app.repo, sha, app.path)
        if key in self._tree_cache:  # a commit's trees never change
            return self._tree_cache[key]
        try:
            tree = trees(app.repo, sha, app.path)
        except Exception:
            logger.debug("argocd: no tree for %s@%s:%s", app.repo, sha, app.path, exc_info=True)
            return None
        if tree is not None:
            self._tree_cache[key] = tree
        return tree

    def _head(self, app: _Application) -> str | None:
        try:
            return self.heads(app.repo, app.branch)
        except Exception:  # a missing repository or branch: ArgoCD's ComparisonError
            logger.debug("argocd: no head for %s@%s", app.repo, app.branch, exc_info=True)
            return None

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    # -- documents -------------------------------------------------------------------------

    def _repo_url(self, app: _Application) -> str:
        return f"{self.repo_url_base}/{app.repo}.git"

    def _source(self, app: _Application) -> dict[str, Any]:
        return {"repoURL": self._repo_url(app), "path": app.path, "targetRevision": app.branch}

    def _document(self, app: _Application, now: float) -> dict[str, Any]:
        head = app.seen_head
        op = app.operation
        running = op is not None and op.phase == "Running"
        applying = running and op is not None and now < op.started_at + self.converge_delay / 2
        # What the cluster runs: the running sync's revision once its resources are applied.
        applied = op.revision if running and op is not None and not applying else app.live
        # A running sync whose resources are applied has put the drifted ones back.
        drifted = app.drifted and not (running and not applying)
        synced = head is not None and applied == head and not drifted
        if running:
            health = "Progressing"
        elif op is not None and op.phase in FAILED_PHASES and app.live != head:
            # A failed sync leaves its mark until the cluster runs the head's manifests again
            # (a later head that renders what it runs).
            health = op.health_after
        elif app.live is None:
            health = "Missing"
        else:
            health = "Healthy"
        sync: dict[str, Any] = {
            "status": "Unknown" if head is None else ("Synced" if synced else "OutOfSync"),
            "comparedTo": {"source": self._source(app), "destination": self._destination(app)},
        }
        if head is not None:
            sync["revision"] = head
        status: dict[str, Any] = {
            "resources": [
                {
                    "group": "apps",
                    "version": "v1",
                    "kind": "Deployment",
                    "namespace": app.name,
                    "name": app.name,
                    "status": sync["status"],
                    "health": {"status": health},
                }
            ],
            "sync": sync,
            "health": {"status": health},
            "history": list(app.history),
            "reconciledAt": _time(now),
            "sourceType": "Helm" if app.path.startswith("charts/") else "Directory",
            "summary": {},
            "controllerNamespace": NAMESPACE,
        }
        if head is None:
            status["conditions"] = [
                {
                    "type": "ComparisonError",
                    "message": f"Failed to load target state: unable to resolve '{app.branch}' "
                    f"to a commit SHA in {self._repo_url(app)}",
                    "lastTransitionTime": _time(now),
                }
            ]
        if op is not None:
            state: dict[str, Any] = {
                "operation": self._operation(op),
                "phase": op.phase,
                "message": (
                    f"waiting for healthy state of apps/Deployment/{app.name}"
                    if running and not applying
                    else op.message
                ),
                "startedAt": _time(op.started_at),
            }
            if not applying:
                state["syncResult"] = {
                    "resources": [
                        {
                            "group": "apps",
                            "version": "v1",
                            "kind": "Deployment",
                            "namespace": app.name,
                            "name": app.name,
                            "status": "SyncFailed" if op.phase in FAILED_PHASES else "Synced",
                            "message": "deployment.apps/" + app.name + " configured",
                            "syncPhase": "Sync",
                        }
                    ],
                    "revision": op.revision,
                    "source": self._source(app),
                }
            if op.finished_at is not None:
                state["finishedAt"] = _time(op.finished_at)
            status["operationState"] = state
        spec: dict[str, Any] = {
            "source": self._source(app),
            "destination": self._destination(app),
            "project": app.project,
        }
        if app.auto_sync:
            spec["syncPolicy"] = {"automated": {"prune": True, "selfHeal": True}}
        document: dict[str, Any] = {
            "metadata": {
                "name": app.name,
                "namespace": NAMESPACE,
                "uid": app.uid,
                "resourceVersion": str(app.version),
                "generation": 1,
                "creationTimestamp": _time(app.created_at),
            },
            "spec": spec,
            "status": status,
        }
        if running and op is not None:
            document["operation"] = self._operation(op)
        return document

    def _destination(self, app: _Application) -> dict[str, str]:
        return {"server": IN_CLUSTER, "namespace": app.name}

    @staticmethod
    def _operation(op: _Operation) -> dict[str, Any]:
        operation: dict[str, Any] = {
            "sync": {"revision": op.revision, "syncStrategy": {"hook": {}}},
            "initiatedBy": _initiator(op),
            "retry": {},
        }
        if op.info:  # Operation.Info is ``json:"info,omitempty"``
            operation["info"] = [dict(item) for item in op.info]
        return operation

    # -- requests, helpers -----------------------------------------------------------------

    def _authenticated(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer ") and header[len("Bearer ") :].strip() == self.token:
            return True
        return f"argocd.token={self.token}" in _cookie(request).split("; ")

    def _find(self, name: str, project: str | None) -> _Application | Response:
        """The application, or ArgoCD's refusal: 404 only when the query names a project."""
        app = self._apps.get(name)
        if app is None:
            if project:
                return _error(404, _NOT_FOUND, f'applications.argoproj.io "{name}" not found')
            return _error(403, _PERMISSION_DENIED, "permission denied")
        if project and project != app.project:
            return _error(403, _PERMISSION_DENIED, "permission denied")
        return app

    def _refused(self, operation: str) -> Response | None:
        """A fault that answers before the request takes effect: throttle, or a server error
        that is not ``applied``."""
        fault = self.faults.take(operation, THROTTLE)
        if fault is not None:
            retry_after = str(fault.params.get("retry_after", 1))
            return _error(
                429, _RESOURCE_EXHAUSTED, "too many requests", {"Retry-After": retry_after}
            )
        error = self.faults.peek(operation, SERVER_ERROR)
        if error is not None and not error.params.get("applied"):
            return self._server_error(operation)
        return None

    def _deliver(self, operation: str, response: Response) -> Response | _Lost:
        """``response`` to a request that took effect, unless an ``applied`` server error or a
        lost response is armed."""
        error = self.faults.peek(operation, SERVER_ERROR)
        if error is not None and error.params.get("applied"):
            return self._server_error(operation)
        return self.deliver(operation, response)

    def _server_error(self, operation: str) -> Response:
        fault = self.faults.take(operation, SERVER_ERROR)
        status = int(fault.params.get("status", 502)) if fault is not None else 502
        title = f"{status} {_phrase(status)}"
        return Response.text(
            status,
            f"<html><head><title>{title}</title></head><body>{title}</body></html>\n",
            "text/html",
        )


def seed_demo(standin: ArgoCDStandIn) -> dict[str, str]:
    """Register the demo applications (:data:`DEMO_APPLICATIONS`) that are not registered
    yet (a restart keeps those it had); returns name → source."""
    summary = {}
    registered = set(standin.names())
    for name, repo, path in DEMO_APPLICATIONS:
        if name not in registered:
            standin.add_application(name, repo=repo, path=path)
        summary[name] = f"{repo}:{path}"
    return summary


def _application_json(app: _Application) -> dict[str, Any]:
    document = asdict(app)
    # The current operation is the last one started (``operations[-1]``), or none yet.
    document["operation"] = app.operation is not None
    return document


def _application_from_json(document: dict[str, Any]) -> _Application:
    fields = dict(document)
    current = bool(fields.pop("operation"))
    fields["operations"] = [_Operation(**op) for op in fields["operations"]]
    app = _Application(**fields)
    app.operation = app.operations[-1] if current and app.operations else None
    return app


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response.json(status, {"error": message, "code": code, "message": message}, headers)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Server Error"


def _cookie(request: Request) -> str:
    return request.headers.get("cookie", "")


def _time(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _infos(value: Any) -> list[dict[str, str]] | None:
    """A sync request's ``infos`` (absent: none); None if it is not a list of objects with
    string ``name`` and ``value``."""
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    infos = []
    for item in value:
        if not isinstance(item, dict):
            return None
        name, val = item.get("name", ""), item.get("value", "")
        if not isinstance(name, str) or not isinstance(val, str):
            return None
        infos.append({"name": name, "value": val})
    return infos


def _initiator(op: _Operation) -> dict[str, Any]:
    return {"automated": True} if op.automated else {"username": "alfred"}
