"""update-lambda-version end to end: a real Celery worker, real PostgreSQL and Redis, the AWS
stand-in (seeded like `make run`: fleets checkout-api and search-api, versions 1-3, staging ->
3, production -> 2). Alias updates are counted on the stand-in's side: every UpdateAlias that
reached its Lambda backend, by function, with Lambda's answer (:class:`JournalledAws`).

Most tests make a fleet of their own (:func:`make_fleet`) so that each starts from a known
state; the first runs on the seeded fleet."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import boto3
import pytest

from executions.models import Execution
from lanes.models import Lane
from providers.sandbox.aws import AwsStandIn, _await_update, _code
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_engine import assert_gapless, event_types
from tests.support import aws_world
from tests.support.aws_world import JournalledAws
from tests.support.helpers import submit
from tests.support.kill_points_lambda import ENABLE, foreign_change_arm
from workflows.update_lambda_version.stages import SETTLE_TIMEOUT_SECONDS

pytestmark = [
    pytest.mark.worker,
    pytest.mark.standin,
    pytest.mark.django_db(transaction=True),
]

WORKFLOW = "update-lambda-version"


@pytest.fixture(scope="module")
def standin() -> Iterator[JournalledAws]:
    with aws_world.standin_started(JournalledAws, lambda_update_delay=0.1) as aws:
        yield cast("JournalledAws", aws)


def worker_env(standin: AwsStandIn) -> dict[str, str]:
    return {
        "ALFRED_PROVIDERS": "sandbox",
        "AWS_ENDPOINT_URL": standin.url,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        ENABLE: "1",  # the foreign writer of tests.support.kill_points_lambda (and its kill points)
    }


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    """One worker for the module, on the stand-in's providers."""
    with aws_world.aws_worker(standin, "lambda", **worker_env(standin)) as worker:
        yield worker


@pytest.fixture
def lambda_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    """The module's worker, idle again before the database is flushed (see
    ``tests.conftest.shared_worker``)."""
    yield aws_world.alive(module_worker)
    quiesce()


@pytest.fixture
def client(standin: AwsStandIn) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=standin.url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def make_fleet(
    client: Any,
    *,
    size: int = 2,
    versions: int = 3,
    aliases: dict[str, str] | None = None,
) -> tuple[str, list[str]]:
    """A fleet of its own: ``size`` functions tagged ``alfred:fleet=<fleet>``, versions 1 ..
    ``versions`` published, ``aliases`` (default staging -> 2, production -> 1)."""
    fleet = f"fleet-{uuid.uuid4().hex[:8]}"
    role = boto3.client(
        "iam",
        endpoint_url=client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    ).get_role(RoleName="alfred-sandbox-lambda")["Role"]["Arn"]
    names = [f"{fleet}-{i}" for i in range(size)]
    for name in names:
        client.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler="index.handler",
            Code={"ZipFile": _code(name, 1)},
            Publish=True,
            Tags={"alfred:fleet": fleet},
        )
    for build in range(2, versions + 1):
        for name in names:
            publish(client, name, build)
    for name in names:
        for alias, version in (aliases or {"staging": "2", "production": "1"}).items():
            client.create_alias(FunctionName=name, Name=alias, FunctionVersion=version)
    return fleet, names


def publish(client: Any, name: str, build: int) -> str:
    client.update_function_code(FunctionName=name, ZipFile=_code(name, build))
    _await_update(client, name)
    return str(client.publish_version(FunctionName=name)["Version"])


def aliases(client: Any, names: list[str], alias: str) -> dict[str, str]:
    return {
        name: client.get_alias(FunctionName=name, Name=alias)["FunctionVersion"] for name in names
    }


def terminal(execution_id: str, *, rollback: bool = False, timeout: float = 45) -> Execution:
    def done() -> Execution | None:
        execution = Execution.objects.select_related("current_run").get(pk=execution_id)
        run = execution.current_run
        ended = execution.terminal and run is not None and (run.kind == "rollback") == rollback
        return execution if ended else None

    return wait_for(done, timeout=timeout, interval=0.1)


def roll_back(operator_api: Any, execution_id: str) -> None:
    answer = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "test"}, format="json"
    )
    assert answer.status_code == 202, answer.content


def lane_free(key: str) -> bool:
    lane = Lane.objects.filter(key=key).values_list("state", "owner_id").first()
    return lane is None or lane == ("free", None)


