"""Commit messages: what a commit is for, which operation made it, and which entries it owns.

Every commit Alfred makes is a Conventional Commit whose body ends in a trailer block::

    feat(nginx-hosts): add example.com

    Add example.com, www.example.com to charts/nginx/values.yaml.

    Alfred-Operation: 6f1c…:routing:nginx-hosts
    Alfred-Entry: charts/nginx/values.yaml: example.com
    Alfred-Entry: charts/nginx/values.yaml: www.example.com

The trailers are the contract, read back by :func:`parse_message`:

- ``Alfred-Operation`` is the caller's identity for the operation. After a lost response the
  backend looks for it in the recent commits of the branch (recovery), and a replay of the same
  operation finds the commit it already made instead of making a second one. One identity names
  one commit: the identity must be unique per intended change.
- ``Alfred-Entry: <path>: <entry>`` lists the exact entries the commit added (for ``feat``) or
  removed (for ``revert``/``chore``). Compensation removes only the entries an add commit lists,
  never entries that were already there or that someone else added since.
- ``Alfred-Reverts: <sha>`` names the commit whose entries a ``revert`` commit removes.

Subjects: ``feat(<scope>): add <domain>`` adds entries; ``revert(<scope>): remove <domain>``
removes the entries of an earlier Alfred commit (compensation); ``chore(<scope>): remove
<domain>`` removes entries without a commit to revert (operator clean-up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

ADD_TYPE = "feat"
REMOVE_TYPES = ("revert", "chore")
TYPES = (ADD_TYPE, *REMOVE_TYPES)

OPERATION_TRAILER = "Alfred-Operation"
ENTRY_TRAILER = "Alfred-Entry"
REVERTS_TRAILER = "Alfred-Reverts"

_SCOPE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SUBJECT = re.compile(r"(?P<type>[a-z]+)\((?P<scope>[a-z0-9-]+)\): (?P<description>\S.*)")
_TRAILER = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9-]*): (?P<value>.*)")
_SHA = re.compile(r"[0-9a-f]{40}")
_MAX_OPERATION = 200


class MessageError(ValueError):
    """A message that cannot be written (a programming error in the caller)."""


@dataclass(frozen=True, order=True)
class OwnedEntry:
    """One entry of one file: ``path`` in the repository, ``entry`` as the file's editor names
    it (a hostname)."""

    path: str
    entry: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "entry": self.entry}


@dataclass(frozen=True)
class CommitMessage:
    type: str  # feat | revert | chore
    scope: str  # nginx-hosts | kirby-routing | nginx-booking
    description: str  # "add example.com"
    operation: str
    entries: tuple[OwnedEntry, ...] = ()
    reverts: str | None = None
    summary: str | None = field(default=None, compare=False)  # free text; not read back

    @property
    def action(self) -> str:
        return "add" if self.type == ADD_TYPE else "remove"

    @property
    def subject(self) -> str:
        return f"{self.type}({self.scope}): {self.description}"

    def render(self) -> str:
        check_message(self)
        lines = [self.subject, ""]
        lines += [self.summary or _default_summary(self), ""]
        lines.append(f"{OPERATION_TRAILER}: {self.operation}")
        if self.reverts:
            lines.append(f"{REVERTS_TRAILER}: {self.reverts}")
        lines += [f"{ENTRY_TRAILER}: {e.path}: {e.entry}" for e in self.entries]
        return "\n".join(lines) + "\n"


def _default_summary(message: CommitMessage) -> str:
    by_path: dict[str, list[str]] = {}
    for entry in message.entries:
        by_path.setdefault(entry.path, []).append(entry.entry)
    verb, prep = ("Add", "to") if message.action == "add" else ("Remove", "from")
    parts = [f"{verb} {', '.join(names)} {prep} {path}." for path, names in by_path.items()]
    if message.reverts:
        parts.append(f"Reverts the entries of commit {message.reverts[:12]}.")
    return "\n".join(parts) or "No entries."


def check_message(message: CommitMessage) -> None:
    if message.type not in TYPES:
        raise MessageError(f"commit type must be one of {', '.join(TYPES)}, not {message.type!r}")
    if not _SCOPE.fullmatch(message.scope):
        raise MessageError(f"scope {message.scope!r} must be lower-case words joined by '-'")
    if not message.description.strip() or "\n" in message.description:
        raise MessageError("the description must be one non-empty line")
    check_operation(message.operation)
    if message.reverts is not None and not _SHA.fullmatch(message.reverts):
        raise MessageError(f"reverts must be a 40-digit commit SHA, not {message.reverts!r}")
    for entry in message.entries:
        for part in (entry.path, entry.entry):
            if not part or part != part.strip() or "\n" in part or ": " in part:
                raise MessageError(f"entry part {part!r} must be one trimmed line without ': '")


def check_operation(operation: str) -> None:
    """An identity fits one trailer line and matches itself only."""
    if (
        not operation
        or operation != operation.strip()
        or len(operation) > _MAX_OPERATION
        or any(ch in operation for ch in "\r\n")
    ):
        raise MessageError(
            f"operation identity must be one trimmed line of 1-{_MAX_OPERATION} characters, "
            f"not {operation!r}"
        )


def add_message(
    scope: str, domain: str, entries: Iterable[OwnedEntry], *, operation: str
) -> CommitMessage:
    return CommitMessage(
        type=ADD_TYPE,
        scope=scope,
        description=f"add {domain}",
        operation=operation,
        entries=tuple(entries),
    )


def remove_message(
    scope: str,
    domain: str,
    entries: Iterable[OwnedEntry],
    *,
    operation: str,
    reverts: str | None,
) -> CommitMessage:
    return CommitMessage(
        type="revert" if reverts else "chore",
        scope=scope,
        description=f"remove {domain}",
        operation=operation,
        entries=tuple(entries),
        reverts=reverts,
    )


def parse_message(text: str) -> CommitMessage | None:
    """The Alfred commit message ``text`` renders, or None for any other commit.

    Trailers are read from the last paragraph only (git's rule), so a quoted trailer further up
    in someone's prose is not mistaken for one. Unknown trailers (``Co-authored-by``) are
    ignored."""
    lines = text.replace("\r\n", "\n").strip("\n").split("\n")
    subject = _SUBJECT.fullmatch(lines[0].strip()) if lines else None
    if subject is None or subject["type"] not in TYPES:
        return None
    paragraphs = "\n".join(lines[1:]).strip("\n").split("\n\n")
    trailers = [_TRAILER.fullmatch(line.strip()) for line in paragraphs[-1].split("\n")]
    operation: str | None = None
    reverts: str | None = None
    entries: list[OwnedEntry] = []
    for match in trailers:
        if match is None:
            continue
        key, value = match["key"], match["value"].strip()
        if key == OPERATION_TRAILER:
            operation = value
        elif key == REVERTS_TRAILER:
            reverts = value
        elif key == ENTRY_TRAILER:
            path, sep, entry = value.rpartition(": ")
            if sep and path and entry:
                entries.append(OwnedEntry(path, entry))
    if not operation:
        return None
    summary = "\n\n".join(paragraphs[:-1]) or None
    return CommitMessage(
        type=subject["type"],
        scope=subject["scope"],
        description=subject["description"],
        operation=operation,
        entries=tuple(entries),
        reverts=reverts,
        summary=summary,
    )
