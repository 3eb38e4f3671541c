"""The GitHub backend of the repository port (PyGithub, REST v3).

A commit is made the way the Git Data API allows it to be made safely: read the branch ref
(the observed head) and the files at that head; POST one blob per changed file, one tree on
the head's tree (``base_tree``), one commit whose only parent is the observed head; then PATCH
the branch ref to the new commit with ``force: false``. GitHub moves the ref only if the new
commit descends from the current head, so a concurrent commit is never overwritten: the PATCH
fails with 422 "Update is not a fast forward", and the backend re-reads and re-applies the
edit (bounded by :attr:`RetryPolicy.attempts`).

Nothing is sent twice behind the backend's back: PyGithub runs with ``retry=None`` (no urllib3
retries), so a POST or PATCH whose response is lost surfaces here, and the backend decides.

- Blobs and trees are content-addressed: re-sending one creates nothing new, so they are
  retried like reads (connection errors, 5xx).
- A lost or 5xx response to POST commits or PATCH ref leaves the outcome unknown. The backend
  lists the branch's recent commits (``GET /commits?sha=<branch>``; the commit search API
  only indexes the default branch) and looks for the operation identity in their messages:
  found means the commit landed and is returned (``recovered``); not found means it has not
  landed yet, and the edit is re-applied on a fresh read (a commit object left dangling by a
  lost create-commit is harmless).
- A PATCH whose response was lost may still be in flight, and land after any lookup — even
  after the call that sent it has ended (``Transient``) and the caller has retried in a new
  call. So the backend looks for the operation identity whenever something it sees may be
  that commit, whether or not this call lost a response: once after the first read (before
  the first attempt), before it concludes ``noop`` from a later read (the entries found
  present may be its own), and after every non-fast-forward 422 (what moved the branch may be
  its own commit). The late commit and a re-applied one cannot both land: each is based on a
  head the other moves.
- **Where a lookup stops.** Every commit of an operation is based on a head read at or after
  the operation's first attempt, so it lies above that head. The caller passes that head as
  ``since`` when it retries (a workflow keeps it in its receipt: the handle's
  ``observations["since"]``, and ``details["since"]`` of any error raised after the first
  read, are the value to pass back). The lookup after the first read scans back until it
  reaches ``since`` (not found: the operation has no commit there); later lookups of the same
  call stop at the head that call read first, since anything landing after its first lookup
  lands on top of it. (The listing is newest first, a commit before its parent: a scan
  meets every commit above its bound before the bound.) :attr:`RetryPolicy.recovery_depth`
  caps every scan: one cut short before reaching its bound raises
  :class:`~providers.errors.Unknown`, never ``noop`` or a second commit. Without ``since``
  (a first call) the first lookup searches the most recent ``recovery_depth`` commits only,
  and a commit further back is not found: a retry must pass ``since``.
- If a lookup fails after a response was lost in the call, :class:`~providers.errors.Unknown`
  is raised: the caller must not repeat the mutation blindly (it retries with ``since``).
  Without a lost response the lookup's own error is raised (nothing of the call landed).
- Throttling (403/429 with ``Retry-After``, a rate-limit message or ``X-RateLimit-Remaining:
  0``) means the request was not performed; it is re-sent after the wait GitHub asks for, at
  most :attr:`RetryPolicy.throttle_retries` times, and only when that wait is at most
  :attr:`RetryPolicy.max_throttle_wait` — otherwise :class:`~providers.errors.Throttled` is
  raised so the engine backs off durably instead of holding a worker.

Errors keep GitHub's status (``code``) and message. An instance holds one HTTP session: use
one per thread.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeVar

import requests
from github import Auth, Github, GithubException, InputGitAuthor, InputGitTreeElement
from github.GitRef import GitRef
from github.Repository import Repository as GithubRepo
from github.Requester import Requester

from providers.budgets import budget_close, budget_draw, budget_patient
from providers.errors import (
    Conflict,
    NotFound,
    ProviderError,
    Rejected,
    Throttled,
    Transient,
    Unknown,
)
from providers.gitops.messages import MessageError, check_operation, parse_message
from providers.gitops.repository import (
    LANDED,
    MISSING,
    NOOP,
    Change,
    CommitRecord,
    Edit,
    Snapshot,
)
from providers.handles import Handle, StopUnsupported, handle
from providers.observe import call_observed, outcome_of_status

logger = logging.getLogger(__name__)

PROVIDER = "github"
NOT_FAST_FORWARD = "Update is not a fast forward"
SECONDARY_RATE_WAIT = 60.0  # GitHub: without retry-after, wait at least a minute
_MAX_BACKOFF = 8.0
_SHA = re.compile(r"[0-9a-f]{40}")

T = TypeVar("T")
# The response did not arrive whole: the request may or may not have been performed.
_CONNECTION_ERRORS = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
CallKind = Literal["read", "content", "mutation"]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # edit applications per commit (non-fast-forward, lost responses)
    throttle_retries: int = 3  # re-sends of one throttled request
    max_throttle_wait: float = 10.0  # longest wait GitHub may ask for that is served in-process
    read_retries: int = 3  # re-sends of a read/blob/tree after a connection error or 5xx
    backoff: float = 0.5  # first back-off between those re-sends, doubled each time
    recovery_depth: int = 100  # recent commits of the branch searched for an operation


class _NotFastForward(Exception):
    pass


class _OutcomeUnknown(Exception):
    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f"{operation}: {cause}")
        self.operation = operation
        self.cause = cause


class GitHubRepository:
    """One repository (``owner/name``) on GitHub or GitHub Enterprise (``api_url`` is
    ``https://api.github.com`` or ``https://<host>/api/v3``)."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        api_url: str,
        token: str | None,
        full_name: str,
        retry: RetryPolicy | None = None,
        timeout: int = 15,
        seconds_between_writes: float | None = 1.0,
        author: tuple[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``seconds_between_writes`` is GitHub's advice for content-creating requests (at
        least a second apart); ``author`` is (name, email), None for the token's user;
        ``sleep`` serves throttling and back-off waits (tests record them)."""
        self.api_url = api_url.rstrip("/")
        self.full_name = full_name
        self.policy = retry or RetryPolicy()
        self._author = InputGitAuthor(*author) if author else None
        self._sleep = sleep
        # whose rate budget its requests draw from (providers.budgets): the token's, by a
        # digest of it (GitHub meters per token), so the key names no secret
        self._account = hashlib.sha256((token or "anonymous").encode()).hexdigest()[:16]
        self._github = Github(
            auth=Auth.Token(token) if token else None,
            base_url=self.api_url,
            timeout=timeout,
            retry=None,  # never re-send a POST/PATCH behind our back: see the module
            per_page=100,
            seconds_between_requests=None,
            seconds_between_writes=seconds_between_writes,
            user_agent="alfred-gitops",
        )
        self._repo: GithubRepo | None = None

    def close(self) -> None:
        self._github.close()

    # -- reads -----------------------------------------------------------------------------

    def read(self, branch: str, paths: Sequence[str]) -> Snapshot:
        return self._read(branch, paths)[0]

    def head(self, branch: str) -> str:
        ref = self._call("get_ref", lambda: self._repository().get_git_ref(_ref(branch)))
        return str(ref.object.sha)

    def find_operation(
        self, branch: str, operation: str, *, since: str | None = None
    ) -> CommitRecord | None:
        found, complete = self._scan(branch, operation, since)
        if found is None and since is not None and not complete:
            raise self._incomplete(branch, operation, since, [], since=since)
        return found

    def _scan(
        self, branch: str, operation: str, bound: str | None
    ) -> tuple[CommitRecord | None, bool]:
        """Look for ``operation`` in the commits of ``branch``, newest first, down to ``bound``
        (included) or :attr:`RetryPolicy.recovery_depth` commits. Returns the commit, or None
        and whether the search was complete: it reached ``bound`` or the end of the branch."""
        depth = self.policy.recovery_depth

        def scan() -> tuple[CommitRecord | None, bool]:
            commits = self._repository().get_commits(sha=branch)
            for index, commit in enumerate(commits):
                if index >= depth:
                    return None, False
                message = commit.commit.message
                parsed = parse_message(message)
                if parsed is not None and parsed.operation == operation:
                    parents = tuple(parent.sha for parent in commit.parents)
                    return CommitRecord(commit.sha, message, parents), True
                if commit.sha == bound:
                    return None, True
            return None, True

        return self._call("list_commits", scan)

    def commit_message(self, sha: str) -> str:
        commit = self._call("get_commit", lambda: self._repository().get_git_commit(sha))
        return str(commit.message)

    # -- the commit --------------------------------------------------------------------------

    def commit(
        self,
        branch: str,
        paths: Sequence[str],
        edit: Edit,
        *,
        operation: str,
        since: str | None = None,
    ) -> Handle:
        try:
            check_operation(operation)
        except MessageError as exc:
            raise Rejected(str(exc), provider=PROVIDER, code="invalid_operation") from exc
        if since is not None and not _SHA.fullmatch(since):
            raise Rejected(
                f"since must be a 40-digit commit SHA, not {since!r}",
                provider=PROVIDER,
                code="invalid_since",
            )
        anchor = since
        try:
            snapshot, ref = self._read(branch, paths)
            anchor = since or snapshot.head
            return self._commit(branch, paths, edit, operation, since, snapshot, ref)
        except ProviderError as exc:
            # The caller passes this back as ``since`` when it retries (see the module).
            if anchor is not None:
                exc.details.setdefault("since", anchor)
            raise

    def _commit(
        self,
        branch: str,
        paths: Sequence[str],
        edit: Edit,
        operation: str,
        since: str | None,
        snapshot: Snapshot,
        ref: GitRef,
    ) -> Handle:
        first_head = snapshot.head
        anchor = since or first_head
        lost: list[str] = []

        def look() -> CommitRecord | None:
            # Anything of this operation's that lands after the first lookup lands on top of
            # the head read before it, so later lookups stop there.
            return self._look(branch, operation, first_head, anchor, lost)

        # After the first read: whatever that read saw, this lookup has seen too.
        found = self._look(branch, operation, since, anchor, lost)
        if found is not None:
            return self._landed_handle(branch, found, anchor, recovered=True, attempts=0)
        for attempt in range(1, self.policy.attempts + 1):
            if attempt > 1:
                snapshot, ref = self._read(branch, paths)
            change = edit(snapshot)
            if change is None or all(
                snapshot.files.get(path) == text for path, text in change.files.items()
            ):
                # The entries found present may be this operation's own: a PATCH of an earlier
                # attempt or call, still in flight during the last lookup, can have landed
                # since. Only a lookup made after this read can tell.
                found = look() if attempt > 1 else None
                if found is not None:
                    return self._landed_handle(
                        branch, found, anchor, recovered=True, attempts=attempt
                    )
                return self._noop_handle(snapshot, operation, anchor, attempts=attempt, lost=lost)
            if change.message.operation != operation:
                raise ValueError(
                    f"the edit's message is for {change.message.operation!r}, not {operation!r}"
                )
            try:
                sha = self._write(snapshot, ref, change)
            except _NotFastForward:
                # What moved the branch may be this operation's own earlier PATCH (of this
                # call or an earlier one) whose response was lost and which landed late.
                found = look()
                if found is not None:
                    return self._landed_handle(
                        branch, found, anchor, recovered=True, attempts=attempt
                    )
                logger.info("%s@%s moved under %s; re-applying", self.full_name, branch, operation)
                continue
            except _OutcomeUnknown as exc:
                lost.append(exc.operation)
                logger.warning("%s: %s lost its response; looking for it", operation, exc)
                with budget_patient():  # a refused read would make it "unknown" for nothing
                    found = look()
                if found is not None:
                    return self._landed_handle(
                        branch, found, anchor, recovered=True, attempts=attempt
                    )
                continue
            record = CommitRecord(sha, change.message.render(), (snapshot.head,))
            return self._landed_handle(
                branch,
                record,
                anchor,
                recovered=False,
                attempts=attempt,
                files=sorted(change.files),
            )
        if lost:
            raise Transient(
                f"{operation}: no commit landed on {self.full_name}@{branch} in "
                f"{self.policy.attempts} attempts (lost responses on {', '.join(lost)}); "
                f"a request may still be in flight: retry with since={anchor}",
                provider=PROVIDER,
                details={"branch": branch, "lost": lost, "since": anchor},
            )
        raise Conflict(
            f"{NOT_FAST_FORWARD}: {self.full_name}@{branch} kept moving; "
            f"{self.policy.attempts} attempts to re-apply {operation} were not enough",
            provider=PROVIDER,
            code="422",
            details={"branch": branch, "attempts": self.policy.attempts, "since": anchor},
        )

    def _look(
        self, branch: str, operation: str, bound: str | None, anchor: str, lost: list[str]
    ) -> CommitRecord | None:
        """The operation's commit above ``bound``, or None when the search reached ``bound``
        (or, with no bound, searched :attr:`RetryPolicy.recovery_depth` commits). A search
        cut short by the depth before reaching its bound raises Unknown; so does a failed
        search once a response was lost in this call (without one, the lookup's own error is
        raised: nothing of this call can have landed)."""
        try:
            found, complete = self._scan(branch, operation, bound)
        except ProviderError as lookup:
            if not lost:
                raise
            raise self._unknown(branch, operation, anchor, lost, lookup) from lookup
        if found is None and bound is not None and not complete:
            raise self._incomplete(branch, operation, bound, lost, since=anchor)
        return found

    def _read(self, branch: str, paths: Sequence[str]) -> tuple[Snapshot, GitRef]:
        repo = self._repository()
        ref = self._call("get_ref", lambda: repo.get_git_ref(_ref(branch)))
        head = str(ref.object.sha)
        files = {path: self._file(repo, path, head) for path in dict.fromkeys(paths)}
        return Snapshot(branch=branch, head=head, files=files), ref

    def _file(self, repo: GithubRepo, path: str, head: str) -> str | None:
        def get() -> Any:
            try:
                return repo.get_contents(path, ref=head)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise

        content = self._call("get_contents", get)
        if content is None:
            return None
        if isinstance(content, list):
            raise Rejected(f"{path} is a directory", provider=PROVIDER, code="not_a_file")
        try:
            return bytes(content.decoded_content).decode("utf-8")
        except (UnicodeDecodeError, AssertionError) as exc:
            raise Rejected(
                f"{path} is not a UTF-8 text file", provider=PROVIDER, code="not_text"
            ) from exc

    def _write(self, snapshot: Snapshot, ref: GitRef, change: Change) -> str:
        repo = self._repository()
        parent = self._call("get_commit", lambda: repo.get_git_commit(snapshot.head))
        elements = []
        for path, text in sorted(change.files.items()):
            blob = self._call(
                "create_blob", functools.partial(repo.create_git_blob, text, "utf-8"), "content"
            )
            elements.append(InputGitTreeElement(path, "100644", "blob", sha=blob.sha))
        tree = self._call(
            "create_tree", lambda: repo.create_git_tree(elements, parent.tree), "content"
        )
        extra: dict[str, Any] = {}
        if self._author is not None:
            extra = {"author": self._author, "committer": self._author}
        message = change.message.render()
        commit = self._call(
            "create_commit",
            lambda: repo.create_git_commit(message, tree, [parent], **extra),
            "mutation",
        )

        def update() -> None:
            try:
                ref.edit(commit.sha, force=False)
            except GithubException as exc:
                if exc.status == 422 and _message(exc) == NOT_FAST_FORWARD:
                    raise _NotFastForward from exc
                raise

        self._call("update_ref", update, "mutation")
        return str(commit.sha)

    # -- handles -----------------------------------------------------------------------------

    def inspect(self, handle_: Handle) -> Handle:
        sha, observations = _commit_handle(handle_)
        head = self.head(observations["branch"])
        if sha is None:
            return handle(
                provider=PROVIDER,
                kind="commit",
                id=None,
                status=NOOP,
                done=True,
                ok=True,
                observations={**observations, "head": head},
            )
        on_branch = sha == head or self._descends(sha, observations["branch"])
        return handle(
            provider=PROVIDER,
            kind="commit",
            id=sha,
            status=LANDED if on_branch else MISSING,
            done=True,
            ok=on_branch,
            observations={**observations, "head": head, "on_branch": on_branch},
        )

    def stop(self, handle_: Handle) -> NoReturn:
        sha, _ = _commit_handle(handle_)
        if sha is None:
            raise StopUnsupported("a noop commit made no change; there is nothing to stop")
        raise StopUnsupported(f"commit {sha} cannot be stopped; compensate by removing its entries")

    def contains(self, ref: str, sha: str) -> bool:
        """Does ``ref`` (a branch or a commit SHA) include commit ``sha`` (equal to it, or
        descended from it)? False for a commit either side does not know."""
        return sha == ref or self._descends(sha, ref)

    def _descends(self, sha: str, branch: str) -> bool:
        """Is ``sha`` an ancestor of (or equal to) the head of ``branch``?"""

        def compare() -> str | None:
            try:
                return str(self._repository().compare(sha, branch).status)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise

        return self._call("compare", compare) in ("ahead", "identical")

    def _landed_handle(
        self,
        branch: str,
        record: CommitRecord,
        since: str,
        *,
        recovered: bool,
        attempts: int,
        files: list[str] | None = None,
    ) -> Handle:
        parsed = parse_message(record.message)
        entries = [entry.as_dict() for entry in parsed.entries] if parsed else []
        return handle(
            provider=PROVIDER,
            kind="commit",
            id=record.sha,
            status=LANDED,
            done=True,
            ok=True,
            observations={
                "repository": self.full_name,
                "branch": branch,
                "parent": record.parents[0] if record.parents else None,
                "files": files if files is not None else sorted({e["path"] for e in entries}),
                "entries": entries,
                "operation": parsed.operation if parsed else None,
                "subject": parsed.subject if parsed else record.message.split("\n", 1)[0],
                "recovered": recovered,
                "attempts": attempts,
                "since": since,
            },
        )

    def _noop_handle(
        self, snapshot: Snapshot, operation: str, since: str, *, attempts: int, lost: list[str]
    ) -> Handle:
        return handle(
            provider=PROVIDER,
            kind="commit",
            id=None,
            status=NOOP,
            done=True,
            ok=True,
            observations={
                "repository": self.full_name,
                "branch": snapshot.branch,
                "head": snapshot.head,
                "files": [],
                "entries": [],
                "operation": operation,
                "recovered": False,
                "attempts": attempts,
                "lost_responses": lost,
                "since": since,
            },
        )

    def _unknown(
        self, branch: str, operation: str, since: str, lost: list[str], cause: ProviderError
    ) -> Unknown:
        return Unknown(
            f"{operation}: the response to {lost[-1]} was lost and looking for the commit on "
            f"{self.full_name}@{branch} failed ({cause}); it may or may not have landed",
            provider=PROVIDER,
            code=cause.code,
            details={"branch": branch, "lost": lost, "since": since, "cause": cause.as_dict()},
        )

    def _incomplete(
        self, branch: str, operation: str, bound: str, lost: list[str], *, since: str
    ) -> Unknown:
        depth = self.policy.recovery_depth
        return Unknown(
            f"{operation}: the {depth} most recent commits of {self.full_name}@{branch} do not "
            f"reach {bound[:12]}; a commit of the operation further back cannot be ruled out",
            provider=PROVIDER,
            code=None,
            details={
                "branch": branch,
                "reason": "recovery_depth",
                "bound": bound,
                "depth": depth,
                "lost": lost,
                "since": since,
            },
        )

    # -- calls ---------------------------------------------------------------------------------

    def _repository(self) -> GithubRepo:
        if self._repo is None:
            self._repo = self._call("get_repo", lambda: self._github.get_repo(self.full_name))
        return self._repo

    def _call(self, operation: str, fn: Callable[[], T], kind: CallKind = "read") -> T:
        """Run one request under the retry rules of its kind (see the module)."""
        throttled = failures = 0
        while True:
            budget_draw(PROVIDER, self._account, operation)
            sent = time.monotonic()
            try:
                result = fn()
            except GithubException as exc:
                wait = throttle_wait(exc)
                outcome = "throttled" if wait is not None else outcome_of_status(exc.status)
                call_observed(PROVIDER, operation, outcome, time.monotonic() - sent)
                if wait is not None:
                    # GitHub's word (its reset time, a secondary limit's Retry-After) holds for
                    # every process of Alfred's drawing on this token, not just this one
                    budget_close(PROVIDER, self._account, wait)
                    if throttled >= self.policy.throttle_retries:
                        raise _mapped(exc, operation, "still throttled after retries") from exc
                    if wait > self.policy.max_throttle_wait:
                        raise _mapped(exc, operation, f"asks to wait {wait:.0f}s") from exc
                    throttled += 1
                    logger.info("%s throttled (%s); retrying in %.1fs", operation, exc.status, wait)
                    self._sleep(wait)
                    continue
                if exc.status >= 500:
                    if kind == "mutation":
                        raise _OutcomeUnknown(operation, exc) from exc
                    if failures < self.policy.read_retries:
                        failures += 1
                        self._backoff(failures)
                        continue
                raise _mapped(exc, operation) from exc
            except _CONNECTION_ERRORS as exc:
                call_observed(PROVIDER, operation, "transient", time.monotonic() - sent)
                if kind == "mutation":
                    raise _OutcomeUnknown(operation, exc) from exc
                if failures < self.policy.read_retries:
                    failures += 1
                    self._backoff(failures)
                    continue
                raise Transient(
                    f"{operation}: {type(exc).__name__}: {exc}",
                    provider=PROVIDER,
                    code=None,
                    details={"operation": operation},
                ) from exc
            call_observed(PROVIDER, operation, "ok", time.monotonic() - sent)
            return result

    def _backoff(self, failures: int) -> None:
        self._sleep(min(self.policy.backoff * 2 ** (failures - 1), _MAX_BACKOFF))


def _commit_handle(handle_: Any) -> tuple[str | None, dict[str, Any]]:
    """The SHA (None for a noop) and observations of a commit handle this backend returned;
    anything else is Rejected: a caller passing a corrupt receipt cannot be helped by a retry."""

    def reject(reason: str) -> NoReturn:
        raise Rejected(
            f"not a {PROVIDER} commit handle: {reason}",
            provider=PROVIDER,
            code="invalid_handle",
            details={"reason": reason},
        )

    if not isinstance(handle_, Mapping):
        reject(f"a {type(handle_).__name__}, not a JSON object")
    provider, kind = handle_.get("provider"), handle_.get("kind")
    if provider != PROVIDER or kind != "commit":
        reject(f"provider {provider!r}, kind {kind!r}")
    sha = handle_.get("id")
    if sha is not None and not (isinstance(sha, str) and _SHA.fullmatch(sha)):
        reject(f"id {sha!r} is not a commit SHA")
    observations = handle_.get("observations")
    if not isinstance(observations, Mapping):
        reject("no observations")
    branch = observations.get("branch")
    if not isinstance(branch, str) or not branch:
        reject(f"branch {branch!r}")
    return sha, dict(observations)


def _ref(branch: str) -> str:
    return f"heads/{branch}"


def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return exc.message or str(data or "")


def _headers(exc: GithubException) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (exc.headers or {}).items()}


def throttle_wait(exc: GithubException) -> float | None:
    """Seconds GitHub asks to wait before re-sending, or None if ``exc`` is not throttling."""
    if exc.status not in (403, 429):
        return None
    headers = _headers(exc)
    retry_after = headers.get("retry-after")
    if retry_after is not None:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            return SECONDARY_RATE_WAIT
    if (
        headers.get("x-ratelimit-remaining") == "0"
        and headers.get("x-ratelimit-reset", "").isdigit()
    ):
        return max(0.0, int(headers["x-ratelimit-reset"]) - time.time()) + 1.0
    if exc.status == 429 or Requester.isRateLimitError(_message(exc)):
        return SECONDARY_RATE_WAIT
    return None


def _mapped(exc: GithubException, operation: str, note: str | None = None) -> ProviderError:
    status = exc.status
    message = _message(exc) + (f" ({note})" if note else "")
    data = exc.data if isinstance(exc.data, dict) else {}
    details = {
        "status": status,
        "operation": operation,
        "documentation_url": data.get("documentation_url"),
    }
    kind: type[ProviderError]
    if throttle_wait(exc) is not None:
        kind = Throttled
        details["retry_after"] = throttle_wait(exc)
    elif status == 404:
        kind = NotFound
    elif status == 409 or (status == 422 and _message(exc) == NOT_FAST_FORWARD):
        kind = Conflict
    elif status >= 500:
        kind = Transient
    else:  # 401 Bad credentials, 403 forbidden, 422 validation
        kind = Rejected
    return kind(message, provider=PROVIDER, code=str(status), details=details)
