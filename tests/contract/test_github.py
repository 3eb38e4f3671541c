"""The GitHub backend of the GitOps port: one commit per operation, never forced, never twice.

Each test works on a fresh branch holding the seed routing files (``gitops_branch``) and reads
the repository's side through ``git_observer``, not through the backend under test. Tests
marked ``standin`` inject faults or read the stand-in's internals.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests

from alfred.budgets import RedisBudget
from providers.budgets import Rate, budget_install
from providers.errors import Conflict, NotFound, Rejected, Throttled, Transient, Unknown
from providers.gitops import (
    KIRBY_ROUTING,
    NGINX_BOOKING,
    NGINX_HOSTS,
    Change,
    Concern,
    GitHubRepository,
    Snapshot,
    add_domain,
    editors,
    parse_message,
    plan_domain,
    remove_owned,
)
from providers.gitops.concerns import (
    CALIPSO_CORS_PATH,
    DEIMOS_SERVER_NAMES_PATH,
    MYSTIQUE_VALUES_PATH,
    NGINX_VALUES_PATH,
)
from providers.handles import StopUnsupported
from providers.sandbox import github_seed
from providers.sandbox.github import (
    NOT_FAST_FORWARD,
    SECONDARY_RATE_LIMIT,
    GitHubStandIn,
    Limits,
)
from tests.contract.fixtures.gitops import (
    SANDBOX_POLICY,
    SEED_FILES,
    TOKEN,
    GitHubTarget,
    GitObserver,
    GitOpsBranch,
)

Client = Callable[..., GitHubRepository]


def operation() -> str:
    return f"contract:{uuid.uuid4()}"


def nginx_hosts(observer: GitObserver, branch: GitOpsBranch) -> list[str]:
    text = observer.file(branch.name, NGINX_VALUES_PATH)
    assert text is not None
    return editors.NGINX_HOSTS.entries(text)


# -- reads ---------------------------------------------------------------------------------------


def test_read_returns_the_observed_head_and_the_files_there(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given a branch with the routing files
    client = github_client()
    paths = [NGINX_VALUES_PATH, CALIPSO_CORS_PATH, "charts/nginx/missing.yaml"]

    # when
    snapshot = client.read(gitops_branch.name, paths)

    # then
    assert snapshot.head == gitops_branch.base == git_observer.head(gitops_branch.name)
    assert snapshot.files[NGINX_VALUES_PATH] == SEED_FILES[NGINX_VALUES_PATH]
    assert snapshot.files[CALIPSO_CORS_PATH] == SEED_FILES[CALIPSO_CORS_PATH]
    assert snapshot.files["charts/nginx/missing.yaml"] is None


def test_plan_lists_present_and_missing_entries_without_committing(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # when
    plan = plan_domain(github_client(), NGINX_BOOKING, "shop.acme.com", branch=gitops_branch.name)
    fresh = plan_domain(github_client(), NGINX_BOOKING, "example.com", branch=gitops_branch.name)

    # then
    assert plan["head"] == gitops_branch.base
    assert plan["missing"] == []
    assert len(plan["present"]) == 3
    assert fresh["missing"] == [
        {"path": CALIPSO_CORS_PATH, "entry": "example.com"},
        {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "example.com"},
        {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "www.example.com"},
    ]
    assert git_observer.commits_since(gitops_branch.name, gitops_branch.base) == []


# -- landing one commit --------------------------------------------------------------------------


def test_a_two_file_commit_lands_as_one_commit_based_on_the_observed_head(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given
    op = operation()

    # when
    landed = add_domain(
        github_client(), NGINX_BOOKING, "example.com", branch=gitops_branch.name, operation=op
    )

    # then exactly one new commit, on top of the head that was read
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert [c["sha"] for c in commits] == [landed["id"]]
    assert commits[0]["parents"] == [gitops_branch.base]
    assert landed["status"] == "landed"
    assert landed["observations"]["parent"] == gitops_branch.base
    assert landed["observations"]["files"] == [CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH]
    # and both files changed in it, each by its own entries
    sha = landed["id"]
    assert sha is not None
    calipso = git_observer.file(sha, CALIPSO_CORS_PATH)
    deimos = git_observer.file(sha, DEIMOS_SERVER_NAMES_PATH)
    assert calipso is not None and deimos is not None
    assert "example.com" in editors.CALIPSO_CORS.entries(calipso)
    assert {"example.com", "www.example.com"} <= set(editors.DEIMOS_SERVER_NAMES.entries(deimos))
    assert git_observer.file(sha, NGINX_VALUES_PATH) == SEED_FILES[NGINX_VALUES_PATH]
    # and the message names the operation and the exact entries it owns
    message = parse_message(commits[0]["message"])
    assert message is not None
    assert message.subject == "feat(nginx-booking): add example.com"
    assert message.operation == op
    assert (
        [e.as_dict() for e in message.entries]
        == landed["observations"]["entries"]
        == [
            {"path": CALIPSO_CORS_PATH, "entry": "example.com"},
            {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "example.com"},
            {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "www.example.com"},
        ]
    )


@pytest.mark.parametrize(
    ("concern", "path", "subject"),
    [
        (NGINX_HOSTS, NGINX_VALUES_PATH, "feat(nginx-hosts): add example.com"),
        (KIRBY_ROUTING, MYSTIQUE_VALUES_PATH, "feat(kirby-routing): add example.com"),
    ],
    ids=["nginx-hosts", "kirby-routing"],
)
def test_each_helm_concern_is_one_conventional_commit(
    concern: Concern,
    path: str,
    subject: str,
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
) -> None:
    # when
    landed = add_domain(
        github_client(), concern, "example.com", branch=gitops_branch.name, operation=operation()
    )

    # then
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert len(commits) == 1
    assert commits[0]["message"].split("\n", 1)[0] == subject
    assert landed["observations"]["entries"] == [
        {"path": path, "entry": "example.com"},
        {"path": path, "entry": "www.example.com"},
    ]
    text = git_observer.file(gitops_branch.name, path)
    assert text is not None
    assert concern.files[0][1].entries(text)[-2:] == ["example.com", "www.example.com"]


def test_entries_already_present_are_a_noop_without_a_commit(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given the seed books acme.com in both files
    # when
    result = add_domain(
        github_client(), NGINX_BOOKING, "acme.com", branch=gitops_branch.name, operation=operation()
    )

    # then
    assert result["status"] == "noop"
    assert result["id"] is None
    assert result["observations"]["head"] == gitops_branch.base
    assert result["observations"]["since"] == gitops_branch.base
    assert git_observer.commits_since(gitops_branch.name, gitops_branch.base) == []


def test_replaying_an_operation_returns_its_commit_instead_of_a_second(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given an operation that landed (say the worker crashed before recording it)
    op = operation()
    first = add_domain(
        github_client(), NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=op
    )

    # when it runs again
    again = add_domain(
        github_client(), NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=op
    )

    # then
    assert again["id"] == first["id"]
    assert again["observations"]["recovered"] is True
    assert again["observations"]["entries"] == first["observations"]["entries"]
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 1


# -- racing ----------------------------------------------------------------------------------------


def test_two_committers_racing_on_one_branch_both_land_without_force(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_target: GitHubTarget,
) -> None:
    # given two committers, each with its own client, that both read the same head before
    # either writes
    barrier = threading.Barrier(2, timeout=30)
    clients = {"alpha.example": github_client(), "beta.example": github_client()}
    results: dict[str, Any] = {}

    def commit(domain: str) -> None:
        edit = NGINX_HOSTS.add_edit(domain, operation=f"race:{domain}:{gitops_branch.name}")
        calls = 0

        def racing(snapshot: Snapshot) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                barrier.wait()
            return edit(snapshot)

        try:
            results[domain] = clients[domain].commit(
                gitops_branch.name,
                NGINX_HOSTS.paths,
                racing,
                operation=f"race:{domain}:{gitops_branch.name}",
            )
        except Exception as exc:  # reported below, in the test's thread
            results[domain] = exc

    # when
    threads = [threading.Thread(target=commit, args=(domain,)) for domain in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then both landed, one of them after re-reading
    assert all(isinstance(r, dict) and r["status"] == "landed" for r in results.values()), results
    assert sorted(r["observations"]["attempts"] for r in results.values()) == [1, 2]
    # and the history is linear: the later commit is based on the earlier one
    newest, oldest = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert oldest["parents"] == [gitops_branch.base]
    assert newest["parents"] == [oldest["sha"]]
    assert {newest["sha"], oldest["sha"]} == {r["id"] for r in results.values()}
    # and neither change was lost
    hosts = nginx_hosts(git_observer, gitops_branch)
    for domain in clients:
        assert {domain, f"www.{domain}"} <= set(hosts)
    assert set(editors.NGINX_HOSTS.entries(SEED_FILES[NGINX_VALUES_PATH])) <= set(hosts)
    if github_target.standin is not None:
        updates = github_target.standin.ref_updates(gitops_branch.repo, gitops_branch.name)
        assert [u["forced"] for u in updates if u["source"] == "api"] == [False, False]


# -- compensation -------------------------------------------------------------------------------


def test_compensation_removes_only_the_entries_the_commit_owns(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given a teammate already serves www.example.com
    client = github_client()
    seed = SEED_FILES[NGINX_VALUES_PATH]
    git_observer.commit_files(
        gitops_branch.name,
        {NGINX_VALUES_PATH: editors.NGINX_HOSTS.add(seed, ["www.example.com"])},
        "chore: serve www.example.com\n",
    )
    # and Alfred adds example.com, owning only what it wrote
    op = operation()
    added = add_domain(client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=op)
    assert added["observations"]["entries"] == [{"path": NGINX_VALUES_PATH, "entry": "example.com"}]
    # and a teammate adds another host after it
    text = git_observer.file(gitops_branch.name, NGINX_VALUES_PATH)
    assert text is not None
    git_observer.commit_files(
        gitops_branch.name,
        {NGINX_VALUES_PATH: editors.NGINX_HOSTS.add(text, ["blog.example.com"])},
        "chore: serve blog.example.com\n",
    )

    # when Alfred's commit is compensated
    removed = remove_owned(client, NGINX_HOSTS, added, operation=f"{op}:rollback")

    # then only example.com is gone
    hosts = nginx_hosts(git_observer, gitops_branch)
    assert "example.com" not in hosts
    assert {"www.example.com", "blog.example.com"} <= set(hosts)
    assert set(editors.NGINX_HOSTS.entries(seed)) <= set(hosts)
    # and the revert names the commit and the entries it removed
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert [c["sha"] for c in commits][:2] == [removed["id"], commits[1]["sha"]]
    message = parse_message(commits[0]["message"])
    assert message is not None
    assert message.subject == "revert(nginx-hosts): remove example.com"
    assert message.reverts == added["id"]
    assert [e.entry for e in message.entries] == ["example.com"]
    # and compensating again changes nothing
    again = remove_owned(client, NGINX_HOSTS, added, operation=f"{op}:rollback")
    other = remove_owned(client, NGINX_HOSTS, added, operation=f"{op}:rollback-2")
    assert again["id"] == removed["id"] and again["observations"]["recovered"] is True
    assert other["status"] == "noop"
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 4


def test_compensating_a_booking_restores_both_files_byte_for_byte(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given
    client = github_client()
    op = operation()
    added = add_domain(
        client, NGINX_BOOKING, "example.com", branch=gitops_branch.name, operation=op
    )

    # when
    removed = remove_owned(client, NGINX_BOOKING, added, operation=f"{op}:rollback")

    # then
    assert removed["status"] == "landed"
    assert removed["observations"]["files"] == [CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH]
    for path in (CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH):
        assert git_observer.file(gitops_branch.name, path) == SEED_FILES[path]
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 2


def test_compensating_a_noop_owns_nothing_and_commits_nothing(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given
    client = github_client()
    noop = add_domain(
        client, NGINX_HOSTS, "acme.com", branch=gitops_branch.name, operation=operation()
    )

    # when
    removed = remove_owned(client, NGINX_HOSTS, noop, operation=operation())

    # then acme.com, which Alfred never owned, stays
    assert removed["status"] == "noop"
    assert "acme.com" in nginx_hosts(git_observer, gitops_branch)
    assert git_observer.commits_since(gitops_branch.name, gitops_branch.base) == []


# -- inspect and stop ------------------------------------------------------------------------------


def test_inspect_reports_the_commit_on_its_branch_and_the_current_head(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given a landed commit and a teammate's commit after it
    client = github_client()
    landed = add_domain(
        client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=operation()
    )
    later = git_observer.commit_files(gitops_branch.name, {"NOTES.md": "later\n"}, "docs: notes\n")

    # when
    seen = client.inspect(landed)

    # then
    assert seen["id"] == landed["id"]
    assert seen["status"] == "landed" and seen["ok"] is True
    assert seen["observations"]["on_branch"] is True
    assert seen["observations"]["head"] == later


def test_a_landed_commit_cannot_be_stopped(
    github_client: Client, gitops_branch: GitOpsBranch
) -> None:
    client = github_client()
    landed = add_domain(
        client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=operation()
    )

    with pytest.raises(StopUnsupported):
        client.stop(landed)


@pytest.mark.parametrize(
    "malformed",
    [
        None,
        {},
        {"provider": "aws.route53", "kind": "change", "id": "C1", "observations": {}},
        {
            "provider": "github",
            "kind": "commit",
            "id": "not-a-sha",
            "observations": {"branch": "main"},
        },
        {"provider": "github", "kind": "commit", "id": None},
        {"provider": "github", "kind": "commit", "id": None, "observations": {"branch": ""}},
    ],
    ids=["none", "empty", "route53", "bad-sha", "no-observations", "no-branch"],
)
def test_a_malformed_handle_is_rejected_by_inspect_and_stop(
    malformed: Any, github_client: Client
) -> None:
    client = github_client()

    with pytest.raises(Rejected) as inspected:
        client.inspect(malformed)
    with pytest.raises(Rejected) as stopped:
        client.stop(malformed)

    assert inspected.value.code == stopped.value.code == "invalid_handle"
    assert inspected.value.provider == "github"


@pytest.mark.standin
def test_inspect_reports_a_commit_lost_to_a_force_push_as_missing(
    github_client: Client, gitops_branch: GitOpsBranch, github_standin: GitHubStandIn
) -> None:
    # given a landed commit that someone force-pushed away
    client = github_client()
    landed = add_domain(
        client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=operation()
    )
    github_standin.reset_branch(gitops_branch.repo, gitops_branch.name, gitops_branch.base)

    # when
    seen = client.inspect(landed)

    # then
    assert seen["status"] == "missing" and seen["ok"] is False
    assert seen["observations"]["on_branch"] is False
    assert seen["observations"]["head"] == gitops_branch.base


# -- errors -------------------------------------------------------------------------------------


def test_bad_credentials_are_rejected_with_githubs_status_and_message(
    github_client: Client, gitops_branch: GitOpsBranch
) -> None:
    client = github_client(token="not-the-token")

    with pytest.raises(Rejected) as raised:
        client.read(gitops_branch.name, [NGINX_VALUES_PATH])

    assert raised.value.code == "401"
    assert raised.value.message == "Bad credentials"
    assert raised.value.provider == "github"


def test_an_unknown_repository_or_branch_is_not_found(
    github_client: Client, gitops_branch: GitOpsBranch, github_target: GitHubTarget
) -> None:
    owner = github_target.repo.split("/")[0]

    with pytest.raises(NotFound) as repo:
        github_client(full_name=f"{owner}/no-such-repo-{uuid.uuid4().hex[:8]}").read(
            "main", [NGINX_VALUES_PATH]
        )
    with pytest.raises(NotFound) as branch:
        github_client().read(f"no-such-branch-{uuid.uuid4().hex[:8]}", [NGINX_VALUES_PATH])

    assert repo.value.code == branch.value.code == "404"


def test_a_malformed_file_at_the_head_is_rejected_without_a_commit(
    github_client: Client, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given someone broke the CORS map (the closing brace is gone)
    broken = SEED_FILES[CALIPSO_CORS_PATH].replace("}\n", "")
    teammate = git_observer.commit_files(
        gitops_branch.name, {CALIPSO_CORS_PATH: broken}, "chore: tidy\n"
    )

    # when
    with pytest.raises(Rejected) as raised:
        add_domain(
            github_client(),
            NGINX_BOOKING,
            "example.com",
            branch=gitops_branch.name,
            operation=operation(),
        )

    # then
    assert raised.value.code == "malformed_file"
    assert raised.value.details["path"] == CALIPSO_CORS_PATH
    assert "not closed" in raised.value.message
    assert [
        c["sha"] for c in git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    ] == [teammate]


# -- faults (stand-in) ---------------------------------------------------------------------------


@pytest.mark.standin
def test_a_lost_response_to_the_ref_update_is_found_by_its_operation_identity(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given the response to the ref update will be lost (after the branch moved)
    github_standin.faults.arm("update_ref", "lose_response")
    posted = len(github_standin.created_commits(gitops_branch.repo))
    op = operation()

    # when
    landed = add_domain(
        github_client(), NGINX_BOOKING, "example.com", branch=gitops_branch.name, operation=op
    )

    # then the commit that landed is returned, and no second one was made
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert [c["sha"] for c in commits] == [landed["id"]]
    assert landed["observations"]["recovered"] is True
    assert landed["observations"]["operation"] == op
    assert len(github_standin.created_commits(gitops_branch.repo)) == posted + 1
    updates = github_standin.ref_updates(gitops_branch.repo, gitops_branch.name)
    assert [u["new"] for u in updates if u["source"] == "api"] == [landed["id"]]


@pytest.mark.standin
def test_a_lost_response_to_create_commit_is_reapplied_once(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given the response to the commit creation will be lost (the commit object exists, the
    # branch has not moved)
    github_standin.faults.arm("create_commit", "lose_response")
    posted = len(github_standin.created_commits(gitops_branch.repo))

    # when
    landed = add_domain(
        github_client(),
        NGINX_BOOKING,
        "example.com",
        branch=gitops_branch.name,
        operation=operation(),
    )

    # then one commit on the branch; the lost one stays a dangling object
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert [c["sha"] for c in commits] == [landed["id"]]
    assert commits[0]["parents"] == [gitops_branch.base]
    assert landed["observations"]["recovered"] is False
    assert landed["observations"]["attempts"] == 2
    created = github_standin.created_commits(gitops_branch.repo)[posted:]
    assert len(created) == 2 and created[-1] == landed["id"]


BOOKING_EXAMPLE_ENTRIES = [
    {"path": CALIPSO_CORS_PATH, "entry": "example.com"},
    {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "example.com"},
    {"path": DEIMOS_SERVER_NAMES_PATH, "entry": "www.example.com"},
]


def commits_of(observer: GitObserver, branch: GitOpsBranch, op: str) -> list[dict[str, Any]]:
    return [
        c
        for c in observer.commits_since(branch.name, branch.base)
        if (parsed := parse_message(c["message"])) is not None and parsed.operation == op
    ]


class Numbered:
    """An edit whose every commit is a distinct object. Git would make a re-application the
    very same commit object within the same second (same tree, parent, message and time); a
    distinct one is what these tests are about."""

    def __init__(self, edit: Callable[[Snapshot], Change | None]) -> None:
        self.edit = edit
        self.calls = 0

    def __call__(self, snapshot: Snapshot) -> Change | None:
        self.calls += 1
        change = self.edit(snapshot)
        if change is None:
            return None
        summary = f"Attempt {self.calls}."
        return replace(change, message=replace(change.message, summary=summary))


def fail_with_the_ref_update_in_flight(
    standin: GitHubStandIn, client: GitHubRepository, branch: GitOpsBranch, edit: Numbered, op: str
) -> Transient:
    """Run a call whose first ref update is held in flight (its response lost) and whose
    re-applications all fail at create_commit (502, not performed): it ends Transient and the
    held PATCH is still to land."""
    standin.faults.arm("update_ref", "late_ref_update")

    def edit_then_fail_reapplying(snapshot: Snapshot) -> Change | None:
        if edit.calls == 1:  # re-applying, after the first ref update was held
            standin.faults.arm("create_commit", "server_error", times=None)
        return edit(snapshot)

    with pytest.raises(Transient) as raised:
        client.commit(branch.name, NGINX_BOOKING.paths, edit_then_fail_reapplying, operation=op)
    standin.faults.clear()
    lost = ["update_ref"] + ["create_commit"] * (client.policy.attempts - 1)
    assert raised.value.details["lost"] == lost
    assert standin.head(branch.repo, branch.name) == branch.base  # nothing landed yet
    return raised.value


@pytest.mark.standin
def test_a_lost_ref_update_that_lands_late_is_found_after_the_retry_is_refused(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given the ref update's response is lost and the PATCH is still in flight while the
    # backend looks for it; it lands just before the retry's PATCH, which is then refused
    github_standin.faults.arm("update_ref", "late_ref_update")
    posted = len(github_standin.created_commits(gitops_branch.repo))
    client = github_client()
    op = operation()
    add_numbered = Numbered(NGINX_BOOKING.add_edit("example.com", operation=op))

    # when
    landed = client.commit(gitops_branch.name, NGINX_BOOKING.paths, add_numbered, operation=op)

    # then the first commit is returned with its SHA and the entries it owns, not a noop
    first, retry = github_standin.created_commits(gitops_branch.repo)[posted:]
    assert landed["status"] == "landed"
    assert landed["id"] == first != retry
    assert landed["observations"]["recovered"] is True
    assert landed["observations"]["attempts"] == add_numbered.calls == 2
    assert landed["observations"]["entries"] == BOOKING_EXAMPLE_ENTRIES
    # and exactly one commit of the operation is on the branch
    assert [c["sha"] for c in commits_of(git_observer, gitops_branch, op)] == [first]
    updates = github_standin.ref_updates(gitops_branch.repo, gitops_branch.name)
    assert [u["new"] for u in updates if u["source"] == "api"] == [first]
    # and compensation removes what it added
    remove_owned(client, NGINX_BOOKING, landed, operation=f"{op}:rollback")
    for path in (CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH):
        assert git_observer.file(gitops_branch.name, path) == SEED_FILES[path]


@pytest.mark.standin
def test_a_lost_ref_update_that_lands_before_the_next_read_is_not_reported_as_a_noop(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given the ref update's response is lost, and the PATCH, still in flight while the
    # backend looks for it, lands just before the backend reads the branch again: that read
    # finds the entries already present
    github_standin.faults.arm("update_ref", "late_ref_update", land_on="get_ref")
    posted = len(github_standin.created_commits(gitops_branch.repo))
    op = operation()

    # when
    landed = add_domain(
        github_client(), NGINX_BOOKING, "example.com", branch=gitops_branch.name, operation=op
    )

    # then the commit is returned with its SHA and entries, and no second one was made
    assert landed["status"] == "landed"
    assert landed["observations"]["recovered"] is True
    assert landed["observations"]["entries"] == BOOKING_EXAMPLE_ENTRIES
    assert github_standin.created_commits(gitops_branch.repo)[posted:] == [landed["id"]]
    ours = commits_of(git_observer, gitops_branch, op)
    assert [c["sha"] for c in ours] == [landed["id"]]
    assert ours[0]["parents"] == [gitops_branch.base]


@pytest.mark.standin
@pytest.mark.parametrize("pass_since", [True, False], ids=["since", "without-since"])
def test_a_retry_finds_the_earlier_calls_commit_that_lands_just_before_its_own(
    pass_since: bool,
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given a call that ended Transient with its first ref update still in flight
    posted = len(github_standin.created_commits(gitops_branch.repo))
    op = operation()
    add_numbered = Numbered(NGINX_BOOKING.add_edit("example.com", operation=op))
    failed = fail_with_the_ref_update_in_flight(
        github_standin, github_client(), gitops_branch, add_numbered, op
    )
    assert failed.details["since"] == gitops_branch.base

    # when the caller retries in a new call, which does not find the commit at first and
    # writes its own; the held PATCH lands just before the retry's, which is refused
    landed = github_client().commit(
        gitops_branch.name,
        NGINX_BOOKING.paths,
        add_numbered,
        operation=op,
        since=failed.details["since"] if pass_since else None,
    )

    # then the first call's commit is returned with its SHA and the entries it owns
    first, retry = github_standin.created_commits(gitops_branch.repo)[posted:]
    assert landed["status"] == "landed"
    assert landed["id"] == first != retry
    assert landed["observations"]["recovered"] is True
    assert landed["observations"]["entries"] == BOOKING_EXAMPLE_ENTRIES
    assert landed["observations"]["since"] == gitops_branch.base
    # and exactly one commit of the operation is on the branch
    assert [c["sha"] for c in commits_of(git_observer, gitops_branch, op)] == [first]
    updates = github_standin.ref_updates(gitops_branch.repo, gitops_branch.name)
    assert [u["new"] for u in updates if u["source"] == "api"] == [first]
    # and compensation removes what it added
    remove_owned(github_client(), NGINX_BOOKING, landed, operation=f"{op}:rollback")
    for path in (CALIPSO_CORS_PATH, DEIMOS_SERVER_NAMES_PATH):
        assert git_observer.file(gitops_branch.name, path) == SEED_FILES[path]


@pytest.mark.standin
def test_a_retry_searches_back_to_since_and_past_the_depth_reports_unknown_not_noop(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given a call that ended Transient with its ref update in flight, which then landed,
    # followed by more unrelated commits than the recovery depth
    posted = len(github_standin.created_commits(gitops_branch.repo))
    op = operation()
    add_numbered = Numbered(NGINX_BOOKING.add_edit("example.com", operation=op))
    failed = fail_with_the_ref_update_in_flight(
        github_standin, github_client(), gitops_branch, add_numbered, op
    )
    since = failed.details["since"]
    first = github_standin.land_late(gitops_branch.repo, gitops_branch.name)
    depth = SANDBOX_POLICY.recovery_depth
    for number in range(depth + 5):
        github_standin.commit_files(
            gitops_branch.repo, gitops_branch.name, {"NOTES.md": f"{number}\n"}, "docs: notes\n"
        )
    head = git_observer.head(gitops_branch.name)

    # when the operation is retried with since, searching the default depth and deeper
    with pytest.raises(Unknown) as shallow:
        add_domain(
            github_client(),
            NGINX_BOOKING,
            "example.com",
            branch=gitops_branch.name,
            operation=op,
            since=since,
        )
    deep = add_domain(
        github_client(retry=replace(SANDBOX_POLICY, recovery_depth=2 * depth)),
        NGINX_BOOKING,
        "example.com",
        branch=gitops_branch.name,
        operation=op,
        since=since,
    )

    # then a search that cannot reach since is Unknown, not a noop; one that can finds the
    # first call's commit; and neither retry committed
    assert shallow.value.details["reason"] == "recovery_depth"
    assert shallow.value.details["since"] == since == gitops_branch.base
    assert deep["id"] == first
    assert deep["observations"]["recovered"] is True
    assert deep["observations"]["entries"] == BOOKING_EXAMPLE_ENTRIES
    assert git_observer.head(gitops_branch.name) == head
    assert github_standin.created_commits(gitops_branch.repo)[posted:] == [first]
    assert [c["sha"] for c in commits_of(git_observer, gitops_branch, op)] == [first]


@pytest.mark.standin
def test_a_concurrent_ref_update_is_reapplied_on_the_new_head_without_force(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given someone lands a commit just before our ref update
    github_standin.faults.arm("update_ref", "concurrent_ref_update", path="CONCURRENT.md")

    # when
    landed = add_domain(
        github_client(),
        NGINX_HOSTS,
        "example.com",
        branch=gitops_branch.name,
        operation=operation(),
    )

    # then ours is re-applied on top of theirs, and both changes are there
    ours, theirs = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert ours["sha"] == landed["id"] and ours["parents"] == [theirs["sha"]]
    assert theirs["parents"] == [gitops_branch.base]
    assert landed["observations"]["attempts"] == 2
    assert git_observer.file(gitops_branch.name, "CONCURRENT.md") is not None
    assert {"example.com", "www.example.com"} <= set(nginx_hosts(git_observer, gitops_branch))
    updates = github_standin.ref_updates(gitops_branch.repo, gitops_branch.name)
    assert [(u["source"], u["forced"]) for u in updates] == [
        ("helper", False),
        ("fault", False),
        ("api", False),
    ]


@pytest.mark.standin
def test_a_branch_that_keeps_moving_gives_up_with_a_conflict(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given every ref update races with someone else's commit
    github_standin.faults.arm("update_ref", "concurrent_ref_update", times=None)
    client = github_client()

    # when
    with pytest.raises(Conflict) as raised:
        add_domain(
            client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=operation()
        )

    # then a bounded number of attempts, none of them forced, none landed
    attempts = client.policy.attempts
    assert raised.value.code == "422"
    assert NOT_FAST_FORWARD in raised.value.message
    commits = git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    assert len(commits) == attempts
    assert all(parse_message(c["message"]) is None for c in commits)
    assert "example.com" not in nginx_hosts(git_observer, gitops_branch)


@pytest.mark.standin
def test_throttled_requests_are_resent_after_the_wait_github_asks_for(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
    github_sleeps: list[float],
) -> None:
    # given a secondary rate limit on the commit and a 429 on the ref update
    commit_fault = github_standin.faults.arm("create_commit", "throttle", status=403, retry_after=2)
    ref_fault = github_standin.faults.arm("update_ref", "throttle", status=429, retry_after=1)

    # when
    landed = add_domain(
        github_client(),
        NGINX_HOSTS,
        "example.com",
        branch=gitops_branch.name,
        operation=operation(),
    )

    # then both were re-sent once, after the waits asked for, and one commit landed
    assert commit_fault.fired == ref_fault.fired == 1
    assert github_sleeps == [2.0, 1.0]
    assert landed["observations"]["attempts"] == 1
    assert [
        c["sha"] for c in git_observer.commits_since(gitops_branch.name, gitops_branch.base)
    ] == [landed["id"]]


@pytest.mark.standin
def test_throttling_that_does_not_end_raises_throttled_after_bounded_retries(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
    github_sleeps: list[float],
) -> None:
    # given
    github_standin.faults.arm("create_blob", "throttle", times=None, retry_after=1)
    client = github_client()

    # when
    with pytest.raises(Throttled) as raised:
        add_domain(
            client, NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=operation()
        )

    # then GitHub's status and message are kept, and nothing landed
    assert raised.value.code == "403"
    assert raised.value.message.startswith(SECONDARY_RATE_LIMIT)
    assert github_sleeps == [1.0] * client.policy.throttle_retries
    assert git_observer.commits_since(gitops_branch.name, gitops_branch.base) == []


@pytest.mark.standin
def test_a_wait_longer_than_the_policy_allows_raises_throttled_at_once(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    github_standin: GitHubStandIn,
    github_sleeps: list[float],
) -> None:
    # given a secondary rate limit without retry-after: GitHub says wait at least a minute
    github_standin.faults.arm("get_contents", "throttle", retry_after=None)

    # when
    with pytest.raises(Throttled) as raised:
        github_client().read(gitops_branch.name, [NGINX_VALUES_PATH])

    # then the engine, not a blocked worker, waits
    assert raised.value.details["retry_after"] == 60.0
    assert github_sleeps == []


@pytest.mark.standin
def test_server_errors_are_retried_on_reads_and_reapplied_on_create_commit(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
    github_sleeps: list[float],
) -> None:
    # given a 502 on a file read and one on the commit creation
    github_standin.faults.arm("get_contents", "server_error")
    github_standin.faults.arm("create_commit", "server_error", status=502)

    # when
    landed = add_domain(
        github_client(),
        NGINX_HOSTS,
        "example.com",
        branch=gitops_branch.name,
        operation=operation(),
    )

    # then the read was re-sent after a back-off, and the commit re-applied after a lookup
    assert len(github_sleeps) == 1
    assert landed["observations"]["attempts"] == 2
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 1


@pytest.mark.standin
def test_when_the_lookup_after_a_lost_response_fails_the_outcome_is_unknown(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given the ref update's response is lost, and listing commits fails from then on
    github_standin.faults.arm("update_ref", "lose_response")
    edit = NGINX_HOSTS.add_edit("example.com", operation="contract:unknown")

    def edit_then_break_listing(snapshot: Snapshot) -> Any:
        github_standin.faults.arm("list_commits", "server_error", times=None)
        return edit(snapshot)

    # when
    with pytest.raises(Unknown) as raised:
        github_client().commit(
            gitops_branch.name,
            NGINX_HOSTS.paths,
            edit_then_break_listing,
            operation="contract:unknown",
        )

    # then the caller is told it may have landed — and it did
    assert raised.value.details["lost"] == ["update_ref"]
    assert raised.value.details["since"] == gitops_branch.base
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 1


@pytest.mark.standin
def test_recovery_searches_past_the_first_page_and_stops_at_its_depth(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    git_observer: GitObserver,
    github_standin: GitHubStandIn,
) -> None:
    # given an operation that landed, then more commits than one page of the listing holds
    op = operation()
    landed = add_domain(
        github_client(), NGINX_HOSTS, "example.com", branch=gitops_branch.name, operation=op
    )
    for number in range(105):
        github_standin.commit_files(
            gitops_branch.repo, gitops_branch.name, {"NOTES.md": f"{number}\n"}, "docs: notes\n"
        )

    # when the operation is replayed searching 200 commits deep, and only 50
    deep = add_domain(
        github_client(retry=replace(SANDBOX_POLICY, recovery_depth=200)),
        NGINX_HOSTS,
        "example.com",
        branch=gitops_branch.name,
        operation=op,
    )
    shallow = add_domain(
        github_client(retry=replace(SANDBOX_POLICY, recovery_depth=50)),
        NGINX_HOSTS,
        "example.com",
        branch=gitops_branch.name,
        operation=op,
    )

    # then the deep search finds the commit on the second page; past the depth the entries
    # are found present instead, and still no second commit is made
    assert deep["id"] == landed["id"] and deep["observations"]["recovered"] is True
    assert shallow["status"] == "noop"
    assert len(git_observer.commits_since(gitops_branch.name, gitops_branch.base)) == 106


# -- the stand-in's own contract ------------------------------------------------------------------


@pytest.mark.standin
def test_standin_answers_401_bad_credentials_without_the_token(
    github_standin: GitHubStandIn, gitops_branch: GitOpsBranch
) -> None:
    url = f"{github_standin.url}/api/v3/repos/{gitops_branch.repo}"

    missing = requests.get(url, timeout=5)
    wrong = requests.get(url, headers={"Authorization": "token nope"}, timeout=5)
    right = requests.get(url, headers={"Authorization": f"token {TOKEN}"}, timeout=5)

    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["message"] == "Bad credentials"
    assert right.status_code == 200
    assert right.json()["url"] == url
    assert right.json()["default_branch"] == "main"


@pytest.mark.standin
def test_standin_refuses_a_non_fast_forward_ref_update_unless_forced(
    github_standin: GitHubStandIn, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given a commit based on the base, and a teammate who moved the branch meanwhile
    api = f"{github_standin.url}/api/v3/repos/{gitops_branch.repo}"
    headers = {"Authorization": f"token {TOKEN}"}
    base = requests.get(f"{api}/git/commits/{gitops_branch.base}", headers=headers, timeout=5)
    stale = requests.post(
        f"{api}/git/commits",
        headers=headers,
        json={
            "message": "stale\n",
            "tree": base.json()["tree"]["sha"],
            "parents": [gitops_branch.base],
        },
        timeout=5,
    ).json()["sha"]
    moved = git_observer.commit_files(gitops_branch.name, {"NOTES.md": "x\n"}, "docs: notes\n")
    ref_url = f"{api}/git/refs/heads/{gitops_branch.name}"

    # when
    refused = requests.patch(
        ref_url, headers=headers, json={"sha": stale, "force": False}, timeout=5
    )
    unchanged = git_observer.head(gitops_branch.name)
    forced = requests.patch(ref_url, headers=headers, json={"sha": stale, "force": True}, timeout=5)

    # then
    assert refused.status_code == 422
    assert refused.json()["message"] == NOT_FAST_FORWARD
    assert unchanged == moved
    assert forced.status_code == 200
    assert forced.json()["object"]["sha"] == stale
    assert github_standin.ref_updates(gitops_branch.repo, gitops_branch.name)[-1]["forced"] is True


@pytest.mark.standin
def test_standin_lists_branch_commits_page_by_page(
    github_standin: GitHubStandIn, gitops_branch: GitOpsBranch, git_observer: GitObserver
) -> None:
    # given two commits on the branch
    first = git_observer.commit_files(gitops_branch.name, {"A.md": "a\n"}, "docs: a\n")
    second = git_observer.commit_files(gitops_branch.name, {"B.md": "b\n"}, "docs: b\n")
    api = f"{github_standin.url}/api/v3/repos/{gitops_branch.repo}"
    headers = {"Authorization": f"token {TOKEN}"}

    # when
    page1 = requests.get(
        f"{api}/commits",
        params={"sha": gitops_branch.name, "per_page": "1"},
        headers=headers,
        timeout=5,
    )
    page2 = requests.get(page1.links["next"]["url"], headers=headers, timeout=5)

    # then
    assert [c["sha"] for c in page1.json()] == [second]
    assert [c["sha"] for c in page2.json()] == [first]
    assert page1.json()[0]["commit"]["message"] == "docs: b\n"
    assert page1.json()[0]["parents"][0]["sha"] == first


@pytest.mark.standin
def test_seed_demo_creates_the_platform_repositories_once_and_fast(tmp_path: Path) -> None:
    # given a fresh stand-in
    with GitHubStandIn(root=tmp_path) as standin:
        # when
        started = time.monotonic()
        first = standin.seed_demo()
        elapsed = time.monotonic() - started
        second = standin.seed_demo()

        # then (about 0.5 s idle; the bound leaves room for a loaded machine and still catches
        # a wait per write, as PyGithub's seconds_between_writes would add)
        assert elapsed < 10.0
        repos = first["repositories"]
        assert set(repos) == {github_seed.HELM_REPO, github_seed.BOOKING_REPO}
        assert all(r["created"] for r in repos.values())
        assert not any(r["created"] for r in second["repositories"].values())
        for name, summary in repos.items():
            assert second["repositories"][name]["head"] == summary["head"]
            assert standin.head(name, "main") == summary["head"]
        # and the files are what the editors read, at the head the ArgoCD stand-in would see
        helm, booking = github_seed.HELM_REPO, github_seed.BOOKING_REPO
        nginx = standin.read_file(helm, "main", NGINX_VALUES_PATH)
        kirby = standin.read_file(helm, "main", MYSTIQUE_VALUES_PATH)
        calipso = standin.read_file(booking, "main", CALIPSO_CORS_PATH)
        deimos = standin.read_file(booking, "main", DEIMOS_SERVER_NAMES_PATH)
        assert (
            nginx is not None and kirby is not None and calipso is not None and deimos is not None
        )
        assert "shop.acme.com" in editors.NGINX_HOSTS.entries(nginx)
        assert editors.KIRBY_ROUTING.entries(kirby)
        assert "shop.acme.com" in editors.CALIPSO_CORS.entries(calipso)
        assert "www.shop.acme.com" in editors.DEIMOS_SERVER_NAMES.entries(deimos)
        latest = parse_message(standin.log(booking, "main")[0]["message"])
        assert latest is not None and latest.subject == "feat(nginx-booking): add shop.acme.com"
        assert standin.head(helm, "no-such-branch") is None
        assert standin.head("platform/no-such-repo", "main") is None


@pytest.mark.standin
@pytest.mark.services  # the budget lives in Redis
def test_github_s_secondary_limit_closes_the_budget_for_every_process(
    github_client: Client,
    gitops_branch: GitOpsBranch,
    github_standin: GitHubStandIn,
    github_sleeps: list[float],
    settings: Any,
) -> None:
    # given: the stand-in metering as GitHub does, two content-creating requests a minute,
    # and a budget shared through Redis
    budget = RedisBudget(
        str(settings.CACHES["default"]["LOCATION"]), {"github": Rate(10.0, 10)}, longest=1.0
    )
    account = github_client()._account
    budget._redis.delete(budget.key("github", account))  # as a new token's: nothing spent
    budget_install(budget)
    github_standin.meter(Limits(writes_per_minute=2))
    try:
        # when: a commit needs more than two writes
        with pytest.raises(Throttled):
            add_domain(
                github_client(),
                NGINX_HOSTS,
                "example.com",
                branch=gitops_branch.name,
                operation=operation(),
            )
        # then: GitHub told every answer's limits, refused the third write with its secondary
        # limit's message and Retry-After, and that closed the budget: another process's next
        # request would wait about a minute (refused here, past the budget's longest wait)
        assert github_standin.journal()["throttled"].get("secondary", 0) >= 1
        with pytest.raises(Throttled) as closed:
            budget.draw("github", account, "GET repos")
        assert 30 < closed.value.details["retry_after_seconds"] <= 62
    finally:
        budget_install(None)
        github_standin.meter(None)
