"""The ArgoCD adapter (httpx): reads an application, watches it converge on a commit, starts
and stops a sync, and maps ArgoCD's answers onto :mod:`providers.errors`.

Platform routing (docs/workflows.md) commits Helm values and then waits until the ArgoCD
applications that render them run that commit. This adapter reads an application into an
:class:`~providers.argocd.model.ApplicationStatus` and judges it with
:func:`~providers.argocd.assessment.assess`; :mod:`.assessment`'s docstring says what
"converged on commit X" means and which sync is Alfred's.

Waiting is handle-based (:mod:`providers.handles`): :meth:`ArgoCD.watch` returns a
``convergence`` handle and :meth:`ArgoCD.inspect` re-reads it; a workflow polls it durably with
``ctx.wait_until``. It is *done* when converged, or when the sync at X failed and ArgoCD will not
retry it on its own (auto-sync skips a revision whose sync failed), and *ok* only when converged.
:meth:`ArgoCD.sync` starts a sync for applications without auto-sync; :meth:`ArgoCD.stop`
terminates it.

Errors (:mod:`providers.errors`): 401 → Rejected (the token is missing, expired or wrong);
403 → Rejected (the token's account may not do this — or, when no ``project`` is configured,
the application does not exist: ArgoCD answers a missing application with 403 so as not to
reveal which names exist, and with 404 only to a query that names the project); 404 →
NotFound; 429 → Throttled; 5xx, timeouts and broken connections → Transient. Reads are retried
a bounded number of times with jittered, capped back-off (a GET changes nothing); a sync is never
repeated blindly: a 5xx or a lost response to it is ambiguous and resolved by reading the
application back (:meth:`ArgoCD.sync`). A malformed handle is :class:`Rejected`.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Self
from urllib.parse import quote

import httpx

from providers.argocd.assessment import Convergence, SyncOwner, assess, nothing_to_sync
from providers.argocd.model import OPERATION_INFO, PROVIDER, ApplicationStatus
from providers.budgets import budget_draw, budget_patient
from providers.errors import (
    Conflict,
    NotFound,
    ProviderError,
    Rejected,
    Throttled,
    Transient,
    Unknown,
)
from providers.handles import Handle, StopUnsupported, handle
from providers.observe import call_observed, outcome_of_status

# gRPC status codes, as ArgoCD's gateway puts them in error bodies ({"error", "code", "message"}).
_GRPC_CODES: Final = {
    2: "Unknown",
    3: "InvalidArgument",
    4: "DeadlineExceeded",
    5: "NotFound",
    6: "AlreadyExists",
    7: "PermissionDenied",
    8: "ResourceExhausted",
    9: "FailedPrecondition",
    10: "Aborted",
    13: "Internal",
    14: "Unavailable",
    16: "Unauthenticated",
}


class ArgoCD:
    """A synchronous client of one ArgoCD API server.

    ``project`` is the AppProject the applications Alfred waits on belong to. With it, every
    query names the project and a missing application is a :class:`NotFound`; without it,
    ArgoCD answers a missing application with 403 (so it is a :class:`Rejected` whose message
    says it may not exist).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        verify: bool | ssl.SSLContext = True,
        project: str | None = None,
        read_attempts: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.project = project
        self.read_attempts = max(1, read_attempts)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client or httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=_Observed(
                transport or httpx.HTTPTransport(verify=verify), account=base_url.rstrip("/")
            ),
        )

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -----------------------------------------------------------------------------

    def application(self, name: str) -> ApplicationStatus:
        """The application's current status (``GET /api/v1/applications/{name}``)."""
        return ApplicationStatus.from_application(self._get_application(name))

    def refresh(self, name: str) -> ApplicationStatus:
        """Ask ArgoCD to compare against Git now instead of at its next poll, and return the
        refreshed status (``GET ...?refresh=normal``: the server waits for the refresh)."""
        return ApplicationStatus.from_application(self._get_application(name, refresh="normal"))

    def converged(self, name: str, revision: str) -> Convergence:
        """Whether ``name`` has converged on commit ``revision``, and if not, why not."""
        return assess(self.application(name), revision)

    # -- handles ---------------------------------------------------------------------------

    def watch(self, name: str, revision: str) -> Handle:
        """A ``convergence`` handle on ``name`` reaching ``revision``, with its first reading.

        Nothing is started: the handle names what to wait for, so a workflow can store it in a
        receipt and :meth:`inspect` it from any process later."""
        return self._convergence_handle(self.converged(name, revision))

    def sync(
        self,
        name: str,
        revision: str,
        *,
        operation: str,
        not_before: str | dt.datetime | None = None,
    ) -> Handle:
        """Start a sync of ``name`` to ``revision`` on behalf of ``operation`` (the caller's
        operation identity), for applications that do not sync automatically; a ``sync``
        handle. ``not_before``: the ISO 8601 time of the step's first attempt, needed only for
        servers that do not echo the request's ``infos`` (see :mod:`.assessment`).

        At most one sync per operation: when the current or last operation is this one's
        (its identity, at ``revision``) — running or finished, whatever its outcome — it is
        returned instead of being started again, so a retried step never syncs twice and a
        sync of it that failed stays failed. An application already Synced at ``revision`` with
        nothing running needs no sync (a commit that renders the same; a sync of it that ran,
        perhaps this one's, superseded since as the last operation). Any other operation at
        ``revision`` — an older sync that succeeded before the application drifted, one that
        failed long before a branch was reset to ``revision``, an auto-sync — is not this
        one's: when it has finished, a sync is started; while it (or any other operation) runs,
        :class:`Transient` (``OperationInProgress``: it ends on its own; try again later).

        A lost response or a 5xx to the ``POST`` (a proxy may answer 502 after ArgoCD accepted
        it) is ambiguous: the application is read back. This operation's sync proves the
        request took effect; none proves it did not (ArgoCD sets an operation atomically with
        accepting the request), which is :class:`Transient`; an unreadable application is
        :class:`Unknown`. A missing or malformed ``operation`` or ``not_before`` is
        :class:`Rejected`."""
        owner = SyncOwner.of(operation, not_before)
        current = assess(self.application(name), revision)
        status = current.status
        if owner.owns(status, revision) or nothing_to_sync(current):
            return self._sync_handle(current, owner)
        if status.operation_running:
            # Another actor's operation ends on its own (or at the workflow's deadline): a
            # reason to try again later, not a state to give up on.
            raise Transient(
                f"application {name} is running another operation ({_describe(status)}), "
                f"not the sync of operation {operation}",
                provider=PROVIDER,
                code="OperationInProgress",
                details={"application": name, "revision": revision, "operation": operation},
            )
        path = f"/api/v1/applications/{quote(name, safe='')}/sync"
        body: dict[str, Any] = {
            "name": name,
            "revision": revision,
            "prune": False,
            "infos": [{"name": OPERATION_INFO, "value": operation}],
        }
        if self.project:
            body["project"] = self.project
        try:
            response = self._client.post(path, json=body)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            return self._recover_sync(name, revision, owner, exc)
        if response.status_code >= 500:
            error = self._error(response, name, action="sync")
            return self._recover_sync(name, revision, owner, error)
        if response.status_code >= 400:
            error = self._error(response, name, action="sync")
            if isinstance(error, Conflict | Transient):
                # "another operation is already in progress": it may be this very sync (an
                # earlier request of this operation that landed late), or someone else's.
                again = self.converged(name, revision)
                if owner.owns(again.status, revision):
                    return self._sync_handle(again, owner)
            raise error
        app = self._json(response, name)
        return self._sync_handle(assess(ApplicationStatus.from_application(app), revision), owner)

    def inspect(self, handle: Handle) -> Handle:
        """The current view of a ``convergence`` or ``sync`` handle (a new handle)."""
        name, revision = self._handle_target(handle)
        if handle["kind"] == "sync":
            owner = self._handle_owner(handle)
            return self._sync_handle(self.converged(name, revision), owner)
        return self._convergence_handle(self.converged(name, revision))

    def stop(self, handle: Handle) -> Handle:
        """Terminate the running sync a ``sync`` handle names
        (``DELETE /api/v1/applications/{name}/operation``), and return its state after.

        Only that operation's sync is terminated: another operation that runs (at any
        revision) is left alone. A sync that already finished stays as it finished. A
        ``convergence`` handle names no work of Alfred's to stop: :class:`StopUnsupported`."""
        name, revision = self._handle_target(handle)
        if handle["kind"] != "sync":
            raise StopUnsupported(f"argocd: a {handle['kind']} handle names nothing to stop")
        owner = self._handle_owner(handle)
        status = self.application(name)
        if not (status.operation_running and owner.owns(status, revision)):
            return self._sync_handle(assess(status, revision), owner)  # nothing of ours runs
        path = f"/api/v1/applications/{quote(name, safe='')}/operation"
        params = {"project": self.project} if self.project else None
        try:
            response = self._client.delete(path, params=params)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise Transient(
                f"terminating the operation of {name}: {exc}",
                provider=PROVIDER,
                code=type(exc).__name__,
                details={"application": name},
            ) from exc
        # 400 "No operation is in progress": it finished between our read and the DELETE.
        if response.status_code >= 400 and not _no_operation(response):
            raise self._error(response, name, action="terminate the operation of")
        return self._sync_handle(self.converged(name, revision), owner)

    # -- internals -------------------------------------------------------------------------

    def _get_application(self, name: str, *, refresh: str | None = None) -> dict[str, Any]:
        params: dict[str, str] = {}
        if self.project:
            params["project"] = self.project
        if refresh:
            params["refresh"] = refresh
        path = f"/api/v1/applications/{quote(name, safe='')}"
        return self._read(path, params, name)

    def _read(self, path: str, params: dict[str, str], name: str) -> dict[str, Any]:
        """GET with bounded retries of transient failures (honouring Retry-After, capped)."""
        for attempt in range(1, self.read_attempts + 1):
            try:
                try:
                    response = self._client.get(path, params=params)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    raise Transient(
                        f"reading application {name}: {type(exc).__name__}: {exc}",
                        provider=PROVIDER,
                        code=type(exc).__name__,
                        details={"application": name},
                    ) from exc
                if response.status_code >= 400:
                    raise self._error(response, name, action="read")
                return self._json(response, name)
            except Transient as exc:
                if attempt == self.read_attempts:
                    exc.details["attempts"] = attempt
                    raise
                self._sleep(self._delay(attempt, exc))
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, exc: Transient) -> float:
        """How long to wait before read attempt ``attempt + 1``: never more than
        ``max_backoff``, and jittered so that clients throttled together do not come back in
        step. A ``Retry-After`` is honoured up to ``max_backoff - backoff`` plus a random spread
        of up to ``backoff``; without one, exponential from ``backoff`` with equal jitter."""
        jitter = random.random()  # noqa: S311 - jitter, not a secret
        retry_after = exc.details.get("retry_after")
        if isinstance(retry_after, int | float):
            spread = min(self.backoff, self.max_backoff)
            return min(max(float(retry_after), 0.0), self.max_backoff - spread) + jitter * spread
        wait = min(self.max_backoff, self.backoff * 2 ** min(attempt - 1, 32))
        return wait * (0.5 + jitter / 2)

    def _json(self, response: httpx.Response, name: str) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise Rejected(
                f"ArgoCD answered {response.status_code} for application {name} with a body that "
                f"is not JSON ({response.headers.get('content-type', 'no content type')}): is the "
                "URL that of the ArgoCD API server?",
                provider=PROVIDER,
                code=str(response.status_code),
                details={"application": name, "http_status": response.status_code},
            )
        return body

    def _error(self, response: httpx.Response, name: str, *, action: str) -> ProviderError:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        body = body if isinstance(body, dict) else {}
        grpc = body.get("code")
        message = str(body.get("message") or body.get("error") or response.text or "").strip()
        message = message or response.reason_phrase
        code = _GRPC_CODES.get(grpc, str(status)) if isinstance(grpc, int) else str(status)
        details: dict[str, Any] = {"application": name, "http_status": status}
        if isinstance(grpc, int):
            details["grpc_code"] = grpc
        kwargs: dict[str, Any] = {"provider": PROVIDER, "code": code, "details": details}
        if status == 401:
            return Rejected(
                f"ArgoCD did not accept the bearer token (missing, expired or wrong) to {action} "
                f"application {name}: {message}",
                **kwargs,
            )
        if status == 403:
            if self.project:
                hint = f" in project {self.project}"
            else:
                hint = (
                    " (or it does not exist: without a project ArgoCD answers a missing "
                    "application with 403)"
                )
            return Rejected(
                f"permission denied: the token's account may not {action} application "
                f"{name}{hint}: {message}",
                **kwargs,
            )
        if status == 404:
            return NotFound(f"application {name} not found: {message}", **kwargs)
        if status == 429:
            retry_after = _retry_after(response)
            if retry_after is not None:
                details["retry_after"] = retry_after
            return Throttled(f"ArgoCD throttled {action} {name}: {message}", **kwargs)
        if status >= 500 or status == 408:
            return Transient(f"ArgoCD failed to {action} {name} ({status}): {message}", **kwargs)
        if "already in progress" in message:
            return Transient(f"cannot {action} {name} yet: {message}", **kwargs)
        if status == 409:
            return Conflict(f"cannot {action} {name}: {message}", **kwargs)
        return Rejected(f"cannot {action} {name} ({status}): {message}", **kwargs)

    def _recover_sync(self, name: str, revision: str, owner: SyncOwner, exc: Exception) -> Handle:
        """After an ambiguous answer to the sync ``POST`` (``exc``: a lost response or a 5xx):
        the sync handle if this operation's sync exists, running or finished (it can finish —
        or fail — before this read; a finished one is still the proof), or the application
        converged meanwhile; else :class:`Transient`. Another operation at ``revision`` is no
        proof: it is not this request's."""
        code = exc.code if isinstance(exc, ProviderError) else type(exc).__name__
        details: dict[str, Any] = {
            "application": name,
            "revision": revision,
            "operation": owner.operation,
        }
        if isinstance(exc, ProviderError) and "http_status" in exc.details:
            details["http_status"] = exc.details["http_status"]
        try:
            with budget_patient():  # a refused read would make it "unknown" for nothing
                current = self.converged(name, revision)
        except ProviderError as again:
            raise Unknown(
                f"the answer to syncing {name} to {revision} was lost or ambiguous ({exc}) and "
                f"the application could not be read back ({again})",
                provider=PROVIDER,
                code=code,
                details=details,
            ) from exc
        if owner.owns(current.status, revision) or nothing_to_sync(current):
            return self._sync_handle(current, owner)
        raise Transient(
            f"syncing {name} to {revision}: {exc}; read back, no sync of operation "
            f"{owner.operation} at {revision} started",
            provider=PROVIDER,
            code=code,
            details=details,
        ) from exc

    def _convergence_handle(self, current: Convergence) -> Handle:
        if current.converged:
            status, done = "Converged", True
        elif current.failed:
            status, done = current.status.operation_phase or "Failed", True
        else:
            status, done = "Waiting", False
        return handle(
            provider=PROVIDER,
            kind="convergence",
            id=f"{current.application}@{current.revision}",
            status=status,
            done=done,
            ok=current.converged,
            observations=current.as_dict(),
        )

    def _sync_handle(self, current: Convergence, owner: SyncOwner) -> Handle:
        state = current.status
        ours = owner.owns(state, current.revision)
        if ours and state.operation_running:
            status, done, ok = state.operation_phase or "Requested", False, False
        elif ours:
            # This sync is over; whether the application then stayed healthy is the
            # convergence's question (the observations carry it), not the sync's.
            status = state.operation_phase or "Unknown"
            done, ok = True, status == "Succeeded"
        elif nothing_to_sync(current):
            # Applied at the revision already (it renders the same, or a sync of it — perhaps
            # this one, superseded as the last operation — ran): whether it is healthy is the
            # convergence's question.
            status, done, ok = "Synced", True, True
        else:
            # The current or last operation is another one (ArgoCD runs one at a time): this
            # sync is over and a later operation replaced it, or what it found is not its own.
            status, done, ok = "Superseded", True, False
        return handle(
            provider=PROVIDER,
            kind="sync",
            id=f"{current.application}@{current.revision}",
            status=status,
            done=done,
            ok=ok,
            observations=current.as_dict() | owner.as_dict() | {"ours": ours},
        )

    @staticmethod
    def _handle_target(h: Handle) -> tuple[str, str]:
        """(application, revision) of a handle this adapter made; :class:`Rejected` otherwise
        (repeating with the same handle cannot help)."""
        if not isinstance(h, Mapping):
            raise Rejected(
                f"not a handle: {type(h).__name__}", provider=PROVIDER, code="InvalidHandle"
            )
        provider, kind, id_ = h.get("provider"), h.get("kind"), h.get("id")
        if provider != PROVIDER or kind not in {"convergence", "sync"}:
            raise Rejected(
                f"not an ArgoCD convergence or sync handle: provider {provider!r}, kind {kind!r}",
                provider=PROVIDER,
                code="InvalidHandle",
                details={"handle_provider": provider, "handle_kind": kind},
            )
        name, sep, revision = id_.rpartition("@") if isinstance(id_, str) else ("", "", "")
        if not sep or not name or not revision:
            raise Rejected(
                f"an ArgoCD handle id is <application>@<revision>, not {id_!r}",
                provider=PROVIDER,
                code="InvalidHandle",
                details={"handle_id": id_},
            )
        return name, revision

    @staticmethod
    def _handle_owner(h: Handle) -> SyncOwner:
        """The operation a ``sync`` handle's sync belongs to (its observations carry it)."""
        observations = h.get("observations")
        observations = observations if isinstance(observations, Mapping) else {}
        try:
            return SyncOwner.of(observations.get("operation"), observations.get("not_before"))
        except Rejected as exc:
            raise Rejected(
                f"an ArgoCD sync handle names the operation whose sync it is: {exc.message}",
                provider=PROVIDER,
                code="InvalidHandle",
                details={"handle_id": h.get("id")},
            ) from exc


