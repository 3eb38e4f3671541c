"""Contract: the ArgoCD adapter (providers/argocd/) against the stand-in or a real server.

Unmarked tests only read and run against a real ArgoCD too (ALFRED_CONTRACT_TARGET=real, see
tests/contract/fixtures/argocd.py); ``standin`` tests move branch heads or inject faults.
Waits are bounded polls, never a fixed sleep that hopes the stand-in is done. A state that only
lasts a while (a sync in progress) is asserted while ``never_converge`` holds it, or on the
manual-clock stand-in (``argocd_clocked``), never by hoping the next request comes soon enough.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import pytest

from providers.argocd import (
    OPERATION_FAILED,
    OPERATION_INFO,
    OPERATION_RUNNING,
    OUT_OF_SYNC,
    REVISION_MISMATCH,
    UNHEALTHY,
    ApplicationStatus,
    ArgoCD,
    Convergence,
    assess,
)
from providers.errors import NotFound, Rejected, Throttled, Transient
from providers.handles import StopUnsupported
from providers.sandbox.argocd import NEVER_CONVERGE, SERVER_ERROR, THROTTLE, ArgoCDStandIn
from tests.contract.fixtures.argocd import (
    CONVERGE_DELAY,
    ArgoCDTarget,
    ClockedArgoCD,
    ContractApp,
    ContractGit,
)

T = TypeVar("T")

SYNC_STATUSES = {"Synced", "OutOfSync", "Unknown"}
HEALTH_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
PHASES = {None, "Running", "Terminating", "Succeeded", "Failed", "Error"}


def wait_for(read: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 15.0) -> T:
    """Poll ``read`` until ``done`` holds; fail with the last value after ``timeout`` (generous:
    a passing test returns as soon as it holds, a loaded machine gets its time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"still not there after {timeout:.1f}s: {value!r}")
        time.sleep(CONVERGE_DELAY / 10)


def never_converged_while_running(observations: list[Convergence]) -> bool:
    return not any(c.converged and c.status.operation_running for c in observations)


def syncs_by_alfred(standin: ArgoCDStandIn, name: str) -> list[tuple[str, str]]:
    """(revision, phase) of every sync Alfred started on ``name``, as the stand-in saw them."""
    return [
        (op["revision"], op["phase"])
        for op in standin.operations(name)
        if op["initiated_by"] == "alfred"
    ]


def syncs_of(standin: ArgoCDStandIn, name: str, operation: str) -> list[tuple[str, str]]:
    """(revision, phase) of every sync started on ``name`` for ``operation`` (its ``infos``)."""
    tag = {"name": OPERATION_INFO, "value": operation}
    return [(op["revision"], op["phase"]) for op in standin.operations(name) if tag in op["info"]]


def new_operation() -> str:
    """An operation identity, as the engine gives a step (unique per step, stable on retry)."""
    return f"add-domain:{secrets.token_hex(8)}"


class TimePassesOnLoss(httpx.BaseTransport):
    """HTTP to the stand-in that runs ``on_loss`` when a response is lost, before the adapter
    sees the error: the time a client takes to notice a dead connection."""

    def __init__(self, on_loss: Callable[[], None]) -> None:
        self._inner = httpx.HTTPTransport()
        self._on_loss = on_loss

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._inner.handle_request(request)
        except httpx.TransportError:
            self._on_loss()
            raise

    def close(self) -> None:
        self._inner.close()


# -- reading -------------------------------------------------------------------------------


def test_application_reports_sync_health_operation_and_source(
    argocd_client: ArgoCD, argocd_app: ContractApp, argocd_target: ArgoCDTarget
) -> None:
    # Given an application (in the sandbox, a fresh one running its branch head)
    # When it is read
    status = argocd_client.application(argocd_app.name)

    # Then the normalized status carries ArgoCD's own words and the source it follows
    assert status.name == argocd_app.name
    assert status.sync_status in SYNC_STATUSES
    assert status.health_status in HEALTH_STATUSES
    assert status.operation_phase in PHASES
    assert status.sources and status.repo_url
    json.dumps(status.as_dict())
    if argocd_target.git is not None:
        head = argocd_target.git.head(argocd_app.repo or "", "main")
        assert (status.sync_status, status.sync_revision) == ("Synced", head)
        assert status.health_status == "Healthy"
        assert not status.operation_running
        assert (status.operation_phase, status.operation_revision) == ("Succeeded", head)
        assert status.repo_url == f"https://github.com/{argocd_app.repo}.git"
        assert (status.target_revision, status.path) == ("main", f"charts/{argocd_app.name}")
        assert argocd_client.converged(argocd_app.name, head or "").converged


def test_a_commit_the_application_never_saw_is_not_converged(
    argocd_client: ArgoCD, argocd_app: ContractApp
) -> None:
    # Given an application, and a commit it has never been compared against
    unseen = secrets.token_hex(20)

    # When its convergence on that commit is judged
    result = argocd_client.converged(argocd_app.name, unseen)

    # Then it is not converged, and the reason names the revision it is at
    assert not result.converged
    assert REVISION_MISMATCH in result.codes
    message = next(r.message for r in result.reasons if r.code == REVISION_MISMATCH)
    assert unseen in message


def test_a_missing_application_is_not_found(
    argocd_client: ArgoCD, argocd_target: ArgoCDTarget
) -> None:
    if argocd_target.project is None:
        pytest.skip("ArgoCD answers 404 only to a query naming a project: ALFRED_ARGOCD_PROJECT")
    # Given a project-scoped client, when an application that does not exist is read
    with pytest.raises(NotFound) as caught:
        argocd_client.application(f"alfred-missing-{secrets.token_hex(4)}")

    # Then NotFound, with ArgoCD's code and status kept
    assert caught.value.code == "NotFound"
    assert caught.value.details["http_status"] == 404
    assert not caught.value.retryable


def test_without_a_project_a_missing_application_is_permission_denied(
    argocd_target: ArgoCDTarget,
) -> None:
    # Given a client that names no project
    client = ArgoCD(argocd_target.url, argocd_target.token, verify=argocd_target.verify)
    name = f"alfred-missing-{secrets.token_hex(4)}"

    # When an application that does not exist is read
    with client, pytest.raises(Rejected) as caught:
        client.application(name)

    # Then ArgoCD's 403 (it hides which names exist), and the message says it may be missing
    assert caught.value.details["http_status"] == 403
    assert caught.value.code == "PermissionDenied"
    assert "does not exist" in caught.value.message


