"""GitOps moves for the workflows (docs/workflows.md, platform routing): read which of a domain's
entries a concern's files hold, commit the missing ones (ONE commit per concern, with its
receipt), and undo such a commit by removing exactly the entries it owns.

The repositories are ``repositories``'s, the concerns and their file formats
``providers.gitops``'s; this module only drives them.

A commit's receipt: ``resource = github.entries``, ``action = add``, ``before`` the domain's
entries already present (nobody's to remove), ``after`` the entries the commit owns (as its
``Alfred-Entry`` trailers list them), ``undo`` the role, the concern and the domain, and the
commit ``handle``. The operation identity is ``<execution>:<concern>``: a replay after a lost
response, a crash or in a later run of the execution finds the commit it already made (the
backend searches the branch down to the head the plan observed) instead of making a second.

The compensation removes, in one ``revert`` commit naming the original, those of the owned
entries still present; an entry added by hand, or by anyone after Alfred, is never touched,
and an owned entry someone already removed is not removed twice. So there is no state of the
files a revert could clobber: the only refusal is the editors' own (a file that no longer
parses is ``Rejected``, a FatalError).

A dry run gets a read-only repository (``repositories``) and :func:`simulate_commit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from executions.runtime.stage import StageContext
from providers.gitops import (
    KIRBY_ROUTING,
    NGINX_BOOKING,
    NGINX_HOSTS,
    Concern,
    add_domain,
    plan_domain,
    remove_owned,
)
from workflows.steps import argocd
from workflows.steps.compensations import mutation
from workflows.steps.errors import provider_errors
from workflows.steps.repositories import ROLE, repository

RESOURCE = "github.entries"
ADD = mutation(RESOURCE, "add")
CONCERNS: dict[str, Concern] = {c.scope: c for c in (NGINX_HOSTS, KIRBY_ROUTING, NGINX_BOOKING)}


def read_entries(scope: str, domain: str, *, dry_run: bool) -> dict[str, Any]:
    """Plan's read: the branch head and which of the domain's entries are present or missing
    there (the files validated). An unreadable repository, branch or file is a readiness
    failure ``routing_unavailable`` naming it."""
    with (
        repository(ROLE[scope], dry_run=dry_run) as (repo, branch),
        provider_errors(
            readiness="routing_unavailable", check=f"{scope} files of {repo.full_name}@{branch}"
        ),
    ):
        read = plan_domain(repo, CONCERNS[scope], domain, branch=branch)
    return {**read, "role": ROLE[scope]}


def read_head(scope: str) -> dict[str, str]:
    with repository(ROLE[scope], dry_run=False) as (repo, branch), provider_errors():
        return {"head": repo.head(branch), "branch": branch}


@ADD
def commit_entries(
    *, scope: str, domain: str, operation: str, since: str, present: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """Commit the domain's entries missing at the head of the concern's branch as ONE commit
    for ``operation`` (``noop`` when none is missing). ``since``: the head the plan observed,
    which bounds the search for an earlier attempt's commit. Safe to run again after any
    failure: the backend finds the commit it already made."""
    with repository(ROLE[scope], dry_run=False) as (repo, branch), provider_errors():
        handle = add_domain(
            repo, CONCERNS[scope], domain, branch=branch, operation=operation, since=since
        )
    return _receipt(scope, domain, present, dict(handle))


def simulate_commit(
    *,
    scope: str,
    domain: str,
    operation: str,
    since: str,
    present: Sequence[Mapping[str, str]],
    missing: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """What :func:`commit_entries` would record, without a call: the dry run's commit."""
    handle = {
        "provider": "github",
        "kind": "commit",
        "id": None,
        "status": "noop" if not missing else "simulated",
        "done": True,
        "ok": True,
        "observations": {"simulated": True, "entries": [dict(e) for e in missing]},
    }
    return {**_receipt(scope, domain, present, handle), "simulated": True}


def _receipt(
    scope: str, domain: str, present: Sequence[Mapping[str, str]], handle: dict[str, Any]
) -> dict[str, Any]:
    observations = handle.get("observations") or {}
    return ADD.receipt(
        undo={"role": ROLE[scope], "scope": scope, "domain": domain},
        before=[dict(e) for e in present],
        after=list(observations.get("entries") or []),
        handle=handle,
        sha=handle.get("id"),
        head=observations.get("head"),  # a noop's: the head at which nothing was missing
        repository=observations.get("repository"),
        branch=observations.get("branch"),
        subject=observations.get("subject"),
        recovered=bool(observations.get("recovered")),
    )


def revert_entries(*, scope: str, added: Mapping[str, Any], operation: str, since: str) -> Any:
    """The compensation's commit: remove the entries ``added`` (a commit handle) owns, where
    still present, in one ``revert`` commit naming it (``noop`` when none is left)."""
    with repository(ROLE[scope], dry_run=False) as (repo, _), provider_errors():
        handle = remove_owned(
            repo,
            CONCERNS[scope],
            added,  # type: ignore[arg-type]
            operation=operation,
            since=since,
        )
    observations = handle["observations"]
    return {
        "sha": handle["id"],
        "status": handle["status"],
        "removed": list(observations.get("entries") or []),
        "subject": observations.get("subject"),
        "recovered": bool(observations.get("recovered")),
    }


@ADD.undo
def undo_commit(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Compensate an add commit: a revert commit removing only what it owns, then (Helm
    concerns) the wait until the applications carrying the concern converge on it."""
    sha = receipt.get("sha")
    if receipt.get("simulated") or not sha:
        return {"reverted": None, "removed": [], "noop": True}
    scope = receipt["undo"]["scope"]
    head = ctx.step("head", read_head, scope)
    reverted = ctx.step(
        "revert",
        revert_entries,
        scope=scope,
        added=receipt["handle"],
        operation=f"{ctx.execution_id}:{scope}:revert:{sha[:12]}",
        since=head["head"],
    )
    converged = None
    if reverted["sha"] and argocd.applications_of(scope):
        converged = ctx.wait_until(
            "converged",
            lambda: argocd.converged_on(scope, reverted["sha"]),
            every=argocd.poll_seconds(),
            timeout=argocd.CONVERGE_TIMEOUT_SECONDS,
            wake_on=argocd.wake_topics(scope),
        )
    return {"reverts": sha, "reverted": reverted, "converged": converged}


def includes(scope: str, sha: str) -> dict[str, Any]:
    """Verify's read: is commit ``sha`` on the concern's branch (at or behind its head)?"""
    with repository(ROLE[scope], dry_run=False) as (repo, branch), provider_errors():
        return {"on_branch": repo.contains(branch, sha), "head": repo.head(branch)}
