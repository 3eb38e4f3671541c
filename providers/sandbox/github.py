"""A GitHub stand-in: the REST subset Alfred's GitOps backend uses, on real Git repositories.

Served under ``/api/v3`` as GitHub Enterprise serves it, so PyGithub runs unchanged with
``base_url=f"{standin.url}/api/v3"``. Each repository is a bare Git repository (dulwich) under
``root/<owner>/<name>.git``: blob, tree and commit SHAs are real Git SHAs, and the
repositories survive restarts (``make run`` keeps them; the demo seed only creates what is
missing).

Endpoints (GitHub's JSON shapes and status codes; every ``url`` points back here, as PyGithub
follows them)::

    GET    /repos/{o}/{r}                               get_repo
    GET    /repos/{o}/{r}/git/ref/{ref}  (and refs/)    get_ref
    POST   /repos/{o}/{r}/git/refs                      create_ref    422 Reference already exists
    PATCH  /repos/{o}/{r}/git/refs/{ref}                update_ref    422 not a fast forward
    DELETE /repos/{o}/{r}/git/refs/{ref}                delete_ref
    GET    /repos/{o}/{r}/git/commits/{sha}             get_commit
    POST   /repos/{o}/{r}/git/commits                   create_commit
    POST   /repos/{o}/{r}/git/blobs                     create_blob
    POST   /repos/{o}/{r}/git/trees      (base_tree)    create_tree
    GET    /repos/{o}/{r}/contents/{path}?ref=          get_contents
    GET    /repos/{o}/{r}/commits?sha=&per_page=&page=  list_commits  (Link: rel="next")
    GET    /repos/{o}/{r}/compare/{base}...{head}       compare

Without ``Authorization: token <token>`` (or ``Bearer``): 401 "Bad credentials". Unknown
repository, ref, commit or path: 404 "Not Found".

Ref updates are compare-and-swap under a per-repository lock: a PATCH without ``force`` moves
the branch only if the new commit descends from the current head, whatever happened between
the caller's read and its write.

Faults (``standin.faults.arm(operation, kind, ...)`` or ``POST /_sandbox/faults``; operation
names are the right-hand column above, ``*`` for all):

- ``lose_response``: perform the operation, then drop the connection without a byte.
- ``throttle``: do not perform; answer 403 with GitHub's secondary-rate-limit message and
  ``retry-after`` (params ``status`` 403|429, ``retry_after`` seconds, default 1, None to
  omit, ``message``).
- ``server_error``: do not perform; answer ``status`` (default 502) "Server Error".
- ``concurrent_ref_update`` (``update_ref``): just before applying the PATCH, the stand-in
  lands an unrelated commit on that branch (appending a line to ``path``, default
  ``CONCURRENT.md``), so the caller's update is no longer a fast forward.
- ``late_ref_update`` (a non-forced ``update_ref``): drop the connection without applying the
  PATCH yet; it lands (if still a fast forward) just before the next PATCH of that branch, as
  a request still in flight while the caller looked for its outcome would. With
  ``land_on="get_ref"`` it lands earlier, just before the next read of that branch's ref (the
  caller's next read sees it, its last lookup did not); :meth:`GitHubStandIn.land_late` lands
  it at once.
"""

from __future__ import annotations

import base64
import datetime as dt
import heapq
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo

from providers.sandbox import github_seed
from providers.sandbox.server import LOST, Request, Response, StandIn, _Lost

API = "/api/v3"
DOCS = "https://docs.github.com/rest"
SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID "
    "SANDBOX:0000:0000000:0000000:00000000."
)
NOT_FAST_FORWARD = "Update is not a fast forward"
DEFAULT_AUTHOR = ("alfred-sandbox", "alfred-sandbox@users.noreply.github.invalid")
_SHA = re.compile(r"[0-9a-f]{40}")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MODES = {"100644": 0o100644, "100755": 0o100755, "040000": 0o040000, "160000": 0o160000}
_TREE_MODE = 0o040000

Json = dict[str, Any]
Outcome = Response | _Lost


class _Error(Exception):
    def __init__(self, status: int, message: str, docs: str = DOCS) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.docs = docs

    def response(self) -> Response:
        return Response.json(
            self.status,
            {"message": self.message, "documentation_url": self.docs, "status": str(self.status)},
        )


@dataclass(frozen=True)
class Limits:
    """GitHub's REST limits for one token: ``per_hour`` requests (its primary limit, told in
    the ``X-RateLimit-*`` headers of every answer) and ``writes_per_minute`` content-creating
    requests (one of its secondary limits, refused with a 403 and ``Retry-After``)."""

    per_hour: int = 5000
    writes_per_minute: int = 80


class _Meter:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.window = int(time.time()) // 3600 * 3600
        self.used = 0
        self.writes: list[float] = []
        self._lock = threading.Lock()

    def take(self, write: bool) -> tuple[str | None, dict[str, str]]:
        """Whether the request goes (None) or which limit refuses it, and the headers."""
        with self._lock:
            now = time.time()
            if now >= self.window + 3600:
                self.window, self.used = int(now) // 3600 * 3600, 0
            self.writes = [at for at in self.writes if at > now - 60]
            refused = None
            if self.used >= self.limits.per_hour:
                refused = "primary"
            elif write and len(self.writes) >= self.limits.writes_per_minute:
                refused = "secondary"
            else:
                self.used += 1
                if write:
                    self.writes.append(now)
            reset = self.window + 3600
            headers = {
                "x-ratelimit-limit": str(self.limits.per_hour),
                "x-ratelimit-remaining": str(max(0, self.limits.per_hour - self.used)),
                "x-ratelimit-used": str(self.used),
                "x-ratelimit-reset": str(reset),
                "x-ratelimit-resource": "core",
            }
            if refused == "secondary":
                headers["retry-after"] = str(max(1, int(self.writes[0] + 60 - now) + 1))
            return refused, headers


