"""Kill points for add-domain and onboard-domain, set at the adapters' network edge in the test
worker: no hook in production code. Imported by :mod:`tests.support.engine_workflows` (so by every
worker the tests start); it installs itself only in a process started with :data:`ENABLE`
set, which the platform kill tests' worker fixture sets and no other test does.

A point is armed as a member ``<domain>:<point>`` of
:data:`~tests.support.engine_workflows.KILL_POINTS`; it SIGKILLs the pool process running a stage of
the root execution (never of its child certificate) once. The points, ``<stage>`` being the
stage the pool process runs (a rollback's is ``rollback``):

- ``commit:<stage>`` — ``GitHubRepository.commit`` has returned: the commit is on its branch,
  the step's receipt is not written;
- ``change:<stage>`` — ``Route53.change`` has returned: the batch has landed, no receipt;
- ``zone:<stage>`` / ``unzone:<stage>`` — ``Route53.create_zone`` / ``delete_zone`` has
  returned: the zone exists / is gone, no receipt;
- ``argocd:<stage>`` — an outermost ``ArgoCD.application`` read has returned (a poll of the
  convergence wait, plan's read), before its receipt;
- ``before:<stage>`` / ``after:<stage>`` — the stage's message delivered and not yet claimed /
  the stage committed as succeeded, its own message not yet acknowledged.

Each task killed is noted in :data:`tests.support.kill_points.KILLED`;
:data:`tests.support.kill_points.SETTLE` shortens a recovered change's settle time as there (a batch
whose answer died with its worker is recovered on replay, and its INSYNC is then a matter of time).
"""

from __future__ import annotations

import os

from providers.argocd import ArgoCD
from providers.aws.route53 import Route53
from providers.gitops.github import GitHubRepository
from tests.support.kill_edges import EdgeKills
from tests.support.kill_points import KILLED, SETTLE, _settling

ENABLE = "ALFRED_TEST_PLATFORM_KILL_POINTS"
WORKFLOWS = ("add-domain", "onboard-domain")

KILLS = EdgeKills(WORKFLOWS, lambda data: str(data["domain"]), KILLED)
_installed = False


def install() -> None:
    """Wrap the adapters and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    GitHubRepository.commit = KILLS.edge(GitHubRepository.commit, "commit")  # type: ignore[method-assign]
    Route53.change = KILLS.edge(Route53.change, "change")  # type: ignore[method-assign]
    Route53.create_zone = KILLS.edge(Route53.create_zone, "zone")  # type: ignore[method-assign]
    Route53.delete_zone = KILLS.edge(Route53.delete_zone, "unzone")  # type: ignore[method-assign]
    ArgoCD.application = KILLS.edge(ArgoCD.application, "argocd")  # type: ignore[method-assign]
    if os.environ.get(SETTLE):
        Route53.__init__ = _settling(Route53.__init__, float(os.environ[SETTLE]))  # type: ignore[method-assign]
    KILLS.connect()


install()