def test_a_seeded_fleet_moves_to_the_version_and_the_other_environment_is_untouched(
    api, lambda_worker, standin, client
):
    # given: checkout-api's production aliases at 2, staging at 3 (the seed)
    names = ["checkout-api-cart", "checkout-api-orders", "checkout-api-payments"]
    staging = aliases(client, names, "staging")
    since = len(standin.alias_updates)

    # when
    body = submit(
        api, WORKFLOW, {"target": "checkout-api", "environment": "production", "version": 3}
    ).json()
    execution = terminal(body["id"])

    # then: every production alias at 3 by ONE update each; staging as it was
    assert execution.status == "succeeded", execution.error
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    assert aliases(client, names, "staging") == staging
    assert standin.applied(since) == Counter(names)
    assert_gapless(execution.id)
    assert wait_for(lambda: lane_free("lambda:checkout-api:production"), timeout=10)
    assert event_types(execution.id)[-2:] == ["execution.succeeded", "lane.released"]


def test_functions_already_at_the_version_are_left_alone(api, lambda_worker, standin, client):
    # given: one function of three already at the version
    fleet, names = make_fleet(client, size=3)
    client.update_alias(FunctionName=names[1], Name="production", FunctionVersion="3")
    since = len(standin.alias_updates)

    # when
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution = terminal(body.json()["id"])

    # then: the two others were moved, it was not sent an update
    assert execution.status == "succeeded", execution.error
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    assert standin.applied(since) == Counter([names[0], names[2]])
    stage = execution.current_run.stages.get(name="update_aliases")
    assert stage.output["unchanged"] == [names[1]]


@pytest.mark.parametrize(
    ("target", "version", "code"),
    [
        ("no-such-fleet", "3", "fleet_not_found"),
        ("search-api", "9", "version_not_published"),
    ],
)
def test_a_readiness_failure_frees_the_lane_for_the_next_queued_execution(
    target, version, code, api, lambda_worker, standin
):
    # given: the first plan is slowed (ListFunctions throttled once), so the second request
    # queues behind it on the lane
    standin.faults.arm("ListFunctions", "throttle", times=1)
    request = {"target": target, "environment": "production", "version": version}
    first = submit(api, WORKFLOW, request).json()
    second = submit(api, WORKFLOW, {**request, "ticket_ids": ["REL-1"]}).json()
    assert second["lane"]["role"] == "queued"
    since = len(standin.alias_updates)

    # when
    failed = terminal(first["id"])

    # then: a readiness failure, which let the lane go: the queued one ran (to the same
    # failure), and the lane is free
    assert failed.status == "failed"
    assert failed.error["code"] == "readiness_failure"
    assert failed.error["readiness"]["code"] == code
    nxt = terminal(second["id"])
    assert nxt.status == "failed" and nxt.error["readiness"]["code"] == code
    assert wait_for(lambda: lane_free(f"lambda:{target}:production"), timeout=10)
    assert standin.applied(since) == Counter()
    if code == "version_not_published":
        checks = failed.error["readiness"]["checks"]
        assert {c["name"] for c in checks if not c["ok"]} == {
            "version 9 of search-api-indexer",
            "version 9 of search-api-query",
        }
        assert "indexer" in failed.error["message"] and "query" in failed.error["message"]


def test_a_request_for_a_fleet_that_does_not_exist_leaves_no_lane_behind(
    api, lambda_worker, standin
):
    # given: a request for a fleet no function is tagged with: it takes a new lane
    key = "lambda:nope-fleet:production"
    body = submit(
        api, WORKFLOW, {"target": "nope-fleet", "environment": "production", "version": "1"}
    ).json()
    assert body["lane"] == {"key": key, "role": "owner", "state": "held", "position": None}
    since = len(standin.alias_updates)

    # when: its plan finds no such fleet
    failed = terminal(body["id"])

    # then: a readiness failure, and the lane it alone ever held is gone, not listed forever
    assert failed.error["readiness"]["code"] == "fleet_not_found"
    wait_for(lambda: not Lane.objects.filter(key=key).exists(), timeout=10)
    assert key not in {lane["key"] for lane in api.get("/api/v1/lanes").json()}
    assert api.get(f"/api/v1/lanes/{key}").status_code == 404
    assert api.get(f"/api/v1/executions/{body['id']}").json()["lane"]["state"] is None
    assert standin.applied(since) == Counter()