def _describe(status: ApplicationStatus) -> str:
    """The current operation in a message: phase, revision, and whose it is if it says."""
    text = status.operation_phase or "requested"
    if status.operation_revision:
        text += f" at {status.operation_revision}"
    if status.operation_identity:
        text += f", operation {status.operation_identity}"
    return text


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _no_operation(response: httpx.Response) -> bool:
    try:
        body = json.loads(response.content or b"{}")
    except ValueError:
        return False
    message = str(body.get("message") or body.get("error") or "") if isinstance(body, dict) else ""
    return response.status_code == 400 and "No operation is in progress" in message


class _Observed(httpx.BaseTransport):
    """Reports each request to the observers (``providers.observe``): the operation is the
    method and the path, the application's name left out (``GET applications/{name}``)."""

    def __init__(self, inner: httpx.BaseTransport, *, account: str = "default") -> None:
        self.inner = inner
        self.account = account  # whose rate budget (providers.budgets): the server's

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.removeprefix("/api/v1/").split("/")
        if len(parts) > 1 and parts[0] == "applications":
            parts[1] = "{name}"
        operation = f"{request.method} {'/'.join(parts)}"
        budget_draw(PROVIDER, self.account, operation)
        sent = time.monotonic()
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError:
            call_observed(PROVIDER, operation, "transient", time.monotonic() - sent)
            raise
        outcome = outcome_of_status(response.status_code)
        call_observed(PROVIDER, operation, outcome, time.monotonic() - sent)
        return response

    def close(self) -> None:
        self.inner.close()
