"""GitOps: the platform routing lives in Git repositories, and Alfred changes it by commits.

- :mod:`~providers.gitops.repository` — the port: read files at a branch head, land one
  commit per operation (fast-forward only, re-applied after a concurrent update, found again
  by its operation identity after a lost response).
- :mod:`~providers.gitops.github` — the GitHub backend (PyGithub).
- :mod:`~providers.gitops.editors` — the file formats: Helm values (nginx hosts, Mystique
  Kirby routing) and the nginx booking snippets (Calipso CORS map, next-deimos server names).
- :mod:`~providers.gitops.messages` — Conventional Commit messages whose trailers carry the
  operation identity and the entries a commit owns.
- :mod:`~providers.gitops.concerns` — nginx-hosts, kirby-routing, nginx-booking: which files,
  which entries for a domain, the add commit and its compensation.
"""

from providers.gitops.concerns import (
    KIRBY_ROUTING,
    NGINX_BOOKING,
    NGINX_HOSTS,
    Concern,
    add_domain,
    plan_domain,
    remove_owned,
)
from providers.gitops.github import GitHubRepository, RetryPolicy
from providers.gitops.messages import CommitMessage, OwnedEntry, parse_message
from providers.gitops.repository import Change, CommitRecord, Edit, Repository, Snapshot

__all__ = [
    "KIRBY_ROUTING",
    "NGINX_BOOKING",
    "NGINX_HOSTS",
    "Change",
    "CommitMessage",
    "CommitRecord",
    "Concern",
    "Edit",
    "GitHubRepository",
    "OwnedEntry",
    "Repository",
    "RetryPolicy",
    "Snapshot",
    "add_domain",
    "parse_message",
    "plan_domain",
    "remove_owned",
]