def test_an_alias_changed_after_the_plan_is_refused_by_revision_id_and_not_overwritten(
    api, lambda_worker, standin, client
):
    # given: another writer moves the first function's alias after the plan froze it
    fleet, names = make_fleet(client)
    foreign_change_arm(fleet, function=names[0], alias="production", version="2")
    since = len(standin.alias_updates)

    # when
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution = terminal(body.json()["id"])

    # then: Lambda refused Alfred's update (RevisionId), reported; the other writer's version
    # stands, and nothing else was moved
    assert execution.status == "failed"
    assert execution.error["code"] == "alias_changed"
    assert execution.error["function"] == names[0]
    assert execution.error["observed"]["version"] == "2"
    assert aliases(client, names, "production") == {names[0]: "2", names[1]: "1"}
    ours = [u for u in standin.alias_updates[since:] if u[2] == "3"]
    assert ours == [(names[0], "production", "3", 412)]


def test_asked_again_after_a_refused_update_it_plans_again_and_finishes(
    api, operator_api, lambda_worker, standin, client
):
    # given: an execution refused by RevisionId (another writer moved an alias after plan)
    fleet, names = make_fleet(client)
    foreign_change_arm(fleet, function=names[0], alias="production", version="2")
    data = {"target": fleet, "environment": "production", "version": "3"}
    first = submit(api, WORKFLOW, data).json()
    assert terminal(first["id"]).error["code"] == "alias_changed"

    # when: it is asked for again (a new key, the same operation), and an operator who
    # looked at the fleet lets its lane go on
    again = submit(api, WORKFLOW, data).json()
    recovered = operator_api.post(
        f"/api/v1/lanes/lambda:{fleet}:production/recover",
        {"expected_owner": first["id"], "reason": "checked the fleet"},
        format="json",
    )

    # then: the same execution continued, planned from what the aliases are now (fresh
    # RevisionIds), and moved every function to the version
    assert again["id"] == first["id"] and recovered.status_code == 202, recovered.content
    execution = terminal(first["id"])
    assert execution.status == "succeeded", execution.error
    assert aliases(client, names, "production") == {names[0]: "3", names[1]: "3"}


def test_rollback_restores_what_the_receipts_recorded_and_ends_rolled_back(
    api, operator_api, lambda_worker, standin, client
):
    # given: a fleet moved from 1 to 3 on production
    fleet, names = make_fleet(client, size=3)
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution_id = body.json()["id"]
    assert terminal(execution_id).status == "succeeded"
    since = len(standin.alias_updates)

    # when
    roll_back(operator_api, execution_id)
    execution = terminal(execution_id, rollback=True)

    # then: each alias back at 1 by ONE update; staging untouched
    assert execution.status == "rolled_back", execution.error
    assert aliases(client, names, "production") == dict.fromkeys(names, "1")
    assert aliases(client, names, "staging") == dict.fromkeys(names, "2")
    assert standin.applied(since) == Counter(names)
    assert wait_for(lambda: lane_free(f"lambda:{fleet}:production"), timeout=10)
    assert event_types(execution_id)[-2:] == ["execution.rolled_back", "lane.released"]


def test_a_rollback_over_an_alias_changed_since_fails_drifted_and_leaves_it(
    api, operator_api, lambda_worker, standin, client
):
    # given: a fleet moved to 3, and then the last function's alias (the first the rollback
    # reaches) moved away and back to 3 by someone else (a new RevisionId)
    fleet, names = make_fleet(client)
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution_id = body.json()["id"]
    assert terminal(execution_id).status == "succeeded"
    client.update_alias(FunctionName=names[-1], Name="production", FunctionVersion="2")
    client.update_alias(FunctionName=names[-1], Name="production", FunctionVersion="3")
    since = len(standin.alias_updates)

    # when
    roll_back(operator_api, execution_id)
    execution = terminal(execution_id, rollback=True)

    # then: failed drifted, naming it; nothing moved
    assert execution.status == "failed"
    assert execution.error["code"] == "drifted"
    assert [d["function"] for d in execution.error["differences"]] == [names[-1]]
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    assert standin.applied(since) == Counter()


