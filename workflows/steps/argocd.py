"""ArgoCD moves for the workflows: which applications carry a routing concern, what they run
(plan's read), and the probe a durable wait polls until every one of them has converged on a
commit of Alfred's.

The applications of a concern are configured (``ALFRED_ARGOCD_NGINX_APPS`` for nginx-hosts,
``ALFRED_ARGOCD_KIRBY_APPS`` for kirby-routing); the booking files are deployed to production
nginx by people (Platform assistance), so no application carries them here.

**Converged on commit X** is ``providers.argocd.assess``'s judgement — Synced and Healthy at
the revision, no operation running, no failed operation at it — with one widening: an
application that already runs a later commit of the same branch (someone committed after
Alfred, and ArgoCD moved on before the wait looked) is judged at that revision, provided it
includes X. Requiring X exactly would wait forever for a state the application has left. A
sync that failed at the judged revision fails the wait (``argocd_sync_failed``): ArgoCD does
not retry it on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from executions.runtime.errors import FatalError
from providers.argocd import ArgoCD, assess
from providers.factory import Providers
from providers.gitops import KIRBY_ROUTING, NGINX_HOSTS
from workflows.steps.errors import provider_errors
from workflows.steps.repositories import ROLE, repository


def poll_seconds() -> float:
    """How often a convergence wait polls ArgoCD (``ALFRED_CONVERGE_POLL_SECONDS``, 2 s);
    a GitHub push or an ArgoCD notification brings the next poll forward."""
    return float(settings.ALFRED_CONVERGE_POLL_SECONDS)


CONVERGE_TIMEOUT_SECONDS = 1800.0


def applications_of(scope: str) -> tuple[str, ...]:
    config = settings.ALFRED_PROVIDERS.argocd
    return {NGINX_HOSTS.scope: config.nginx_apps, KIRBY_ROUTING.scope: config.kirby_apps}.get(
        scope, ()
    )


def wake_topics(*scopes: str) -> list[str]:
    """What a convergence wait on ``scopes`` watches, for the inbound receivers: a push to
    the repository a concern lives in (``github:<owner/name>``) and news of each application
    carrying it (``argocd:<name>``). Either brings the next poll forward."""
    github = settings.ALFRED_PROVIDERS.github
    repos = {"helm": github.helm_repo, "booking": github.booking_repo}
    topics = set()
    for scope in scopes:
        role = ROLE.get(scope)
        if role is not None:
            topics.add(f"github:{repos[role].lower()}")
        topics.update(f"argocd:{name}" for name in applications_of(scope))
    return sorted(topics)


def _argocd() -> ArgoCD:
    with provider_errors():
        return Providers(settings.ALFRED_PROVIDERS).argocd()


def read_applications(scope: str) -> list[dict[str, Any]]:
    """Plan's read: each application carrying ``scope``, with what it runs now. An
    application ArgoCD does not show (or an ArgoCD that is not configured) is a readiness
    failure ``argocd_application_missing`` naming it. Reads only: a dry run reads too."""
    names = applications_of(scope)
    if not names:
        return []
    found = []
    with (
        provider_errors(
            readiness="argocd_application_missing", check=f"ArgoCD applications of {scope}"
        ),
        _argocd() as argocd,
    ):
        for name in names:
            status = argocd.application(name)
            found.append(
                {
                    "application": name,
                    "sync_status": status.sync_status,
                    "revision": status.sync_revision,
                    "health": status.health_status,
                }
            )
    return found


def converged_on(scope: str, sha: str) -> dict[str, Any] | None:
    """A probe for ``ctx.wait_until``: every application of ``scope`` converged on commit
    ``sha`` (or on a later commit of its branch that includes it), with the revision each was
    judged at; None while any is not. FatalError ``argocd_sync_failed`` when a sync at the
    judged revision failed."""
    with _argocd() as argocd, provider_errors():
        # every application read at each poll, before any verdict: one still syncing does
        # not keep the others from being looked at
        statuses = {name: argocd.application(name) for name in applications_of(scope)}
        later = {
            s.sync_revision for s in statuses.values() if s.sync_revision and not s.at_revision(sha)
        }
        if later:  # moved past ``sha``? one repository session for all of them
            with repository(ROLE[scope], dry_run=False) as (repo, _):
                including = {revision for revision in later if repo.contains(revision, sha)}
        else:
            including = set()
    judged = []
    for name, status in statuses.items():
        revision = status.sync_revision if status.sync_revision in including else sha
        judged.append((name, revision, assess(status, revision)))
    for name, revision, convergence in judged:
        if convergence.failed:
            raise FatalError(
                f"the ArgoCD sync of {name} at {revision[:12]} failed: "
                + "; ".join(r.message for r in convergence.reasons),
                code="argocd_sync_failed",
                application=name,
                revision=revision,
                convergence=convergence.as_dict(),
            )
    if not all(convergence.converged for _, _, convergence in judged):
        return None
    return {
        "commit": sha,
        "applications": [
            {"application": name, "revision": revision, "commit": sha}
            for name, revision, _ in judged
        ],
    }


def converged_on_all(targets: Mapping[str, str]) -> dict[str, Any] | None:
    """A probe over several concerns at once (``targets``: concern → commit): every
    application of every concern is read at each poll, so that one still waiting does not
    keep the others from being looked at; None while any has not converged."""
    results = {scope: converged_on(scope, sha) for scope, sha in targets.items()}
    if any(result is None for result in results.values()):
        return None
    return results