def _rate_limited(which: str, headers: dict[str, str]) -> Response:
    """As GitHub refuses: 403 with its message (the primary limit's says it was exceeded)."""
    docs = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
    message = (
        "API rate limit exceeded for user ID 1." if which == "primary" else SECONDARY_RATE_LIMIT
    )
    return Response.json(403, {"message": message, "documentation_url": docs}, headers)


def _not_found(docs: str = DOCS) -> _Error:
    return _Error(404, "Not Found", docs)


@dataclass
class _Repository:
    full_name: str
    repo: Repo
    lock: threading.RLock


def _iso(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(value: str | None) -> int:
    if not value:
        return int(time.time())
    return int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())


class GitHubStandIn(StandIn):
    name = "github"

    def __init__(
        self,
        *,
        root: Path,
        token: str = "sandbox-token",  # noqa: S107 - the stand-in's fixed local token
        host: str = "127.0.0.1",
        port: int = 0,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self.root = Path(root)
        self.token = token
        self.limits = limits
        self._meter = _Meter(limits) if limits is not None else None
        self.throttled: Counter[str] = Counter()  # "primary", "secondary": what was refused
        self._repos: dict[str, _Repository] = {}
        self._repos_lock = threading.Lock()
        self._ref_updates: list[Json] = []
        self._created: list[tuple[str, str]] = []  # (repository, sha) of POSTed commits
        self._concurrent = 0
        # (repository, branch, sha, land_on) of PATCHes held back by late_ref_update
        self._late: list[tuple[str, str, str, str]] = []

    # -- in-process helpers ------------------------------------------------------------------

    def create_repo(
        self,
        full_name: str,
        files: Mapping[str, str],
        branch: str = "main",
        *,
        message: str = "chore: initial commit",
    ) -> str:
        """A new repository whose ``branch`` (also its default branch) has one commit with
        ``files``. Returns the commit SHA."""
        owner, _, name = full_name.partition("/")
        if not (_NAME.fullmatch(owner) and _NAME.fullmatch(name)) or ".." in full_name:
            raise ValueError(f"not an owner/name: {full_name!r}")
        path = self._path(full_name)
        with self._repos_lock:
            if path.exists():
                raise ValueError(f"{full_name} exists already")
            path.mkdir(parents=True)
            repo = Repo.init_bare(str(path))
            repo.refs.set_symbolic_ref(Ref(b"HEAD"), _branch_ref(branch))
            self._repos[full_name] = _Repository(full_name, repo, threading.RLock())
        entry = self._repository(full_name)
        with entry.lock:
            tree = self._build_tree(
                entry.repo, {p: (0o100644, self._blob(entry.repo, t)) for p, t in files.items()}
            )
            sha = self._commit(entry.repo, tree, [], message, DEFAULT_AUTHOR, int(time.time()))
            self._move(entry, branch, None, sha, forced=False, source="helper")
        return sha

    def exists(self, full_name: str) -> bool:
        return self._path(full_name).is_dir()

    def commit_files(
        self,
        full_name: str,
        branch: str,
        files: Mapping[str, str | None],
        message: str,
    ) -> str:
        """Commit ``files`` (None deletes) on top of ``branch``, as a teammate pushing would."""
        entry = self._repository(full_name)
        with entry.lock:
            head = self._head(entry, branch)
            if head is None:
                raise ValueError(f"{full_name} has no branch {branch}")
            flat = self._flatten(entry.repo, self._tree_of(entry.repo, head))
            for path, text in files.items():
                if text is None:
                    flat.pop(path, None)
                else:
                    flat[path] = (0o100644, self._blob(entry.repo, text))
            tree = self._build_tree(entry.repo, flat)
            sha = self._commit(entry.repo, tree, [head], message, DEFAULT_AUTHOR, int(time.time()))
            self._move(entry, branch, head, sha, forced=False, source="helper")
        return sha

    def create_branch(self, full_name: str, branch: str, from_branch: str = "main") -> str:
        entry = self._repository(full_name)
        with entry.lock:
            head = self._head(entry, from_branch)
            if head is None:
                raise ValueError(f"{full_name} has no branch {from_branch}")
            if self._head(entry, branch) is not None:
                raise ValueError(f"{full_name} has a branch {branch} already")
            self._move(entry, branch, None, head, forced=False, source="helper")
        return head

    def reset_branch(self, full_name: str, branch: str, sha: str) -> None:
        """Force ``branch`` to ``sha`` (a force-push by someone else)."""
        entry = self._repository(full_name)
        with entry.lock:
            self._move(entry, branch, self._head(entry, branch), sha, forced=True, source="helper")

    def land_late(self, full_name: str, branch: str) -> str | None:
        """Land the PATCHes ``late_ref_update`` holds for ``branch`` now (the requests in
        flight arrive); the new head."""
        entry = self._repository(full_name)
        with entry.lock:
            head = self._head(entry, branch)
            return None if head is None else self._land_late(entry, branch, head)

    def head(self, full_name: str, branch: str) -> str | None:
        """The commit ``branch`` points at, or None (no such repository or branch)."""
        try:
            entry = self._repository(full_name)
        except _Error:
            return None
        with entry.lock:
            return self._head(entry, branch)

    def tree_sha(self, full_name: str, sha: str, path: str) -> str | None:
        """The SHA of the tree (or blob) at ``path`` in commit ``sha`` (the root tree for
        ``""``), or None (no such repository, commit or path). Two commits render an ArgoCD
        application at ``path`` alike exactly when these are equal (the ArgoCD stand-in's
        ``trees``)."""
        try:
            entry = self._repository(full_name)
        except _Error:
            return None
        with entry.lock:
            commit = self._maybe(entry.repo, sha, Commit)
            if commit is None:
                return None
            root = commit.tree.decode()
            path = path.strip("/")
            if not path:
                return root
            found = self._lookup(entry.repo, root, path)
            return found[1] if found is not None else None

    def log(self, full_name: str, branch: str, limit: int | None = None) -> list[Json]:
        """The commits reachable from ``branch``, newest first: sha, parents, message,
        subject."""
        entry = self._repository(full_name)
        with entry.lock:
            head = self._head(entry, branch)
            if head is None:
                raise ValueError(f"{full_name} has no branch {branch}")
            result: list[Json] = []
            for sha in self._walk(entry.repo, head):
                if limit is not None and len(result) >= limit:
                    break
                commit = self._object(entry.repo, sha, Commit)
                message = commit.message.decode("utf-8", "replace")
                result.append(
                    {
                        "sha": sha,
                        "parents": [p.decode() for p in commit.parents],
                        "message": message,
                        "subject": message.split("\n", 1)[0],
                    }
                )
            return result

    def commit_count(self, full_name: str, branch: str) -> int:
        return len(self.log(full_name, branch))

    def read_file(self, full_name: str, ref: str, path: str) -> str | None:
        entry = self._repository(full_name)
        with entry.lock:
            sha = self._resolve(entry, ref)
            if sha is None:
                raise ValueError(f"{full_name} has no ref {ref}")
            found = self._lookup(entry.repo, self._tree_of(entry.repo, sha), path)
            if found is None or found[0] == _TREE_MODE:
                return None
            return self._object(entry.repo, found[1], Blob).data.decode("utf-8")

    def ref_updates(self, full_name: str | None = None, branch: str | None = None) -> list[Json]:
        """Every move of a branch: repository, branch, old, new, forced, source (``api``,
        ``fault``, ``helper``)."""
        with self._repos_lock:
            return [
                dict(update)
                for update in self._ref_updates
                if (full_name is None or update["repository"] == full_name)
                and (branch is None or update["branch"] == branch)
            ]

    def created_commits(self, full_name: str) -> list[str]:
        """SHAs of the commit objects POSTed to ``full_name`` (landed or not)."""
        with self._repos_lock:
            return [sha for repo, sha in self._created if repo == full_name]

    def journal(self) -> dict[str, Any]:
        """Every move of a branch (:meth:`ref_updates`) and every commit object POSTed."""
        with self._repos_lock:
            return {
                "ref_updates": [dict(update) for update in self._ref_updates],
                "created_commits": [
                    {"repository": repository, "sha": sha} for repository, sha in self._created
                ],
                "throttled": dict(self.throttled),
            }

    def seed_demo(self) -> dict[str, Any]:
        """Create the demo repositories that do not exist yet (see
        :mod:`providers.sandbox.github_seed`); returns what is there."""
        summary: dict[str, Any] = {}
        for full_name, history in github_seed.demo_history().items():
            created = not self.exists(full_name)
            if created:
                (message, files), *rest = history
                self.create_repo(full_name, files, github_seed.BRANCH, message=message)
                for message, files in rest:
                    self.commit_files(full_name, github_seed.BRANCH, files, message)
            summary[full_name] = {
                "branch": github_seed.BRANCH,
                "head": self.head(full_name, github_seed.BRANCH),
                "commits": self.commit_count(full_name, github_seed.BRANCH),
                "files": sorted(history[-1][1]) if created else None,
                "created": created,
            }
        return {"repositories": summary, "api_url": f"{self.url}{API}"}

    # -- HTTP ----------------------------------------------------------------------------------

    _ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
        (method, re.compile(API + r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)" + rest), op)
        for method, rest, op in (
            ("GET", r"", "get_repo"),
            ("GET", r"/git/refs?/(?P<ref>.+)", "get_ref"),
            ("POST", r"/git/refs", "create_ref"),
            ("PATCH", r"/git/refs/(?P<ref>.+)", "update_ref"),
            ("DELETE", r"/git/refs/(?P<ref>.+)", "delete_ref"),
            ("GET", r"/git/commits/(?P<sha>[^/]+)", "get_commit"),
            ("POST", r"/git/commits", "create_commit"),
            ("POST", r"/git/blobs", "create_blob"),
            ("POST", r"/git/trees", "create_tree"),
            ("GET", r"/contents(?:/(?P<path>.*))?", "get_contents"),
            ("GET", r"/commits", "list_commits"),
            ("GET", r"/compare/(?P<basehead>.+)", "compare"),
        )
    )

    def handle(self, request: Request) -> Outcome:
        if not self._authorized(request):
            return _Error(401, "Bad credentials").response()
        if self._meter is not None:
            refused, headers = self._meter.take(request.method != "GET")
            if refused is not None:
                self.throttled[refused] += 1
                return _rate_limited(refused, headers)
            response = self._handled(request)
            if isinstance(response, Response):
                response.headers.update(headers)
            return response
        return self._handled(request)

    def _handled(self, request: Request) -> Outcome:
        for method, pattern, operation in self._ROUTES:
            match = pattern.fullmatch(request.path)
            if match is None or request.method != method:
                continue
            params = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items() if v}
            try:
                refused = self._injected(operation)
                if refused is not None:
                    return refused
                full_name = f"{params.pop('owner')}/{params.pop('name')}"
                entry = self._repository(full_name)
                response = getattr(self, f"_{operation}")(entry, request, **params)
            except _Error as exc:
                return exc.response()
            return self.deliver(operation, response)
        if request.path.startswith(API + "/"):
            return _not_found().response()
        return Response.json(404, {"message": "Not Found"})

    def meter(self, limits: Limits | None) -> None:
        """Meter requests under ``limits`` from now on, a fresh count (None: no limit)."""
        self.limits = limits
        self._meter = _Meter(limits) if limits is not None else None

    def _authorized(self, request: Request) -> bool:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() in ("token", "bearer") and credential.strip() == self.token

    def _injected(self, operation: str) -> Response | None:
        throttle = self.faults.take(operation, "throttle")
        if throttle is not None:
            status = int(throttle.params.get("status", 403))
            retry_after = throttle.params.get("retry_after", 1)
            headers = {"x-ratelimit-resource": "core"}
            if retry_after is not None:
                headers["retry-after"] = str(retry_after)
            message = throttle.params.get("message", SECONDARY_RATE_LIMIT)
            docs = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
            return Response.json(
                status,
                {"message": message, "documentation_url": docs, "status": str(status)},
                headers,
            )
        error = self.faults.take(operation, "server_error")
        if error is not None:
            status = int(error.params.get("status", 502))
            return Response.json(status, {"message": "Server Error"})
        return None

    # -- endpoints -----------------------------------------------------------------------------

    def _get_repo(self, entry: _Repository, request: Request) -> Response:
        return Response.json(200, self._repo_json(entry))

    def _get_ref(self, entry: _Repository, request: Request, ref: str) -> Response:
        docs = f"{DOCS}/git/refs#get-a-reference"
        with entry.lock:
            sha = self._ref_sha(entry, ref)
            if sha is None:
                raise _not_found(docs)
            if ref.startswith("heads/"):
                sha = self._land_late(entry, ref.removeprefix("heads/"), sha, on="get_ref")
            return Response.json(200, self._ref_json(entry, ref, sha))

    def _create_ref(self, entry: _Repository, request: Request) -> Response:
        docs = f"{DOCS}/git/refs#create-a-reference"
        body = _body(request)
        ref, sha = body.get("ref"), body.get("sha")
        if not isinstance(ref, str) or not ref.startswith("refs/heads/") or ref == "refs/heads/":
            raise _Error(422, "Reference name is invalid", docs)
        with entry.lock:
            if not isinstance(sha, str) or self._maybe(entry.repo, sha, Commit) is None:
                raise _Error(422, "Object does not exist", docs)
            short = ref.removeprefix("refs/")
            if self._ref_sha(entry, short) is not None:
                raise _Error(422, "Reference already exists", docs)
            branch = short.removeprefix("heads/")
            self._move(entry, branch, None, sha, forced=False, source="api")
            return Response.json(201, self._ref_json(entry, short, sha))

    def _update_ref(self, entry: _Repository, request: Request, ref: str) -> Outcome:
        docs = f"{DOCS}/git/refs#update-a-reference"
        body = _body(request)
        sha, force = body.get("sha"), bool(body.get("force", False))
        if not ref.startswith("heads/"):
            raise _Error(422, "Reference does not exist", docs)
        branch = ref.removeprefix("heads/")
        with entry.lock:
            current = self._head(entry, branch)
            if current is None:
                raise _Error(422, "Reference does not exist", docs)
            current = self._land_late(entry, branch, current)
            if not isinstance(sha, str) or self._maybe(entry.repo, sha, Commit) is None:
                raise _Error(422, "Object does not exist", docs)
            late = None if force else self.faults.take("update_ref", "late_ref_update")
            if late is not None:
                land_on = str(late.params.get("land_on", "update_ref"))
                if land_on not in ("update_ref", "get_ref"):
                    raise ValueError(f"late_ref_update: land_on {land_on!r}")
                with self._repos_lock:
                    self._late.append((entry.full_name, branch, sha, land_on))
                return LOST
            fault = self.faults.take("update_ref", "concurrent_ref_update")
            if fault is not None:
                current = self._concurrent_commit(entry, branch, current, fault.params)
            if not force and current != sha and not self._descends(entry.repo, sha, current):
                raise _Error(422, NOT_FAST_FORWARD, docs)
            self._move(entry, branch, current, sha, forced=force, source="api")
            return Response.json(200, self._ref_json(entry, ref, sha))

    def _delete_ref(self, entry: _Repository, request: Request, ref: str) -> Response:
        docs = f"{DOCS}/git/refs#delete-a-reference"
        with entry.lock:
            name = Ref(f"refs/{ref}".encode())
            if self._ref_sha(entry, ref) is None:
                raise _Error(422, "Reference does not exist", docs)
            entry.repo.refs.remove_if_equals(name, None)
            return Response(204)

    def _get_commit(self, entry: _Repository, request: Request, sha: str) -> Response:
        with entry.lock:
            if self._maybe(entry.repo, sha, Commit) is None:
                raise _not_found(f"{DOCS}/git/commits#get-a-commit-object")
            return Response.json(200, self._git_commit_json(entry, sha))

    def _create_commit(self, entry: _Repository, request: Request) -> Response:
        docs = f"{DOCS}/git/commits#create-a-commit"
        body = _body(request)
        message, tree, parents = body.get("message"), body.get("tree"), body.get("parents", [])
        if not isinstance(message, str):
            raise _Error(422, 'Invalid request.\n\n"message" wasn\'t supplied.', docs)
        if not isinstance(tree, str):
            raise _Error(422, 'Invalid request.\n\n"tree" wasn\'t supplied.', docs)
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            raise _Error(422, 'Invalid request.\n\n"parents" must be a list of SHAs.', docs)
        author = body.get("author") or {}
        with entry.lock:
            if self._maybe(entry.repo, tree, Tree) is None:
                raise _Error(422, "Tree SHA does not exist", docs)
            for parent in parents:
                if self._maybe(entry.repo, parent, Commit) is None:
                    raise _Error(422, "Parent SHA does not exist or is not a commit object", docs)
            who = (
                author.get("name") or DEFAULT_AUTHOR[0],
                author.get("email") or DEFAULT_AUTHOR[1],
            )
            sha = self._commit(
                entry.repo, tree, parents, message, who, _parse_iso(author.get("date"))
            )
            with self._repos_lock:
                self._created.append((entry.full_name, sha))
            return Response.json(201, self._git_commit_json(entry, sha))

    def _create_blob(self, entry: _Repository, request: Request) -> Response:
        body = _body(request)
        content, encoding = body.get("content"), body.get("encoding", "utf-8")
        if not isinstance(content, str) or encoding not in ("utf-8", "base64"):
            raise _Error(422, "Invalid request.\n\nFor 'content', a string is required.")
        data = base64.b64decode(content) if encoding == "base64" else content.encode("utf-8")
        with entry.lock:
            sha = self._blob(entry.repo, data)
        return Response.json(201, {"url": self._blob_url(entry, sha), "sha": sha})

    def _create_tree(self, entry: _Repository, request: Request) -> Response:
        docs = f"{DOCS}/git/trees#create-a-tree"
        body = _body(request)
        items, base = body.get("tree"), body.get("base_tree")
        if not isinstance(items, list):
            raise _Error(422, 'Invalid request.\n\n"tree" wasn\'t supplied.', docs)
        with entry.lock:
            flat: dict[str, tuple[int, str]] = {}
            if base is not None:
                if not isinstance(base, str) or self._maybe(entry.repo, base, Tree) is None:
                    raise _Error(422, "base_tree is not a valid tree oid", docs)
                flat = self._flatten(entry.repo, base)
            for item in items:
                self._apply_tree_item(entry.repo, flat, item, docs)
            sha = self._build_tree(entry.repo, flat)
            return Response.json(201, self._tree_json(entry, sha))

    def _get_contents(self, entry: _Repository, request: Request, path: str = "") -> Response:
        docs = f"{DOCS}/repos/contents#get-repository-content"
        path = path.strip("/")
        with entry.lock:
            ref = request.arg("ref") or self._default_branch(entry)
            commit = self._resolve(entry, ref)
            if commit is None:
                raise _Error(404, f"No commit found for the ref {ref}", docs)
            root = self._tree_of(entry.repo, commit)
            found = (_TREE_MODE, root) if not path else self._lookup(entry.repo, root, path)
            if found is None:
                raise _not_found(docs)
            mode, sha = found
            if mode != _TREE_MODE:
                return Response.json(200, self._content_json(entry, path, sha, ref, full=True))
            tree = self._object(entry.repo, sha, Tree)
            listing = [
                self._content_json(
                    entry,
                    f"{path}/{item.path.decode()}".strip("/"),
                    item.sha.decode(),
                    ref,
                    full=False,
                    mode=item.mode,
                )
                for item in tree.iteritems()
            ]
            return Response.json(200, listing)

    def _list_commits(self, entry: _Repository, request: Request) -> Response:
        with entry.lock:
            ref = request.arg("sha") or self._default_branch(entry)
            start = self._resolve(entry, ref)
            if start is None:
                raise _not_found(f"{DOCS}/commits/commits#list-commits")
            per_page = max(1, min(100, int(request.arg("per_page") or 30)))
            page = max(1, int(request.arg("page") or 1))
            wanted = page * per_page + 1
            shas: list[str] = []
            for sha in self._walk(entry.repo, start):
                shas.append(sha)
                if len(shas) >= wanted:
                    break
            items = [
                self._commit_json(entry, sha) for sha in shas[(page - 1) * per_page :][:per_page]
            ]
            headers = {}
            if len(shas) > page * per_page:
                query = urllib.parse.urlencode({"sha": ref, "per_page": per_page, "page": page + 1})
                headers["Link"] = f'<{self._repo_url(entry)}/commits?{query}>; rel="next"'
            return Response.json(200, items, headers)

    def _compare(self, entry: _Repository, request: Request, basehead: str) -> Response:
        base_ref, sep, head_ref = basehead.partition("...")
        if not sep:
            raise _not_found(f"{DOCS}/commits/commits#compare-two-commits")
        with entry.lock:
            base, head = self._resolve(entry, base_ref), self._resolve(entry, head_ref)
            if base is None or head is None:
                raise _not_found(f"{DOCS}/commits/commits#compare-two-commits")
            head_side = list(self._walk(entry.repo, head))
            base_side = set(self._walk(entry.repo, base))
            ahead = [sha for sha in head_side if sha not in base_side]
            behind = len(base_side - set(head_side))
            merge_base = (
                next(sha for sha in head_side if sha in base_side)
                if base_side & set(head_side)
                else base
            )
            if base == head:
                status = "identical"
            elif not behind:
                status = "ahead"
            elif not ahead:
                status = "behind"
            else:
                status = "diverged"
            url = f"{self._repo_url(entry)}/compare/{base_ref}...{head_ref}"
            html = f"{self._html_url(entry)}/compare/{base_ref}...{head_ref}"
            return Response.json(
                200,
                {
                    "url": url,
                    "html_url": html,
                    "permalink_url": html,
                    "diff_url": f"{html}.diff",
                    "patch_url": f"{html}.patch",
                    "base_commit": self._commit_json(entry, base),
                    "merge_base_commit": self._commit_json(entry, merge_base),
                    "status": status,
                    "ahead_by": len(ahead),
                    "behind_by": behind,
                    "total_commits": len(ahead),
                    "commits": [self._commit_json(entry, sha) for sha in reversed(ahead[:250])],
                    "files": [],
                },
            )

    # -- git -------------------------------------------------------------------------------------

    def _path(self, full_name: str) -> Path:
        owner, _, name = full_name.partition("/")
        return self.root / owner / f"{name}.git"

    def _repository(self, full_name: str) -> _Repository:
        with self._repos_lock:
            entry = self._repos.get(full_name)
            if entry is None:
                path = self._path(full_name)
                owner, _, name = full_name.partition("/")
                valid = _NAME.fullmatch(owner) and _NAME.fullmatch(name) and ".." not in full_name
                if not valid or not (path / "HEAD").is_file():
                    raise _not_found(f"{DOCS}/repos/repos#get-a-repository")
                entry = _Repository(full_name, Repo(str(path)), threading.RLock())
                self._repos[full_name] = entry
            return entry

    def _head(self, entry: _Repository, branch: str) -> str | None:
        return self._ref_sha(entry, f"heads/{branch}")

    def _ref_sha(self, entry: _Repository, ref: str) -> str | None:
        try:
            return entry.repo.refs[Ref(f"refs/{ref}".encode())].decode()
        except KeyError:
            return None

    def _default_branch(self, entry: _Repository) -> str:
        target = entry.repo.refs.get_symrefs().get(Ref(b"HEAD"), _branch_ref("main"))
        return target.decode().removeprefix("refs/heads/")

    def _resolve(self, entry: _Repository, ref: str) -> str | None:
        if _SHA.fullmatch(ref) and self._maybe(entry.repo, ref, Commit) is not None:
            return ref
        for candidate in (ref, f"heads/{ref}", f"tags/{ref}"):
            sha = self._ref_sha(entry, candidate.removeprefix("refs/"))
            if sha is not None:
                return sha
        return None

    def _move(
        self,
        entry: _Repository,
        branch: str,
        old: str | None,
        new: str,
        *,
        forced: bool,
        source: str,
    ) -> None:
        """Compare-and-swap the branch under the repository lock (held by every caller)."""
        name = _branch_ref(branch)
        if old is None and self._head(entry, branch) is None:
            moved = entry.repo.refs.add_if_new(name, _oid(new))
        else:
            moved = entry.repo.refs.set_if_equals(name, _oid(old) if old else None, _oid(new))
        if not moved:
            raise _Error(422, "Reference update failed")
        with self._repos_lock:
            self._ref_updates.append(
                {
                    "repository": entry.full_name,
                    "branch": branch,
                    "old": old,
                    "new": new,
                    "forced": forced,
                    "source": source,
                }
            )

    def _concurrent_commit(
        self, entry: _Repository, branch: str, head: str, params: Mapping[str, Any]
    ) -> str:
        path = str(params.get("path", "CONCURRENT.md"))
        with self._repos_lock:
            self._concurrent += 1
            number = self._concurrent
        flat = self._flatten(entry.repo, self._tree_of(entry.repo, head))
        before = b""
        if path in flat:
            before = self._object(entry.repo, flat[path][1], Blob).data
        line = str(params.get("content", f"concurrent edit {number}\n")).encode()
        flat[path] = (0o100644, self._blob(entry.repo, before + line))
        tree = self._build_tree(entry.repo, flat)
        message = str(params.get("message", f"docs: concurrent edit {number} of {path}"))
        sha = self._commit(
            entry.repo,
            tree,
            [head],
            message,
            ("teammate", "teammate@example.com"),
            int(time.time()),
        )
        self._move(entry, branch, head, sha, forced=False, source="fault")
        return sha

    def _land_late(
        self, entry: _Repository, branch: str, current: str, *, on: str | None = None
    ) -> str:
        """Land the PATCHes ``late_ref_update`` held back for ``branch`` (only those to land
        on request ``on``, or all); the new head."""

        def due(update: tuple[str, str, str, str]) -> bool:
            return update[:2] == (entry.full_name, branch) and on in (None, update[3])

        with self._repos_lock:
            late = [update[2] for update in self._late if due(update)]
            self._late = [update for update in self._late if not due(update)]
        for sha in late:
            if sha != current and self._descends(entry.repo, sha, current):
                self._move(entry, branch, current, sha, forced=False, source="api")
                current = sha
        return current

    def _descends(self, repo: Repo, sha: str, ancestor: str) -> bool:
        return any(seen == ancestor for seen in self._walk(repo, sha))

    def _walk(self, repo: Repo, start: str) -> Iterator[str]:
        """Every commit reachable from ``start``, newest first (commit date, then discovery)."""
        seen = {start}
        queue = [(-self._object(repo, start, Commit).commit_time, 0, start)]
        counter = 1
        while queue:
            _, _, sha = heapq.heappop(queue)
            yield sha
            for parent in self._object(repo, sha, Commit).parents:
                parent_sha = parent.decode()
                if parent_sha not in seen:
                    seen.add(parent_sha)
                    time_ = self._object(repo, parent_sha, Commit).commit_time
                    heapq.heappush(queue, (-time_, counter, parent_sha))
                    counter += 1

    def _maybe(self, repo: Repo, sha: str, kind: type[Any]) -> Any:
        if not _SHA.fullmatch(sha):
            return None
        try:
            obj = repo.object_store[_oid(sha)]
        except KeyError:
            return None
        return obj if isinstance(obj, kind) else None

    def _object(self, repo: Repo, sha: str, kind: type[Any]) -> Any:
        obj = self._maybe(repo, sha, kind)
        if obj is None:
            raise _not_found()
        return obj

    def _blob(self, repo: Repo, data: str | bytes) -> str:
        blob = Blob.from_string(data.encode("utf-8") if isinstance(data, str) else data)
        repo.object_store.add_object(blob)
        return blob.id.decode()

    def _commit(
        self,
        repo: Repo,
        tree: str,
        parents: list[str],
        message: str,
        author: tuple[str, str],
        when: int,
    ) -> str:
        commit = Commit()
        commit.tree = _oid(tree)
        commit.parents = [_oid(p) for p in parents]
        commit.author = commit.committer = f"{author[0]} <{author[1]}>".encode()
        commit.author_time = commit.commit_time = when
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = message.encode("utf-8")
        repo.object_store.add_object(commit)
        return commit.id.decode()

    def _tree_of(self, repo: Repo, commit: str) -> str:
        return self._object(repo, commit, Commit).tree.decode()

    def _flatten(self, repo: Repo, tree: str, prefix: str = "") -> dict[str, tuple[int, str]]:
        """Every non-tree entry under ``tree``: path -> (mode, sha)."""
        flat: dict[str, tuple[int, str]] = {}
        for item in self._object(repo, tree, Tree).iteritems():
            path = prefix + item.path.decode()
            if item.mode == _TREE_MODE:
                flat.update(self._flatten(repo, item.sha.decode(), path + "/"))
            else:
                flat[path] = (item.mode, item.sha.decode())
        return flat

    def _build_tree(self, repo: Repo, flat: Mapping[str, tuple[int, str]]) -> str:
        here: dict[str, tuple[int, str]] = {}
        below: dict[str, dict[str, tuple[int, str]]] = {}
        for path, value in flat.items():
            first, sep, rest = path.partition("/")
            if sep:
                below.setdefault(first, {})[rest] = value
            else:
                here[first] = value
        tree = Tree()
        for name, (mode, sha) in here.items():
            tree.add(name.encode(), mode, _oid(sha))
        for name, children in below.items():
            tree.add(name.encode(), _TREE_MODE, _oid(self._build_tree(repo, children)))
        repo.object_store.add_object(tree)
        return tree.id.decode()

    def _lookup(self, repo: Repo, tree: str, path: str) -> tuple[int, str] | None:
        mode, sha = _TREE_MODE, tree
        for part in path.split("/"):
            if mode != _TREE_MODE:
                return None
            items = {
                i.path.decode(): (i.mode, i.sha.decode())
                for i in self._object(repo, sha, Tree).iteritems()
            }
            if part not in items:
                return None
            mode, sha = items[part]
        return mode, sha

    def _apply_tree_item(
        self, repo: Repo, flat: dict[str, tuple[int, str]], item: Any, docs: str
    ) -> None:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise _Error(422, 'Invalid tree info: "path" is required', docs)
        path = item["path"].strip("/")
        mode = _MODES.get(str(item.get("mode")))
        if mode is None:
            raise _Error(422, f"Invalid tree info: mode {item.get('mode')!r}", docs)
        for existing in [p for p in flat if p == path or p.startswith(path + "/")]:
            del flat[existing]
        if "content" in item:
            if not isinstance(item["content"], str):
                raise _Error(422, "Invalid tree info: content must be a string", docs)
            flat[path] = (mode, self._blob(repo, item["content"]))
            return
        sha = item.get("sha")
        if sha is None:
            return  # deletes the path
        if mode == _TREE_MODE:
            if self._maybe(repo, sha, Tree) is None:
                raise _Error(422, f"Invalid tree info: {sha} is not a tree", docs)
            flat.update({f"{path}/{p}": v for p, v in self._flatten(repo, sha).items()})
            return
        if self._maybe(repo, sha, Blob) is None:
            raise _Error(422, f"Invalid tree info: {sha} is not a blob", docs)
        flat[path] = (mode, sha)

    # -- JSON ------------------------------------------------------------------------------------

    def _repo_url(self, entry: _Repository) -> str:
        return f"{self.url}{API}/repos/{entry.full_name}"

    def _html_url(self, entry: _Repository) -> str:
        return f"{self.url}/{entry.full_name}"

    def _blob_url(self, entry: _Repository, sha: str) -> str:
        return f"{self._repo_url(entry)}/git/blobs/{sha}"

    def _repo_json(self, entry: _Repository) -> Json:
        owner, _, name = entry.full_name.partition("/")
        base = self._repo_url(entry)
        return {
            "id": abs(hash(entry.full_name)) % 10**9,
            "node_id": f"R_{base64.b64encode(entry.full_name.encode()).decode()[:16]}",
            "name": name,
            "full_name": entry.full_name,
            "private": True,
            "visibility": "private",
            "owner": {
                "login": owner,
                "id": abs(hash(owner)) % 10**8,
                "type": "Organization",
                "url": f"{self.url}{API}/users/{owner}",
                "html_url": f"{self.url}/{owner}",
            },
            "html_url": self._html_url(entry),
            "description": None,
            "fork": False,
            "archived": False,
            "url": base,
            "git_refs_url": f"{base}/git/refs{{/sha}}",
            "git_commits_url": f"{base}/git/commits{{/sha}}",
            "commits_url": f"{base}/commits{{/sha}}",
            "contents_url": f"{base}/contents/{{+path}}",
            "compare_url": f"{base}/compare/{{base}}...{{head}}",
            "default_branch": self._default_branch(entry),
            "permissions": {
                "admin": False,
                "maintain": False,
                "push": True,
                "triage": True,
                "pull": True,
            },
        }

    def _ref_json(self, entry: _Repository, ref: str, sha: str) -> Json:
        return {
            "ref": f"refs/{ref}",
            "node_id": f"REF_{sha[:16]}",
            "url": f"{self._repo_url(entry)}/git/refs/{urllib.parse.quote(ref)}",
            "object": {
                "type": "commit",
                "sha": sha,
                "url": f"{self._repo_url(entry)}/git/commits/{sha}",
            },
        }

    def _person(self, raw: bytes, when: int) -> Json:
        name, _, email = raw.decode("utf-8", "replace").partition(" <")
        return {"name": name, "email": email.rstrip(">"), "date": _iso(when)}

    def _parents_json(self, entry: _Repository, commit: Commit, *, git: bool) -> list[Json]:
        kind = "git/commits" if git else "commits"
        return [
            {
                "sha": p.decode(),
                "url": f"{self._repo_url(entry)}/{kind}/{p.decode()}",
                "html_url": f"{self._html_url(entry)}/commit/{p.decode()}",
            }
            for p in commit.parents
        ]

    def _git_commit_json(self, entry: _Repository, sha: str) -> Json:
        commit = self._object(entry.repo, sha, Commit)
        tree = commit.tree.decode()
        return {
            "sha": sha,
            "node_id": f"C_{sha[:20]}",
            "url": f"{self._repo_url(entry)}/git/commits/{sha}",
            "html_url": f"{self._html_url(entry)}/commit/{sha}",
            "author": self._person(commit.author, commit.author_time),
            "committer": self._person(commit.committer, commit.commit_time),
            "message": commit.message.decode("utf-8", "replace"),
            "tree": {"sha": tree, "url": f"{self._repo_url(entry)}/git/trees/{tree}"},
            "parents": self._parents_json(entry, commit, git=True),
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        }

    def _commit_json(self, entry: _Repository, sha: str) -> Json:
        git = self._git_commit_json(entry, sha)
        commit = self._object(entry.repo, sha, Commit)
        return {
            "sha": sha,
            "node_id": git["node_id"],
            "commit": {
                "author": git["author"],
                "committer": git["committer"],
                "message": git["message"],
                "tree": git["tree"],
                "url": git["url"],
                "comment_count": 0,
                "verification": git["verification"],
            },
            "url": f"{self._repo_url(entry)}/commits/{sha}",
            "html_url": git["html_url"],
            "comments_url": f"{self._repo_url(entry)}/commits/{sha}/comments",
            "author": None,
            "committer": None,
            "parents": self._parents_json(entry, commit, git=False),
        }

    def _tree_json(self, entry: _Repository, sha: str) -> Json:
        tree = self._object(entry.repo, sha, Tree)
        items = []
        for item in tree.iteritems():
            item_sha = item.sha.decode()
            kind = "tree" if item.mode == _TREE_MODE else "blob"
            row: Json = {
                "path": item.path.decode(),
                "mode": f"{item.mode:06o}",
                "type": kind,
                "sha": item_sha,
                "url": f"{self._repo_url(entry)}/git/{kind}s/{item_sha}",
            }
            if kind == "blob":
                row["size"] = len(self._object(entry.repo, item_sha, Blob).data)
            items.append(row)
        return {
            "sha": sha,
            "url": f"{self._repo_url(entry)}/git/trees/{sha}",
            "tree": items,
            "truncated": False,
        }

    def _content_json(
        self,
        entry: _Repository,
        path: str,
        sha: str,
        ref: str,
        *,
        full: bool,
        mode: int = 0o100644,
    ) -> Json:
        kind = "dir" if mode == _TREE_MODE else "file"
        query = urllib.parse.urlencode({"ref": ref})
        quoted = urllib.parse.quote(path)
        url = f"{self._repo_url(entry)}/contents/{quoted}?{query}"
        html = f"{self._html_url(entry)}/blob/{ref}/{quoted}"
        git = f"{self._repo_url(entry)}/git/{'trees' if kind == 'dir' else 'blobs'}/{sha}"
        row: Json = {
            "type": kind,
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": sha,
            "size": 0,
            "url": url,
            "html_url": html,
            "git_url": git,
            "download_url": None,
            "_links": {"self": url, "git": git, "html": html},
        }
        if kind == "file":
            data = self._object(entry.repo, sha, Blob).data
            row["size"] = len(data)
            row["download_url"] = f"{self.url}/raw/{entry.full_name}/{ref}/{quoted}"
            if full:
                encoded = base64.b64encode(data).decode()
                row["encoding"] = "base64"
                row["content"] = (
                    "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60)) + "\n"
                )
        return row


def _branch_ref(branch: str) -> Ref:
    return Ref(f"refs/heads/{branch}".encode())


def _oid(sha: str) -> ObjectID:
    return ObjectID(sha.encode())


def _body(request: Request) -> Json:
    try:
        body = request.json()
    except ValueError as exc:
        raise _Error(400, "Problems parsing JSON") from exc
    if not isinstance(body, dict):
        raise _Error(400, "Problems parsing JSON")
    return body