def test_a_bad_token_is_rejected(argocd_target: ArgoCDTarget, argocd_app: ContractApp) -> None:
    # Given a client with a token ArgoCD did not issue
    client = ArgoCD(argocd_target.url, "not-a-token", verify=argocd_target.verify, read_attempts=3)

    # When it reads an application
    with client, pytest.raises(Rejected) as caught:
        client.application(argocd_app.name)

    # Then Rejected at once (not retried: repeating cannot help), saying the token is the cause
    assert caught.value.details["http_status"] == 401
    assert caught.value.code == "Unauthenticated"
    assert "token" in caught.value.message
    assert "attempts" not in caught.value.details


def test_the_convergence_rule_on_argocd_documents() -> None:
    # Given Application documents as ArgoCD serves them
    x, older = "c" * 40, "b" * 40

    def application(**status: Any) -> ApplicationStatus:
        doc = {
            "metadata": {"name": "nginx-ingress"},
            "spec": {"project": "default", "source": {"repoURL": "r", "path": "p"}},
            "status": {
                "sync": {"status": "Synced", "revision": x},
                "health": {"status": "Healthy"},
                "operationState": {
                    "phase": "Succeeded",
                    "syncResult": {"revision": x},
                    "operation": {"sync": {"revision": x}},
                },
                **status,
            },
        }
        return ApplicationStatus.from_application(doc)

    # Then Synced at X, Healthy, idle, last sync Succeeded at X: converged
    assert assess(application(), x).converged
    # A commit that renders the same manifests starts no sync: Synced at X with the last
    # (successful) sync at an older commit is converged, not a wait without end
    unchanged = application(
        operationState={"phase": "Succeeded", "syncResult": {"revision": older}}
    )
    assert assess(unchanged, x).converged
    # A sync that applied everything but failed (a hook): not converged
    hook_failed = application(
        operationState={"phase": "Failed", "message": "PostSync hook failed"}
        | {"syncResult": {"revision": x}}
    )
    assert assess(hook_failed, x).codes == {OPERATION_FAILED}
    assert assess(hook_failed, x).failed
    # ...and X's failure is not the older commit's
    assert assess(hook_failed, older).codes == {REVISION_MISMATCH}
    assert not assess(hook_failed, older).failed
    # A sync at X that failed before it produced a result still names X: failed
    generation_failed = application(
        operationState={"phase": "Error", "message": "Manifest generation error"}
        | {"operation": {"sync": {"revision": x}}}
    )
    assert assess(generation_failed, x).codes == {OPERATION_FAILED}
    assert assess(generation_failed, x).failed
    # A failed sync at an OLDER commit, then X that renders what the cluster runs (no sync at
    # X): Synced at X, Healthy and idle is converged — the live state is X's manifests — and
    # the old failure is not X's
    old_failure = {"phase": "Failed", "message": "PostSync hook failed"} | {
        "syncResult": {"revision": older},
        "operation": {"sync": {"revision": older}},
    }
    moved_on = application(operationState=old_failure)
    assert assess(moved_on, x).converged
    assert not assess(moved_on, x).failed
    # ...while not Synced at X or not Healthy, the reasons are those, not the old failure
    assert assess(
        application(operationState=old_failure, health={"status": "Degraded"}), x
    ).codes == {UNHEALTHY}
    # Multi-source: X is one of status.sync.revisions
    multi = application(sync={"status": "Synced", "revisions": ["chart-1.2.3", x]})
    assert assess(multi, x).converged
    assert assess(multi, older).codes == {REVISION_MISMATCH}


# -- convergence (stand-in) ----------------------------------------------------------------


@pytest.mark.standin
def test_a_pushed_commit_is_synced_and_converges_at_exactly_that_head(
    argocd_client: ArgoCD, argocd_app: ContractApp, argocd_git: ContractGit
) -> None:
    # Given an application converged on its head A
    a = argocd_git.head(argocd_app.repo or "", "main") or ""
    assert argocd_client.converged(argocd_app.name, a).converged

    # When commit X lands on its branch
    x = argocd_git.push(argocd_app.repo or "")

    # Then it is first seen syncing, not converged, and saying so
    first = argocd_client.converged(argocd_app.name, x)
    assert not first.converged
    assert {OPERATION_RUNNING, OUT_OF_SYNC} <= first.codes
    assert first.status.operation_revision == x
    # ...and then converged on exactly X, never converged while the sync still ran
    seen: list[Convergence] = []

    def read() -> Convergence:
        seen.append(argocd_client.converged(argocd_app.name, x))
        return seen[-1]

    final = wait_for(read, lambda c: c.converged)
    assert never_converged_while_running(seen)
    status = final.status
    assert (status.sync_status, status.sync_revision, status.health_status) == (
        "Synced",
        x,
        "Healthy",
    )
    assert (status.operation_phase, status.operation_revision) == ("Succeeded", x)
    # ...and the older commit no longer counts as converged
    assert argocd_client.converged(argocd_app.name, a).codes == {REVISION_MISMATCH}


@pytest.mark.standin
def test_a_convergence_handle_is_json_and_finishes_ok(
    argocd_client: ArgoCD, argocd_app: ContractApp, argocd_git: ContractGit
) -> None:
    # Given a commit pushed to the application's branch
    x = argocd_git.push(argocd_app.repo or "")

    # When a workflow watches it, stores the handle as JSON and inspects it later
    watched = argocd_client.watch(argocd_app.name, x)
    stored = json.loads(json.dumps(watched))
    final = wait_for(lambda: argocd_client.inspect(stored), lambda h: h["done"])

    # Then it was waiting at first and ends done and ok, on that application at that commit
    assert (watched["kind"], watched["id"]) == ("convergence", f"{argocd_app.name}@{x}")
    assert (watched["done"], watched["status"]) == (False, "Waiting")
    assert watched["observations"]["reasons"]
    assert (final["done"], final["ok"], final["status"]) == (True, True, "Converged")
    assert final["observations"]["status"]["sync_revision"] == x
    with pytest.raises(StopUnsupported):
        argocd_client.stop(final)


