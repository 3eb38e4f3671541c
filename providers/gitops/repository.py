"""The repository port: read files at a branch head, land one commit per operation.

What a backend (:class:`providers.gitops.github.GitHubRepository`) guarantees:

- **One commit, based on what was read.** :meth:`Repository.commit` reads the branch head and
  the files the edit needs at that head, calls the edit, and writes its result as one commit
  whose only parent is the observed head; the branch moves to it only as a fast-forward (never
  forced). A commit that changes several files changes them atomically.
- **Re-read and re-apply, not overwrite.** When the branch moved meanwhile (someone else
  committed), the backend reads the new head and calls the edit again on the new contents, a
  bounded number of times. The edit therefore gets files, not a diff: it says what the files
  must become given what they are now, or that there is nothing to do (``None``).
- **Found, not repeated.** Every commit carries the caller's operation identity
  (:mod:`providers.gitops.messages`). After its first read, before reporting ``noop`` from a
  later read, after a lost response and after the branch moved under it, the backend looks for
  that identity in the commits of the branch; a commit found there is returned
  (``observations.recovered``) instead of making a second one. A request of an earlier attempt
  or call may land late, so these lookups do not depend on what this call lost.
- **Bounded by the first observed head.** ``since`` is the head the caller observed at the
  operation's first attempt (``observations["since"]`` of the handle, ``details["since"]`` of a
  ``Transient``/``Unknown``/``Conflict`` raised after the first read); a retry passes it back,
  and the lookups search down to it. A search that cannot reach it within the backend's
  recovery depth raises ``Unknown`` rather than concluding ``noop`` or committing again.
- **Evidence as a handle.** The result is a :class:`~providers.handles.Handle` of kind
  ``commit``: ``id`` is the commit SHA (None for ``noop``), ``status`` is ``landed`` or
  ``noop``; ``observations`` has the repository, branch, parent, changed files, owned entries
  and the operation identity. A landed commit cannot be stopped (``stop`` raises
  :class:`~providers.handles.StopUnsupported`); it is compensated by a commit that removes the
  entries it owns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from providers.gitops.messages import CommitMessage
from providers.handles import Handle

LANDED = "landed"
NOOP = "noop"
MISSING = "missing"


@dataclass(frozen=True)
class Snapshot:
    """The files at one commit: ``head`` is the commit the branch pointed at when read;
    ``files`` maps each requested path to its text, or None where the file does not exist."""

    branch: str
    head: str
    files: Mapping[str, str | None]


@dataclass(frozen=True)
class Change:
    """What an edit wants committed: the new full text of each changed file, and the message
    (whose ``operation`` must be the one the commit is made for)."""

    files: Mapping[str, str]
    message: CommitMessage


Edit = Callable[[Snapshot], Change | None]


@dataclass(frozen=True)
class CommitRecord:
    """A commit read back from the branch."""

    sha: str
    message: str
    parents: tuple[str, ...] = field(default=())


class Repository(Protocol):
    provider: str
    full_name: str

    def read(self, branch: str, paths: Sequence[str]) -> Snapshot:
        """The branch head and the text of ``paths`` at that head."""
        ...

    def commit(
        self,
        branch: str,
        paths: Sequence[str],
        edit: Edit,
        *,
        operation: str,
        since: str | None = None,
    ) -> Handle:
        """Land ``edit`` on ``branch`` as one commit for ``operation`` (see the module);
        ``since`` is the head observed at the operation's first attempt, on a retry."""
        ...

    def find_operation(
        self, branch: str, operation: str, *, since: str | None = None
    ) -> CommitRecord | None:
        """The most recent commit of ``branch`` made for ``operation``: searched down to
        ``since`` (Unknown if the backend's recovery depth does not reach it), or within the
        recovery depth without ``since``."""
        ...

    def commit_message(self, sha: str) -> str:
        """The message of commit ``sha`` (compensation reads the entries a commit owns)."""
        ...

    def contains(self, ref: str, sha: str) -> bool:
        """Does ``ref`` (a branch or a commit) include commit ``sha``?"""
        ...

    def inspect(self, handle: Handle) -> Handle:
        """Is the handle's commit on its branch, and where is the head now?"""
        ...

    def stop(self, handle: Handle) -> Handle:
        """Always raises StopUnsupported: a landed commit is compensated, not stopped."""
        ...