def test_a_lost_response_is_recovered_without_a_second_update_and_its_rollback_holds_the_lane(
    api, operator_api, lambda_worker, standin, client
):
    # given: the answer to the first UpdateAlias is lost (the update applied)
    fleet, names = make_fleet(client)
    standin.faults.arm("UpdateAlias", "lose_response", times=1)
    since = len(standin.alias_updates)
    request = {"target": fleet, "environment": "production", "version": "3"}

    # when
    execution_id = submit(api, WORKFLOW, request).json()["id"]
    execution = terminal(execution_id)

    # then: recovered by reading the alias back; one update per function
    assert execution.status == "succeeded", execution.error
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    assert standin.applied(since) == Counter(names)

    # and when: it is rolled back, the recovered update (whose it is, nothing proves) waits
    # for an operator; meanwhile the lane is the rollback's and a new request queues
    roll_back(operator_api, execution_id)

    def paused() -> Any:
        resource = operator_api.get(f"/api/v1/executions/{execution_id}").json()
        return resource["status"] == "paused" and resource["pending_approval"]

    pending = wait_for(paused, timeout=30, interval=0.1)
    assert pending["stage"] == "rollback"
    assert pending["plan"]["function"] == names[0]
    queued = submit(api, WORKFLOW, {**request, "ticket_ids": ["REL-2"]}).json()
    assert queued["lane"]["role"] == "queued"
    assert Lane.objects.get(key=f"lambda:{fleet}:production").owner_id == execution_id
    assert Execution.objects.get(pk=queued["id"]).status == "queued"

    # and when: the operator approves
    operator_api.post(
        f"/api/v1/executions/{execution_id}/approve",
        {"plan_hash": pending["plan_hash"], "reason": "checked: ours"},
        format="json",
    )

    # then: rolled back, and only then the queued execution runs (moving the fleet again)
    assert terminal(execution_id, rollback=True).status == "rolled_back"
    assert terminal(queued["id"]).status == "succeeded"
    assert standin.applied(since) == Counter(names * 3)


def test_the_wait_holds_until_the_version_is_successful_and_a_failed_update_fails(
    api, lambda_worker, standin, client
):
    # given: version 4 of both functions still updating (held); one of the updates will end
    # Failed
    fleet, names = make_fleet(client, versions=3)
    standin.faults.arm("PublishVersion", "hold_update", times=None)
    standin.faults.arm("PublishVersion", "fail_update", times=1)
    assert publish(client, names[1], 4) == "4"
    assert publish(client, names[0], 4) == "4"

    # when
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "staging", "version": "4"})
    execution_id = body.json()["id"]

    # then: it waits (no worker held) while the version is InProgress ...
    wait_for(lambda: Execution.objects.get(pk=execution_id).status == "waiting", timeout=20)
    standin.faults.clear()

    # ... and fails with Lambda's reason once the other's is Failed
    execution = terminal(execution_id)
    assert execution.status == "failed"
    assert execution.error["code"] == "update_failed"
    assert execution.error["function"] == names[1]
    assert "fail_update" in execution.error["reason"]


def test_an_update_that_never_settles_fails_after_the_wait_s_own_timeout(
    api, lambda_worker, standin, client, durable_clock
):
    # given: alias moves that stay InProgress
    fleet, names = make_fleet(client, versions=3)
    standin.faults.arm("UpdateAlias", "hold_update", times=None)
    try:
        body = submit(api, WORKFLOW, {"target": fleet, "environment": "staging", "version": "3"})
        execution_id = body.json()["id"]
        wait_for(lambda: Execution.objects.get(pk=execution_id).status == "waiting", timeout=20)

        # when: the wait's 15 minutes pass (the durable clock moved on, not waited for)
        durable_clock.advance(execution_id, SETTLE_TIMEOUT_SECONDS)

        # then
        execution = terminal(execution_id)
    finally:
        standin.faults.clear()
    assert execution.status == "failed"
    assert execution.error["code"] == "wait_timed_out", execution.error
    assert aliases(client, names, "staging") == dict.fromkeys(names, "3")  # moved: a rollback's