@pytest.mark.standin
def test_an_application_that_never_converges_keeps_waiting_with_its_reason(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a sync that will not finish
    env = argocd_clocked
    app = env.add()
    env.standin.faults.arm(f"application:{app.name}", NEVER_CONVERGE, times=None)

    # When a commit lands and well past the usual convergence delay has gone by
    x = env.git.push(app.repo or "")
    with env.client() as client:
        assert OPERATION_RUNNING in client.converged(app.name, x).codes
        env.clock.advance(3 * env.delay)
        held = client.inspect(client.watch(app.name, x))

        # Then it is still waiting, because the operation still runs and the rollout progresses
        assert (held["done"], held["ok"]) == (False, False)
        codes = {reason["code"] for reason in held["observations"]["reasons"]}
        assert {OPERATION_RUNNING, UNHEALTHY} <= codes
        assert held["observations"]["status"]["health_status"] == "Progressing"
        assert held["observations"]["status"]["operation_phase"] == "Running"

        # And once the cause is gone, it converges on X (at the next reading: it was due)
        env.standin.faults.clear()
        assert client.converged(app.name, x).converged


@pytest.mark.standin
def test_a_failed_sync_is_done_and_not_ok(argocd_clocked: ClockedArgoCD) -> None:
    # Given syncs of this application fail
    env = argocd_clocked
    app = env.add()
    env.standin.faults.arm(
        f"application:{app.name}",
        NEVER_CONVERGE,
        times=None,
        phase="Failed",
        message="Deployment.apps is invalid: spec.replicas: must be >= 0",
    )

    # When a commit lands and its sync has run
    x = env.git.push(app.repo or "")
    with env.client() as client:
        watched = client.watch(app.name, x)
        env.clock.advance(env.delay)
        final = client.inspect(watched)

        # Then the wait is over and not ok, saying why
        assert (watched["done"], final["done"]) == (False, True)
        assert (final["ok"], final["status"]) == (False, "Failed")
        reasons = {r["code"]: r["message"] for r in final["observations"]["reasons"]}
        assert {OPERATION_FAILED, UNHEALTHY, OUT_OF_SYNC} <= reasons.keys()
        assert "spec.replicas" in reasons[OPERATION_FAILED]
        assert final["observations"]["status"]["health_status"] == "Degraded"
        # ...and ArgoCD does not retry that commit, however long one waits
        env.standin.faults.clear()
        env.clock.advance(10 * env.delay)
        assert client.converged(app.name, x).failed
    assert [op["revision"] for op in env.standin.operations(app.name)].count(x) == 1


# -- errors on the wire (stand-in) ---------------------------------------------------------


@pytest.mark.standin
def test_a_throttled_read_is_retried(
    argocd_client: ArgoCD, argocd_app: ContractApp, argocd_standin: ArgoCDStandIn
) -> None:
    # Given ArgoCD (or its proxy) throttles the next read
    fault = argocd_standin.faults.arm(
        f"application:{argocd_app.name}", THROTTLE, times=1, retry_after=0
    )

    # When the application is read
    status = argocd_client.application(argocd_app.name)

    # Then the read was answered 429 once and retried
    assert fault.fired == 1
    assert status.name == argocd_app.name


@pytest.mark.standin
def test_persistent_throttling_surfaces_as_throttled_after_bounded_jittered_retries(
    argocd_target: ArgoCDTarget, argocd_app: ContractApp, argocd_standin: ArgoCDStandIn
) -> None:
    # Given every read is throttled with a Retry-After longer than the client's cap
    fault = argocd_standin.faults.arm(
        f"application:{argocd_app.name}", THROTTLE, times=None, retry_after=1
    )
    slept: list[float] = []
    client = ArgoCD(
        argocd_target.url,
        argocd_target.token,
        project=argocd_target.project,
        read_attempts=6,
        backoff=0.01,
        max_backoff=0.05,
        sleep=slept.append,
    )

    # When the application is read
    with client, pytest.raises(Throttled) as caught:
        client.application(argocd_app.name)

    # Then Throttled (retryable) after exactly the configured attempts
    assert fault.fired == 6 == caught.value.details["attempts"]
    assert caught.value.retryable
    assert caught.value.details["http_status"] == 429
    # ...each wait capped (Retry-After 1 s > max_backoff) and jittered, not in lock-step
    assert len(slept) == 5
    assert all(0.04 <= delay <= 0.05 for delay in slept), slept
    assert len(set(slept)) == len(slept)


@pytest.mark.standin
def test_exponential_read_backoff_is_bounded_and_jittered(
    argocd_target: ArgoCDTarget, argocd_app: ContractApp, argocd_standin: ArgoCDStandIn
) -> None:
    # Given every read fails with a 502 from a proxy (no Retry-After)
    argocd_standin.faults.arm(f"application:{argocd_app.name}", SERVER_ERROR, times=None)
    slept: list[float] = []
    client = ArgoCD(
        argocd_target.url,
        argocd_target.token,
        project=argocd_target.project,
        read_attempts=7,
        backoff=1.0,
        max_backoff=3.0,
        sleep=slept.append,
    )

    # When the application is read
    with client, pytest.raises(Transient) as caught:
        client.application(argocd_app.name)

    # Then Transient after the attempts, each wait in [half, all] of min(cap, 1 s * 2^n)
    assert caught.value.details["http_status"] == 502
    assert caught.value.details["attempts"] == 7
    ceilings = [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    assert all(c / 2 <= d <= c for c, d in zip(ceilings, slept, strict=True)), slept
    assert len(set(slept)) == len(slept)


@pytest.mark.standin
def test_a_lost_read_response_is_retried(
    argocd_client: ArgoCD, argocd_app: ContractApp, argocd_standin: ArgoCDStandIn
) -> None:
    # Given the response to the next read is lost on the way back
    fault = argocd_standin.faults.arm(f"application:{argocd_app.name}", "lose_response")

    # When the application is read
    status = argocd_client.application(argocd_app.name)

    # Then the read was repeated and answered
    assert fault.fired == 1
    assert status.sync_status == "Synced"


# -- sync and stop (stand-in) --------------------------------------------------------------


@pytest.mark.standin
def test_a_sync_of_a_manual_application_converges_on_the_commit(
    argocd_client: ArgoCD,
    argocd_manual_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given an application without auto-sync, and a commit on its branch
    name = argocd_manual_app.name
    x = argocd_git.push(argocd_manual_app.repo or "")
    waiting = argocd_client.converged(name, x)
    assert waiting.codes == {OUT_OF_SYNC}  # compared at X, but nothing syncs it
    assert argocd_client.refresh(name).sync_revision == x  # ?refresh=normal reads the same

    # When Alfred syncs it to X
    operation = new_operation()
    started = argocd_client.sync(name, x, operation=operation)
    final = wait_for(lambda: argocd_client.inspect(started), lambda h: h["done"])

    # Then the sync ran to success and the application converged on X, with one deployment
    assert (started["kind"], started["id"], started["done"]) == ("sync", f"{name}@{x}", False)
    assert (started["observations"]["operation"], started["observations"]["ours"]) == (
        operation,
        True,
    )
    assert (final["ok"], final["status"]) == (True, "Succeeded")
    assert argocd_client.converged(name, x).converged
    history = (argocd_standin.application(name) or {})["status"]["history"]
    assert [entry["revision"] for entry in history][-1:] == [x]
    assert history[-1]["initiatedBy"] == {"username": "alfred"}
    assert syncs_of(argocd_standin, name, operation) == [(x, "Succeeded")]


@pytest.mark.standin
def test_the_sync_request_carries_the_operation_identity_as_argocd_echoes_it(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given an application without auto-sync and a commit X
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.push(app.repo or "")
    operation = new_operation()

    # When Alfred syncs it to X
    with env.client() as client:
        client.sync(app.name, x, operation=operation)
        status = client.application(app.name)
    document = env.standin.application(app.name) or {}

    # Then the operation ArgoCD set, and its state, carry the identity in their info
    tag = [{"name": OPERATION_INFO, "value": operation}]
    assert document["operation"]["info"] == tag
    assert document["status"]["operationState"]["operation"]["info"] == tag
    assert status.operation_identity == operation


@pytest.mark.standin
def test_a_sync_whose_response_was_lost_is_recovered_not_repeated(
    argocd_client: ArgoCD,
    argocd_manual_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given the response to the sync request will be lost, and the sync holds (so it is still
    # running when the adapter reads back, however loaded the machine)
    name = argocd_manual_app.name
    x = argocd_git.push(argocd_manual_app.repo or "")
    lost = argocd_standin.faults.arm(f"sync:{name}", "lose_response")
    argocd_standin.faults.arm(f"application:{name}", NEVER_CONVERGE, times=None)
    deployments = len((argocd_standin.application(name) or {})["status"]["history"])

    # When Alfred syncs, and (a retried step) syncs again
    operation = new_operation()
    first = argocd_client.sync(name, x, operation=operation)
    again = argocd_client.sync(name, x, operation=operation)

    # Then the response was lost (once), and both name the one sync at X that started, which
    # converges as one deployment
    assert lost.fired == 1
    assert first["id"] == again["id"] == f"{name}@{x}"
    assert first["status"] == again["status"] == "Running"
    assert (
        first["observations"]["status"]["operation_started_at"]
        == again["observations"]["status"]["operation_started_at"]
    )
    argocd_standin.faults.clear()
    wait_for(lambda: argocd_client.inspect(again), lambda h: h["done"] and h["ok"])
    history = (argocd_standin.application(name) or {})["status"]["history"]
    assert len(history) == deployments + 1
    assert syncs_by_alfred(argocd_standin, name) == [(x, "Succeeded")]
    assert syncs_of(argocd_standin, name, operation) == [(x, "Succeeded")]


@pytest.mark.standin
def test_stopping_a_sync_terminates_its_operation(
    argocd_client: ArgoCD,
    argocd_manual_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given a sync to X that is running (and would not finish by itself)
    name = argocd_manual_app.name
    argocd_standin.faults.arm(f"application:{name}", NEVER_CONVERGE, times=None)
    x = argocd_git.push(argocd_manual_app.repo or "")
    started = argocd_client.sync(name, x, operation=new_operation())

    # When Alfred stops it (twice: a stop is safe to repeat)
    stopped = argocd_client.stop(started)
    again = argocd_client.stop(started)

    # Then the operation was terminated: the sync is over, not ok, and X is not converged
    assert (stopped["done"], stopped["ok"], stopped["status"]) == (True, False, "Failed")
    assert stopped["observations"]["status"]["operation_message"] == "Operation terminated"
    assert again["status"] == "Failed"
    assert OPERATION_FAILED in argocd_client.converged(name, x).codes


@pytest.mark.standin
def test_a_sync_while_another_operation_runs_is_refused_for_now(
    argocd_client: ArgoCD,
    argocd_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given the application is (auto-)syncing commit X and will not finish
    argocd_standin.faults.arm(f"application:{argocd_app.name}", NEVER_CONVERGE, times=None)
    x = argocd_git.push(argocd_app.repo or "")
    assert argocd_client.application(argocd_app.name).operation_revision == x

    # When Alfred asks for a sync to another commit, or to X itself
    y = argocd_git.push(argocd_app.repo or "")
    with pytest.raises(Transient) as to_y:
        argocd_client.sync(argocd_app.name, y, operation=new_operation())
    with pytest.raises(Transient) as to_x:
        argocd_client.sync(argocd_app.name, x, operation=new_operation())

    # Then refused for now (it ends on its own), naming the running operation: the auto-sync
    # to X is not Alfred's sync, even at the same commit, and it is neither adopted nor
    # disturbed
    assert x in to_y.value.message and x in to_x.value.message
    assert to_x.value.code == "OperationInProgress"
    status = argocd_client.application(argocd_app.name)
    assert (status.operation_phase, status.operation_revision) == ("Running", x)
    assert syncs_by_alfred(argocd_standin, argocd_app.name) == []


@pytest.mark.standin
def test_another_operations_running_sync_at_the_same_commit_is_not_adopted_or_stopped(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given Alfred's sync of X (operation A) succeeded; the application then drifted and
    # another step (operation B) started a sync of X that is still running
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.push(app.repo or "")
    a, b, c = new_operation(), new_operation(), new_operation()
    with env.client() as client:
        ours = client.sync(app.name, x, operation=a)
        env.clock.advance(env.delay)
        env.standin.drift(app.name)
        theirs = client.sync(app.name, x, operation=b)

        # When operation C asks for a sync of X, and operation A stops "its" sync
        with pytest.raises(Transient) as caught:
            client.sync(app.name, x, operation=c)
        stopped = client.stop(ours)

        # Then C is refused (B's sync is not C's), and A's stop leaves B's sync running
        assert b in caught.value.message
        assert (stopped["status"], stopped["done"], stopped["ok"]) == ("Superseded", True, False)
        assert client.inspect(theirs)["status"] == "Running"
        env.clock.advance(env.delay)
        assert client.inspect(theirs)["status"] == "Succeeded"
    assert syncs_of(env.standin, app.name, a) == [(x, "Succeeded")]
    assert syncs_of(env.standin, app.name, b) == [(x, "Succeeded")]
    assert syncs_of(env.standin, app.name, c) == []


@pytest.mark.standin
@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_a_sync_that_finished_before_its_lost_response_was_noticed_is_not_repeated(
    argocd_clocked: ClockedArgoCD, outcome: str
) -> None:
    # Given a manual application, a commit X, a lost response to the sync, and a sync that is
    # over (succeeded, or failed) by the time the adapter reads the application back
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.push(app.repo or "")
    lost = env.standin.faults.arm(f"sync:{app.name}", "lose_response")
    if outcome == "Failed":
        env.standin.faults.arm(
            f"application:{app.name}", NEVER_CONVERGE, times=None, phase="Failed"
        )
    transport = TimePassesOnLoss(lambda: env.clock.advance(env.delay))

    # When Alfred syncs, and (a retried step) syncs again
    operation = new_operation()
    with env.client(transport=transport) as client:
        first = client.sync(app.name, x, operation=operation)
        again = client.sync(app.name, x, operation=operation)
        convergence = client.converged(app.name, x)

    # Then the response was lost (once), and both are the one finished sync at X: ArgoCD ran
    # exactly one
    assert lost.fired == 1
    assert first["id"] == again["id"] == f"{app.name}@{x}"
    assert (first["status"], first["done"], first["ok"]) == (outcome, True, outcome == "Succeeded")
    assert (again["status"], again["done"]) == (outcome, True)
    assert syncs_of(env.standin, app.name, operation) == [(x, outcome)]
    assert syncs_by_alfred(env.standin, app.name) == [(x, outcome)]
    assert convergence.converged is (outcome == "Succeeded")
    assert convergence.failed is (outcome == "Failed")


def test_a_lost_sync_response_after_a_sync_that_succeeded_but_is_still_progressing() -> None:
    # Given ArgoCD (here a scripted transport) accepts the sync, loses the answer, and by the
    # read-back the sync Succeeded while the rollout is still Progressing (normal in ArgoCD:
    # a sync ends when its resources are applied and hooks ran, not when they are healthy)
    x, older = "d" * 40, "a" * 40
    posts: list[httpx.Request] = []
    state: dict[str, Any] = {
        "sync": "OutOfSync",
        "health": "Healthy",
        "phase": "Succeeded",
        "at": older,
        "info": [],
    }

    def serve(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request)
            infos = json.loads(request.content)["infos"]
            state.update(sync="Synced", health="Progressing", phase="Succeeded", at=x, info=infos)
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(
            200,
            json={
                "metadata": {"name": "web"},
                "spec": {"project": "default", "source": {"repoURL": "r", "path": "p"}},
                "status": {
                    "sync": {"status": state["sync"], "revision": x},
                    "health": {"status": state["health"]},
                    "operationState": {
                        "phase": state["phase"],
                        "syncResult": {"revision": state["at"]},
                        "operation": {"sync": {"revision": state["at"]}, "info": state["info"]},
                    },
                },
            },
        )

    client = ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve))

    # When Alfred syncs, and (a retried step) syncs again
    operation = new_operation()
    with client:
        first = client.sync("web", x, operation=operation)
        again = client.sync("web", x, operation=operation)
        convergence = client.converged("web", x)

    # Then one POST, carrying the identity: the sync is done and ok, and the convergence
    # waits for the rollout
    assert len(posts) == 1
    assert json.loads(posts[0].content)["infos"] == [{"name": OPERATION_INFO, "value": operation}]
    assert (first["status"], first["done"], first["ok"]) == ("Succeeded", True, True)
    assert again["status"] == "Succeeded"
    assert convergence.codes == {UNHEALTHY}
    assert not convergence.failed


@pytest.mark.parametrize("landed", ["ours", "another operation's", "an untagged one"])
def test_a_sync_refused_because_a_sync_landed_meanwhile_returns_it_only_if_it_is_ours(
    landed: str,
) -> None:
    # Given a sync request to X that lands between the adapter's read and its POST (here a
    # scripted transport), so ArgoCD refuses the POST as a second operation: an earlier
    # request of this operation that landed late, another operation's, or one without infos
    x = "e" * 40
    operation = new_operation()
    info = {
        "ours": [{"name": OPERATION_INFO, "value": operation}],
        "another operation's": [{"name": OPERATION_INFO, "value": new_operation()}],
        "an untagged one": [],
    }[landed]
    posts: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request)
            message = "another operation is already in progress"
            return httpx.Response(400, json={"error": message, "code": 9, "message": message})
        running = len(posts) > 0
        status: dict[str, Any] = {
            "sync": {"status": "OutOfSync", "revision": x},
            "health": {"status": "Progressing" if running else "Healthy"},
        }
        if running:
            status["operationState"] = {
                "phase": "Running",
                "startedAt": "2026-01-01T00:00:00Z",
                "operation": {"sync": {"revision": x}, "info": info},
            }
        return httpx.Response(
            200,
            json={"metadata": {"name": "web"}, "spec": {"project": "default"}, "status": status},
        )

    # When Alfred syncs
    with ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client:
        if landed != "ours":
            # Then the refusal is read back: another's sync is not adopted
            with pytest.raises(Transient):
                client.sync("web", x, operation=operation)
            assert len(posts) == 1
            return
        handle = client.sync("web", x, operation=operation)

    # Then the refusal is read back: the running operation is the sync to X it asked for
    assert len(posts) == 1
    assert (handle["id"], handle["status"], handle["done"]) == (f"web@{x}", "Running", False)


@pytest.mark.standin
def test_a_502_to_a_sync_that_took_effect_is_recovered_not_repeated(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a proxy that answers 502 after ArgoCD accepted the sync
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.push(app.repo or "")
    bad_gateway = env.standin.faults.arm(f"sync:{app.name}", SERVER_ERROR, applied=True)

    # When Alfred syncs, and (a retried step) syncs again
    operation = new_operation()
    with env.client() as client:
        first = client.sync(app.name, x, operation=operation)
        again = client.sync(app.name, x, operation=operation)
        env.clock.advance(env.delay)
        final = client.inspect(first)

    # Then the 502 was answered (once), read as ambiguous and resolved: one sync, running,
    # then succeeded
    assert bad_gateway.fired == 1
    assert first["status"] == again["status"] == "Running"
    assert (final["status"], final["done"], final["ok"]) == ("Succeeded", True, True)
    assert syncs_of(env.standin, app.name, operation) == [(x, "Succeeded")]
    assert syncs_by_alfred(env.standin, app.name) == [(x, "Succeeded")]


@pytest.mark.standin
def test_a_502_to_a_sync_that_did_not_take_effect_is_transient_and_a_retry_syncs_once(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a proxy that answers 502 without passing the sync on
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.push(app.repo or "")
    env.standin.faults.arm(f"sync:{app.name}", SERVER_ERROR)

    # When Alfred syncs
    operation = new_operation()
    with env.client() as client:
        with pytest.raises(Transient) as caught:
            client.sync(app.name, x, operation=operation)
        # Then Transient (read back: nothing started), so the step may be retried...
        assert caught.value.retryable
        assert caught.value.details["http_status"] == 502
        assert syncs_by_alfred(env.standin, app.name) == []
        # ...and the retry starts the one sync
        retried = client.sync(app.name, x, operation=operation)
    assert retried["status"] == "Running"
    assert syncs_of(env.standin, app.name, operation) == [(x, "Running")]


# -- which sync is Alfred's: the operation identity ---------------------------------------


@pytest.mark.standin
def test_a_drifted_application_with_an_old_succeeded_sync_at_the_commit_is_synced_again(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a manual application running X (its last operation: a sync of X that Succeeded)
    # whose live state then drifted: OutOfSync at X
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.head(app.repo or "", "main") or ""
    env.standin.drift(app.name)
    operation = new_operation()
    with env.client() as client:
        drifted = client.application(app.name)
        assert (drifted.sync_status, drifted.operation_phase) == ("OutOfSync", "Succeeded")
        assert drifted.operation_at(x)
        assert OUT_OF_SYNC in client.converged(app.name, x).codes

        # When a step syncs X, and (retried) syncs again
        started = client.sync(app.name, x, operation=operation)
        again = client.sync(app.name, x, operation=operation)
        env.clock.advance(env.delay)
        final = client.inspect(started)
        converged = client.converged(app.name, x)

    # Then the old sync is not taken for this one: exactly one new sync started, and ran
    assert (started["status"], started["done"]) == ("Running", False)
    started_at = started["observations"]["status"]["operation_started_at"]
    assert again["observations"]["status"]["operation_started_at"] == started_at
    assert (final["status"], final["done"], final["ok"]) == ("Succeeded", True, True)
    assert syncs_of(env.standin, app.name, operation) == [(x, "Succeeded")]
    assert converged.converged


@pytest.mark.standin
def test_a_reset_to_a_commit_whose_sync_failed_long_ago_is_synced_again(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a manual application whose sync of X (operation A) failed; the branch moved on to
    # Y, and days later was reset back to X
    env = argocd_clocked
    app = env.add(auto_sync=False)
    repo = app.repo or ""
    x = env.git.push(repo)
    a, b = new_operation(), new_operation()
    env.standin.faults.arm(f"application:{app.name}", NEVER_CONVERGE, times=None, phase="Failed")
    with env.client() as client:
        a_first_attempt = env.now()
        client.sync(app.name, x, operation=a, not_before=a_first_attempt)
        env.clock.advance(env.delay)
        assert client.converged(app.name, x).failed  # read while the fault holds: it failed
        env.standin.faults.clear()
        env.git.push(repo)
        env.clock.advance(3 * 24 * 3600)
        env.git.reset(repo, to=x)
        assert client.converged(app.name, x).failed  # the last operation is X's old failure

        # When operation A's step is retried, and a new step (operation B) syncs X
        retried = client.sync(app.name, x, operation=a, not_before=a_first_attempt)
        started = client.sync(app.name, x, operation=b, not_before=env.now())
        env.clock.advance(env.delay)
        final = client.inspect(started)

    # Then A's sync stays failed (not repeated), and B's is a new sync, which succeeds
    assert (retried["status"], retried["done"], retried["ok"]) == ("Failed", True, False)
    assert (started["status"], started["done"]) == ("Running", False)
    assert started["observations"]["not_before"] is not None
    assert (final["status"], final["done"], final["ok"]) == ("Succeeded", True, True)
    assert syncs_of(env.standin, app.name, a) == [(x, "Failed")]
    assert syncs_of(env.standin, app.name, b) == [(x, "Succeeded")]


@pytest.mark.standin
@pytest.mark.parametrize("fault", ["lose_response", SERVER_ERROR])
def test_after_an_ambiguous_answer_the_sync_is_found_by_its_identity_not_an_older_one(
    argocd_clocked: ClockedArgoCD, fault: str
) -> None:
    # Given a drifted manual application whose last operation is an old Succeeded sync at X,
    # and a sync request whose answer is lost (or a 502 after ArgoCD accepted it)
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.head(app.repo or "", "main") or ""
    env.standin.drift(app.name)
    armed = env.standin.faults.arm(f"sync:{app.name}", fault, applied=True)
    operation = new_operation()

    # When a step syncs X, and (retried) syncs again
    with env.client() as client:
        first = client.sync(app.name, x, operation=operation)
        again = client.sync(app.name, x, operation=operation)

    # Then the answer was lost (or a 502) once, and the read-back found this operation's sync,
    # running: exactly one started
    assert armed.fired == 1
    assert first["status"] == again["status"] == "Running"
    assert first["observations"]["ours"] is True
    assert syncs_of(env.standin, app.name, operation) == [(x, "Running")]
    assert syncs_by_alfred(env.standin, app.name) == [(x, "Running")]


@pytest.mark.standin
def test_a_502_that_did_not_take_effect_beside_an_older_sync_at_the_commit_is_transient(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given a drifted application whose last operation is an old Succeeded sync at X, and a
    # proxy that answers 502 without passing the sync on
    env = argocd_clocked
    app = env.add(auto_sync=False)
    x = env.git.head(app.repo or "", "main") or ""
    env.standin.drift(app.name)
    env.standin.faults.arm(f"sync:{app.name}", SERVER_ERROR)
    operation = new_operation()

    with env.client() as client:
        # When a step syncs X
        with pytest.raises(Transient) as caught:
            client.sync(app.name, x, operation=operation)
        # Then the old sync is no proof that this one started: Transient, nothing started...
        assert caught.value.details["operation"] == operation
        assert syncs_by_alfred(env.standin, app.name) == []
        # ...and the retry starts the one sync
        assert client.sync(app.name, x, operation=operation)["status"] == "Running"
    assert syncs_of(env.standin, app.name, operation) == [(x, "Running")]


def scripted_argocd(
    x: str, *, started_at: str, echo_infos: bool, info: list[dict[str, str]] | None = None
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    """A server (for httpx.MockTransport) on which a sync of X (with ``info``) succeeded at
    ``started_at`` and the application then drifted; a POST starts a sync whose answer is
    lost, at 2026-01-02T00:00:00Z. With ``echo_infos=False`` it drops the request's infos, as
    a server that does not echo them would."""
    posts: list[httpx.Request] = []
    state: dict[str, Any] = {"phase": "Succeeded", "startedAt": started_at, "info": info or []}

    def serve(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request)
            infos = json.loads(request.content).get("infos") if echo_infos else []
            state.update(phase="Running", startedAt="2026-01-02T00:00:00Z", info=infos)
            raise httpx.ReadError("connection reset by peer", request=request)
        operation = {"sync": {"revision": x}, "info": state["info"]}
        document: dict[str, Any] = {
            "metadata": {"name": "web"},
            "spec": {"project": "default", "source": {"repoURL": "r", "path": "p"}},
            "status": {
                "sync": {"status": "OutOfSync", "revision": x},
                "health": {"status": "Healthy"},
                "operationState": {
                    "phase": state["phase"],
                    "startedAt": state["startedAt"],
                    "syncResult": {"revision": x},
                    "operation": operation,
                },
            },
        }
        if state["phase"] == "Running":
            document["operation"] = operation
        return httpx.Response(200, json=document)

    return serve, posts


def test_without_echoed_infos_a_sync_started_since_not_before_is_taken_as_ours() -> None:
    # Given a server that drops the sync request's infos, an old sync of X (before the step's
    # first attempt), and a sync request whose answer is lost
    x = "f" * 40
    serve, posts = scripted_argocd(x, started_at="2025-12-01T00:00:00Z", echo_infos=False)
    operation = new_operation()

    # When the step (first attempt 2026-01-01T23:59:59.500Z) syncs X, and syncs again
    with ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client:
        first = client.sync(
            "web", x, operation=operation, not_before="2026-01-01T23:59:59.500+00:00"
        )
        again = client.sync(
            "web", x, operation=operation, not_before="2026-01-01T23:59:59.500+00:00"
        )

    # Then the old sync was not taken for this one (a POST), and the untagged sync that started
    # since (ArgoCD's startedAt is to the second) is: one POST
    assert len(posts) == 1
    assert (first["status"], again["status"]) == ("Running", "Running")
    assert first["observations"]["ours"] is True


def test_without_echoed_infos_or_not_before_an_untagged_sync_is_not_taken_as_ours() -> None:
    # Given a server that drops infos and a lost answer to the sync request
    x = "f" * 40
    serve, posts = scripted_argocd(x, started_at="2025-12-01T00:00:00Z", echo_infos=False)

    # When the step syncs X without not_before
    with (
        ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client,
        pytest.raises(Transient) as caught,
    ):
        client.sync("web", x, operation=new_operation())

    # Then nothing proves the running sync is this one: Transient (a retry then finds another
    # operation running: Transient again, not a second sync)
    assert len(posts) == 1
    assert "no sync of operation" in caught.value.message


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "another-operation"])
def test_an_operation_of_another_identity_is_never_ours_whatever_its_time(tagged: bool) -> None:
    # Given a sync of X that finished after the step's first attempt (not_before): untagged
    # (an auto-sync, a sync from the UI) or tagged with another operation's identity
    x = "f" * 40
    other = [{"name": OPERATION_INFO, "value": new_operation()}] if tagged else []
    serve, posts = scripted_argocd(
        x, started_at="2026-01-01T12:00:00Z", echo_infos=True, info=other
    )
    operation = new_operation()

    # When the step syncs X
    with ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client:
        handle = client.sync("web", x, operation=operation, not_before="2026-01-01T00:00:00Z")

    # Then the untagged one is taken as the step's (the fallback: a sync of X started since
    # the first attempt), the other operation's never is: a sync is started, and found again
    # after its lost answer by its identity
    assert len(posts) == (1 if tagged else 0)
    assert handle["status"] == ("Running" if tagged else "Succeeded")
    assert handle["observations"]["ours"] is True


@pytest.mark.parametrize("operation", ["", "  padded ", "two\nlines", "x" * 201, None])
def test_a_sync_without_a_valid_operation_identity_is_rejected(operation: Any) -> None:
    # Given a client (nothing is read or sent: the check comes first)
    requests: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    # When a sync names no usable operation identity, then Rejected, saying what it needs
    with (
        ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client,
        pytest.raises(Rejected) as caught,
    ):
        client.sync("web", "c" * 40, operation=operation)
    assert caught.value.code == "invalid_operation"
    assert "operation identity" in caught.value.message
    assert requests == []


@pytest.mark.parametrize("not_before", ["2026-01-01T00:00:00", "yesterday", 1_767_225_600])
def test_a_sync_with_a_not_before_that_is_not_an_aware_iso_time_is_rejected(
    not_before: Any,
) -> None:
    # When a sync's not_before is naive, unreadable or not a time, then Rejected, unsent
    transport = httpx.MockTransport(lambda request: httpx.Response(500))
    with (
        ArgoCD("https://argocd.test", "t", transport=transport) as client,
        pytest.raises(Rejected) as caught,
    ):
        client.sync("web", "c" * 40, operation=new_operation(), not_before=not_before)
    assert caught.value.code == "invalid_not_before"


def test_the_operation_identity_is_read_from_a_requested_or_a_recorded_operation() -> None:
    # Given ArgoCD documents: a sync requested (``operation`` set) that the controller has not
    # picked up yet (operationState is still the previous operation's), and one that ran
    x, older = "c" * 40, "b" * 40
    tag = [{"name": "other", "value": "v"}, {"name": OPERATION_INFO, "value": "step:1"}]
    requested = ApplicationStatus.from_application(
        {
            "operation": {"sync": {"revision": x}, "info": tag},
            "status": {
                "operationState": {
                    "phase": "Succeeded",
                    "startedAt": "2025-12-01T00:00:00Z",
                    "finishedAt": "2025-12-01T00:01:00Z",
                    "operation": {"sync": {"revision": older}},
                    "syncResult": {"revision": older},
                }
            },
        }
    )
    recorded = ApplicationStatus.from_application(
        {
            "status": {
                "operationState": {
                    "phase": "Failed",
                    "startedAt": "2026-01-01T00:00:00Z",
                    "operation": {"sync": {"revision": x}, "info": tag},
                    "syncResult": {"revision": x},
                }
            }
        }
    )

    # Then the requested one is running at X with its identity, and none of the previous
    # operation's phase or times; the recorded one carries its identity too
    assert requested.operation_running and requested.operation_at(x)
    assert requested.operation_identity == "step:1"
    assert (requested.operation_phase, requested.operation_started_at) == (None, None)
    assert requested.operation_finished_at is None
    assert recorded.operation_identity == "step:1"
    assert recorded.as_dict()["operation_info"] == tag
    assert ApplicationStatus.from_application({}).operation_identity is None


# -- commits that do not change what an application renders (stand-in) ---------------------


@pytest.mark.standin
def test_a_commit_that_does_not_change_the_application_is_synced_at_once_without_a_sync(
    argocd_client: ArgoCD,
    argocd_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given an application converged on its head A
    name, repo = argocd_app.name, argocd_app.repo or ""
    a = argocd_git.head(repo, "main") or ""
    before = argocd_standin.operations(name)

    # When a commit X lands that changes nothing under the application's path
    x = argocd_git.push(repo, changes=["docs/README.md"])
    watched = argocd_client.watch(name, x)

    # Then at the first reading it is converged on X: Synced at X, and no operation started
    # (the last one is still A's)
    assert (watched["done"], watched["ok"], watched["status"]) == (True, True, "Converged")
    status = argocd_client.application(name)
    assert (status.sync_status, status.sync_revision, status.health_status) == (
        "Synced",
        x,
        "Healthy",
    )
    assert (status.operation_phase, status.operation_revision) == ("Succeeded", a)
    assert argocd_standin.operations(name) == before

    # And a commit under its path is synced as before
    y = argocd_git.push(repo, changes=[f"{argocd_app.path}/values.yaml"])
    syncing = argocd_client.converged(name, y)
    assert OPERATION_RUNNING in syncing.codes
    assert syncing.status.operation_revision == y


@pytest.mark.standin
def test_a_sync_to_a_commit_that_renders_the_same_starts_nothing(
    argocd_client: ArgoCD,
    argocd_manual_app: ContractApp,
    argocd_git: ContractGit,
    argocd_standin: ArgoCDStandIn,
) -> None:
    # Given an application without auto-sync, and a commit outside its path
    name = argocd_manual_app.name
    x = argocd_git.push(argocd_manual_app.repo or "", changes=["charts/someone-else"])

    # When Alfred syncs it to X
    handle = argocd_client.sync(name, x, operation=new_operation())

    # Then there is nothing to sync: done and ok, and ArgoCD started no operation
    assert (handle["status"], handle["done"], handle["ok"]) == ("Synced", True, True)
    assert syncs_by_alfred(argocd_standin, name) == []
    assert argocd_client.converged(name, x).converged


@pytest.mark.standin
def test_after_a_failed_sync_a_commit_back_to_what_runs_converges(
    argocd_clocked: ClockedArgoCD,
) -> None:
    # Given an application on A whose sync of X failed (ArgoCD does not retry X)
    env = argocd_clocked
    app = env.add()
    repo = app.repo or ""
    a = env.git.head(repo, "main") or ""
    env.standin.faults.arm(f"application:{app.name}", NEVER_CONVERGE, times=None, phase="Failed")
    x = env.git.push(repo)
    with env.client() as client:
        assert OPERATION_RUNNING in client.converged(app.name, x).codes
        env.clock.advance(env.delay)
        assert client.converged(app.name, x).failed
        env.standin.faults.clear()

        # When the change is reverted: Y renders what the cluster runs (A's manifests)
        y = env.git.revert(repo, to=a)
        result = client.converged(app.name, y)

        # Then Y is converged at once, with no sync — the failed one at X is not Y's
        assert result.converged and not result.failed
        assert (result.status.operation_phase, result.status.operation_revision) == ("Failed", x)
        assert result.status.health_status == "Healthy"
        assert [op["revision"] for op in env.standin.operations(app.name)] == [a, x]
        # ...while X stays failed
        assert client.converged(app.name, x).failed


# -- handles -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "malformed",
    [
        {"provider": "argocd", "kind": "sync", "id": "no-revision"},
        {"provider": "argocd", "kind": "sync", "id": "@" + "c" * 40},
        {"provider": "argocd", "kind": "sync", "id": None},
        {"provider": "argocd", "kind": "sync"},
        # a sync handle without the operation whose sync it is
        {"provider": "argocd", "kind": "sync", "id": "app@" + "c" * 40, "observations": {}},
        {
            "provider": "argocd",
            "kind": "sync",
            "id": "app@" + "c" * 40,
            "observations": {"operation": "op", "not_before": "yesterday"},
        },
        {"provider": "argocd", "kind": "commit", "id": "app@" + "c" * 40},
        {"provider": "github", "kind": "sync", "id": "app@" + "c" * 40},
        {},
    ],
)
def test_a_malformed_handle_is_rejected(argocd_client: ArgoCD, malformed: Any) -> None:
    # Given a handle this adapter did not make (or one damaged in storage)
    # When it is inspected or stopped, then Rejected: repeating cannot help
    with pytest.raises(Rejected) as inspected:
        argocd_client.inspect(malformed)
    with pytest.raises(Rejected) as stopped:
        argocd_client.stop(malformed)
    assert inspected.value.code == stopped.value.code == "InvalidHandle"
    assert not inspected.value.retryable


def test_an_application_synced_at_the_revision_is_not_synced_again_while_still_progressing() -> (
    None
):
    # Given Alfred's sync of X ran, then another actor's (untagged) sync of X replaced it as
    # the last operation; the application is Synced at X but still rolling out (Progressing)
    x = "e" * 40
    posts: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request)
            return httpx.Response(200, json={})
        operation = {"sync": {"revision": x}, "info": []}
        return httpx.Response(
            200,
            json={
                "metadata": {"name": "web"},
                "spec": {"project": "default", "source": {"repoURL": "r", "path": "p"}},
                "status": {
                    "sync": {"status": "Synced", "revision": x},
                    "health": {"status": "Progressing"},
                    "operationState": {
                        "phase": "Succeeded",
                        "startedAt": "2026-01-01T00:00:00Z",
                        "syncResult": {"revision": x},
                        "operation": operation,
                    },
                },
            },
        )

    # When the step's retry syncs X again (its own receipt was lost)
    with ArgoCD("https://argocd.test", "t", transport=httpx.MockTransport(serve)) as client:
        handle = client.sync("web", x, operation=new_operation())
        waiting = client.watch("web", x)

    # Then nothing is sent: X is applied; the rollout is the convergence's to wait for
    assert posts == []
    assert (handle["status"], handle["done"], handle["ok"]) == ("Synced", True, True)
    assert (waiting["done"], waiting["ok"]) == (False, False)
