"""The three routing concerns and the commits that add a domain to them or take it out again.

A concern is one reason to commit, with its Conventional Commit scope and its files:

- ``nginx-hosts``: ``charts/nginx/values.yaml`` (Helm values repository);
- ``kirby-routing``: ``charts/mystique/values.yaml`` (Helm values repository), only for
  ``kirby_mode: enabled``;
- ``nginx-booking``: ``calipso/cors-origins.conf`` and ``next-deimos/server-names.conf``
  together, as ONE two-file commit (booking repository).

:func:`add_domain` commits the entries of a domain that are missing at the head (an entry
already present is not written and therefore not owned; nothing missing is a ``noop`` without a
commit). :func:`remove_owned` is the compensation: it reads the entries the add commit's
message lists and removes those, and only those, still present at the head, in a ``revert``
commit naming the original. Both go through :meth:`Repository.commit`, so both are found
again by their operation identity after a lost response. A retry passes ``since``: the head
observed at the operation's first attempt (``observations["since"]`` of a handle,
``details["since"]`` of an error), which bounds that search (see
:mod:`providers.gitops.github`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from providers.errors import Rejected
from providers.gitops import editors
from providers.gitops.editors import FileEditor
from providers.gitops.messages import OwnedEntry, add_message, parse_message, remove_message
from providers.gitops.repository import NOOP, Change, Edit, Repository, Snapshot
from providers.handles import Handle, handle

NGINX_VALUES_PATH = "charts/nginx/values.yaml"
MYSTIQUE_VALUES_PATH = "charts/mystique/values.yaml"
CALIPSO_CORS_PATH = "calipso/cors-origins.conf"
DEIMOS_SERVER_NAMES_PATH = "next-deimos/server-names.conf"


@dataclass(frozen=True)
class Concern:
    scope: str
    files: tuple[tuple[str, FileEditor], ...]  # (path, editor), in commit-message order

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.files]

    def entries_for(self, domain: str) -> list[OwnedEntry]:
        return [
            OwnedEntry(path, entry)
            for path, editor in self.files
            for entry in editor.entries_for(domain)
        ]

    def missing(self, snapshot: Snapshot, domain: str) -> list[OwnedEntry]:
        """The entries of ``domain`` not yet in the files at the snapshot's head."""
        result = []
        for path, editor in self.files:
            present = set(_guarded(path, editor.entries, _text(snapshot, path)))
            result += [
                OwnedEntry(path, entry)
                for entry in editor.entries_for(domain)
                if entry not in present
            ]
        return result

    def add_edit(self, domain: str, *, operation: str) -> Edit:
        def edit(snapshot: Snapshot) -> Change | None:
            wanted = self.missing(snapshot, domain)
            if not wanted:
                return None
            files = {}
            for path, editor in self.files:
                mine = [e.entry for e in wanted if e.path == path]
                if mine:
                    files[path] = _guarded(path, editor.add, _text(snapshot, path), mine)
            message = add_message(self.scope, domain, wanted, operation=operation)
            return Change(files=files, message=message)

        return edit

    def remove_edit(
        self,
        owned: Sequence[OwnedEntry],
        *,
        domain: str,
        operation: str,
        reverts: str | None,
    ) -> Edit:
        def edit(snapshot: Snapshot) -> Change | None:
            files = {}
            removed: list[OwnedEntry] = []
            for path, editor in self.files:
                mine = [e.entry for e in owned if e.path == path]
                if not mine:
                    continue
                text = _text(snapshot, path)
                present = set(_guarded(path, editor.entries, text))
                gone = [entry for entry in mine if entry in present]
                if gone:
                    files[path] = _guarded(path, editor.remove, text, gone)
                    removed += [OwnedEntry(path, entry) for entry in gone]
            if not removed:
                return None
            message = remove_message(
                self.scope, domain, removed, operation=operation, reverts=reverts
            )
            return Change(files=files, message=message)

        return edit