def test_a_slow_alias_move_holds_the_wait_and_a_failed_one_fails_the_run(
    api, lambda_worker, standin, client
):
    # given: alias moves that stay InProgress (held), the first of which will end Failed —
    # faults armed on UpdateAlias itself, as docs/providers.md says they can be
    fleet, names = make_fleet(client, versions=3)
    since = len(standin.alias_updates)
    standin.faults.arm("UpdateAlias", "hold_update", times=None)
    standin.faults.arm("UpdateAlias", "fail_update", times=1)

    # when
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "staging", "version": "3"})
    execution_id = body.json()["id"]

    # then: both aliases moved, once each, and the run waits (no worker held) while the
    # versions they moved to are InProgress ...
    wait_for(lambda: Execution.objects.get(pk=execution_id).status == "waiting", timeout=20)
    wait_for(lambda: standin.applied(since) == Counter(names), timeout=20)
    assert aliases(client, names, "staging") == dict.fromkeys(names, "3")
    assert Execution.objects.get(pk=execution_id).status == "waiting"
    standin.faults.clear()

    # ... and fails with Lambda's reason once the first one's is Failed, moving nothing more
    execution = terminal(execution_id)
    assert execution.status == "failed"
    assert execution.error["code"] == "update_failed"
    assert execution.error["function"] == names[0]
    assert "fail_update" in execution.error["reason"]
    assert standin.applied(since) == Counter(names)


def test_a_dry_run_simulates_and_moves_nothing(api, lambda_worker, standin, client):
    fleet, names = make_fleet(client)
    since = len(standin.alias_updates)

    body = submit(
        api,
        WORKFLOW,
        {"target": fleet, "environment": "production", "version": "3", "dry_run": True},
    )
    execution = terminal(body.json()["id"])

    assert execution.status == "succeeded", execution.error
    assert standin.alias_updates[since:] == []
    assert aliases(client, names, "production") == dict.fromkeys(names, "1")
    verify = execution.current_run.stages.get(name="verify")
    assert verify.output["verified"] == "simulated"


def test_a_fleet_asked_back_to_a_version_a_later_execution_replaced_gets_a_new_execution(
    api, lambda_worker, standin, client
):
    # given: staging moved to 1 for REL-1 (execution A), then to 3 by another execution (B)
    fleet, names = make_fleet(client)
    back_to_1 = {"target": fleet, "environment": "staging", "version": 1, "ticket_ids": ["REL-1"]}
    first = submit(api, WORKFLOW, back_to_1).json()
    assert terminal(first["id"]).status == "succeeded"
    later = submit(api, WORKFLOW, {**back_to_1, "version": 3, "ticket_ids": []}).json()
    assert terminal(later["id"]).status == "succeeded"
    assert aliases(client, names, "staging") == dict.fromkeys(names, "3")
    since = len(standin.alias_updates)

    # when: the same operation as A is asked for again, under a new key
    again = submit(api, WORKFLOW, back_to_1)

    # then: not A's old "succeeded": a new execution that repeats A, and staging is at 1 again
    assert again.status_code == 202, again.content
    body = again.json()
    assert body["acceptance"]["outcome"] == "created"
    assert body["id"] != first["id"] and body["predecessor"] == first["id"]
    execution = terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert aliases(client, names, "staging") == dict.fromkeys(names, "1")
    assert standin.applied(since) == Counter(names)
    # and asked for once more, that new execution stands (nothing replaced it)
    once_more = submit(api, WORKFLOW, back_to_1).json()
    assert once_more["id"] == body["id"] and once_more["acceptance"]["outcome"] == "reused"


def test_a_version_a_later_execution_set_and_that_was_rolled_back_is_still_reused(
    api, operator_api, lambda_worker, standin, client
):
    # given: staging moved to 1 (A), then to 3 (B), and B rolled back (staging at 1 again)
    fleet, names = make_fleet(client)
    back_to_1 = {"target": fleet, "environment": "staging", "version": 1}
    first = submit(api, WORKFLOW, back_to_1).json()
    assert terminal(first["id"]).status == "succeeded"
    later = submit(api, WORKFLOW, {**back_to_1, "version": 3}).json()
    assert terminal(later["id"]).status == "succeeded"
    roll_back(operator_api, later["id"])
    assert terminal(later["id"], rollback=True).status == "rolled_back"
    assert wait_for(lambda: lane_free(f"lambda:{fleet}:staging"), timeout=10)

    # when: A's operation is asked for again
    again = submit(api, WORKFLOW, back_to_1).json()

    # then: A stands for it: what it did is what the fleet runs
    assert again["id"] == first["id"] and again["acceptance"]["outcome"] == "reused"
    assert aliases(client, names, "staging") == dict.fromkeys(names, "1")
