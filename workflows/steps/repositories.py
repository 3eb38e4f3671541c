"""The two GitOps repositories the workflows commit to, by role: ``helm`` (nginx hosts and
Mystique Kirby routing, on ``ALFRED_HELM_BRANCH``) and ``booking`` (the Calipso CORS map and
the next-deimos server names, on ``ALFRED_BOOKING_BRANCH``). Read by the GitOps moves and by
ArgoCD's (which commit the applications carrying a concern run on)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from providers.factory import Providers
from providers.gitops import KIRBY_ROUTING, NGINX_BOOKING, NGINX_HOSTS
from providers.gitops.github import GitHubRepository

# The repository each concern's files live in.
ROLE = {NGINX_HOSTS.scope: "helm", KIRBY_ROUTING.scope: "helm", NGINX_BOOKING.scope: "booking"}
_READS = frozenset(
    {"read", "head", "find_operation", "commit_message", "inspect", "contains", "close"}
)


class ReadOnlyRepository:
    """A repository with its reads only: what a dry run's steps are given."""

    def __init__(self, repository: GitHubRepository) -> None:
        self._repository = repository
        self.provider = repository.provider
        self.full_name = repository.full_name

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise AttributeError(f"a dry run reaches no mutating GitHub call ({name})")
        return getattr(self._repository, name)


@contextmanager
def repository(role: str, *, dry_run: bool) -> Iterator[tuple[Any, str]]:
    """The repository of ``role`` (``helm`` or ``booking``) and the branch Alfred commits to;
    its HTTP session is closed on the way out."""
    providers = Providers(settings.ALFRED_PROVIDERS)
    github = settings.ALFRED_PROVIDERS.github
    if role == "helm":
        repo, branch = providers.helm_repository(), github.helm_branch
    else:
        repo, branch = providers.booking_repository(), github.booking_branch
    try:
        yield (ReadOnlyRepository(repo) if dry_run else repo), branch
    finally:
        repo.close()