def _text(snapshot: Snapshot, path: str) -> str:
    text = snapshot.files.get(path)
    if text is None:
        raise Rejected(
            f"{path} does not exist at {snapshot.head[:12]} of {snapshot.branch}",
            provider=editors.PROVIDER,
            code="missing_file",
            details={"path": path, "head": snapshot.head},
        )
    return text


def _guarded(path: str, fn: Any, *args: Any) -> Any:
    """Run an editor method, naming the file in its Rejected errors."""
    try:
        return fn(*args)
    except Rejected as exc:
        raise Rejected(
            f"{path}: {exc.message}",
            provider=exc.provider,
            code=exc.code,
            details={**exc.details, "path": path},
        ) from exc


NGINX_HOSTS = Concern("nginx-hosts", ((NGINX_VALUES_PATH, editors.NGINX_HOSTS),))
KIRBY_ROUTING = Concern("kirby-routing", ((MYSTIQUE_VALUES_PATH, editors.KIRBY_ROUTING),))
NGINX_BOOKING = Concern(
    "nginx-booking",
    (
        (CALIPSO_CORS_PATH, editors.CALIPSO_CORS),
        (DEIMOS_SERVER_NAMES_PATH, editors.DEIMOS_SERVER_NAMES),
    ),
)


def plan_domain(
    repository: Repository, concern: Concern, domain: str, *, branch: str
) -> dict[str, Any]:
    """Read-only: the head and which of the domain's entries are present or missing there
    (files validated). For a plan stage or the booking check."""
    snapshot = repository.read(branch, concern.paths)
    missing = concern.missing(snapshot, domain)
    wanted = concern.entries_for(domain)
    return {
        "repository": repository.full_name,
        "branch": branch,
        "head": snapshot.head,
        "scope": concern.scope,
        "present": [e.as_dict() for e in wanted if e not in missing],
        "missing": [e.as_dict() for e in missing],
    }


def add_domain(
    repository: Repository,
    concern: Concern,
    domain: str,
    *,
    branch: str,
    operation: str,
    since: str | None = None,
) -> Handle:
    """Commit the domain's missing entries (one commit), or ``noop`` if none is missing.
    ``since``: on a retry, the head observed at the operation's first attempt."""
    editors.check_entries([domain])
    edit = concern.add_edit(domain, operation=operation)
    return repository.commit(branch, concern.paths, edit, operation=operation, since=since)


def remove_owned(
    repository: Repository,
    concern: Concern,
    added: Handle,
    *,
    operation: str,
    since: str | None = None,
) -> Handle:
    """Compensate the commit ``added`` (a handle from :func:`add_domain`): remove the entries
    its message says it owns, where still present. A ``noop`` add owns nothing. ``since``: on
    a retry, the head observed at this removal's first attempt (not the add's)."""
    observations = added["observations"]
    branch = observations["branch"]
    sha = added["id"]
    if sha is None:
        return handle(
            provider=repository.provider,
            kind="commit",
            id=None,
            status=NOOP,
            done=True,
            ok=True,
            observations={
                "repository": repository.full_name,
                "branch": branch,
                "files": [],
                "entries": [],
                "operation": operation,
                "since": since,
                "reason": "the add was a noop and owns no entries",
            },
        )
    parsed = parse_message(repository.commit_message(sha))
    if parsed is None or parsed.action != "add" or parsed.scope != concern.scope:
        raise Rejected(
            f"commit {sha[:12]} is not an Alfred {concern.scope} add commit; "
            "refusing to guess which entries it owns",
            provider=repository.provider,
            code="not_owned",
            details={"sha": sha},
        )
    domain = parsed.description.removeprefix("add ")
    edit = concern.remove_edit(parsed.entries, domain=domain, operation=operation, reverts=sha)
    return repository.commit(branch, concern.paths, edit, operation=operation, since=since)
