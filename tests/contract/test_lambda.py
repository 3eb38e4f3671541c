"""Lambda adapter contract: fleets by tag, aliases moved with RevisionId, update status, restore.

Each test gets a fresh fleet of two functions (versions 1-3; staging -> 3, production -> 2).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from providers.aws.clients import AwsClients, translate
from providers.aws.lambda_ import Lambda
from providers.errors import Conflict, NotFound, Rejected, Transient
from providers.handles import StopUnsupported
from providers.sandbox.aws import AwsStandIn
from tests.contract.fixtures.aws import (
    Boto,
    Fleet,
    await_settled,
    eventually,
    function_code,
    updates_held,
)


def test_fleet_discovered_by_tag(aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto) -> None:
    # given: an untagged function and one of another fleet next to the fleet
    client = aws_boto.lambda_
    role = client.get_function(FunctionName=aws_fleet.functions[0])["Configuration"]["Role"]
    strangers = [f"{aws_fleet.target}-untagged", f"{aws_fleet.target}-other"]
    for name, tags in zip(strangers, ({}, {"alfred:fleet": "someone-else"}), strict=True):
        client.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler="index.handler",
            Code={"ZipFile": function_code(1)},
            Tags=tags,
        )
    try:
        # when
        fleet = aws_lambda.fleet(aws_fleet.target)
    finally:
        for name in strangers:
            client.delete_function(FunctionName=name)

    # then
    assert [f["name"] for f in fleet] == aws_fleet.functions
    assert all(f["arn"].endswith(f":function:{f['name']}") for f in fleet)
    assert aws_lambda.fleet(f"{aws_fleet.target}-nobody") == []


def test_alias_reports_version_and_revision(aws_lambda: Lambda, aws_fleet: Fleet) -> None:
    # when
    production = aws_lambda.alias(aws_fleet.functions[0], "production")
    staging = aws_lambda.alias(aws_fleet.functions[0], "staging")

    # then
    assert (production["version"], staging["version"]) == ("2", "3")
    assert production["revision_id"] and production["arn"].endswith(":production")
    with pytest.raises(NotFound):
        aws_lambda.alias(aws_fleet.functions[0], "canary")


def test_update_alias_moves_the_version(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_patience: float
) -> None:
    # given
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")

    # when
    moved = aws_lambda.update_alias(planned, version="3")

    # then: the alias is at 3 with a new RevisionId, and version 3's update is settled
    now = aws_lambda.alias(function, "production")
    assert now["version"] == "3"
    assert now["revision_id"] != planned["revision_id"]
    assert moved["kind"] == "alias_update"
    assert moved["id"] == planned["arn"]
    assert moved["observations"]["from_version"] == "2"
    assert moved["observations"]["to_version"] == "3"
    assert moved["observations"]["revision_id"] == now["revision_id"]
    assert moved["observations"]["ownership"] == "proven"
    settled = eventually(
        lambda: aws_lambda.inspect(moved), lambda h: h["done"], timeout=aws_patience
    )
    assert (settled["status"], settled["ok"]) == ("Successful", True)


@pytest.mark.standin
def test_rerun_after_the_update_landed_is_recovered_not_a_conflict(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: the update landed, and the worker died before it stored the handle
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    aws_lambda.update_alias(planned, version="3")

    # when: the step runs again with its stored plan (whose RevisionId the update consumed)
    again = aws_lambda.update_alias(planned, version="3")

    # then: the alias is read first and found at the version; nothing sent again
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert again["observations"]["recovered"] is True
    assert again["observations"]["already_applied"] is True
    assert again["observations"]["ownership"] == "unproven"
    assert (
        again["observations"]["revision_id"]
        == aws_lambda.alias(function, "production")["revision_id"]
    )


def test_revision_id_conflict(aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto) -> None:
    # given: the plan read the alias, then someone else moved it
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")
    aws_boto.lambda_.update_alias(FunctionName=function, Name="production", FunctionVersion="1")

    # when
    with pytest.raises(Conflict) as caught:
        aws_lambda.update_alias(planned, version="3")

    # then: the other writer's version stands
    assert caught.value.code == "PreconditionFailedException"
    assert aws_lambda.alias(function, "production")["version"] == "1"


@pytest.mark.standin
def test_lost_alias_update_response_recovered(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: Lambda applies the update, but the response is lost
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    aws_standin.faults.arm("UpdateAlias", "lose_response")

    # when
    moved = aws_lambda.update_alias(planned, version="3")

    # then: recovered by reading the alias; exactly one UpdateAlias performed
    assert moved["observations"]["recovered"] is True
    assert moved["observations"]["ownership"] == "unproven"
    assert moved["observations"]["alias_version"] == "3"
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert aws_lambda.alias(function, "production")["version"] == "3"


@pytest.mark.standin
def test_dropped_alias_update_resent_once(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: the update is lost on the way in
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    aws_standin.faults.arm("UpdateAlias", "drop_request")

    # when
    moved = aws_lambda.update_alias(planned, version="3")

    # then
    assert moved["observations"]["recovered"] is False
    assert "resent_after" in moved["observations"]
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert aws_lambda.alias(function, "production")["version"] == "3"


@pytest.mark.standin
def test_throttled_alias_calls_retried(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given
    function = aws_fleet.functions[0]
    read = aws_standin.faults.arm("GetAlias", "throttle")
    planned = aws_lambda.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    write = aws_standin.faults.arm("UpdateAlias", "throttle", times=2)

    # when
    aws_lambda.update_alias(planned, version="3")

    # then: the read by botocore, the update by the adapter; one update performed
    assert (read.fired, write.fired) == (1, 2)
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert aws_lambda.alias(function, "production")["version"] == "3"


def test_update_status_in_progress_then_successful(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto, aws_patience: float
) -> None:
    # given
    function = aws_fleet.functions[0]
    client = aws_boto.lambda_

    # when: the code is updated (and observed while the update runs), then published
    with updates_held("UpdateFunctionCode", function):
        client.update_function_code(FunctionName=function, ZipFile=function_code(4))
        updating = aws_lambda.version_status(function, "$LATEST")
    await_settled(client, function, timeout=aws_patience)
    latest = aws_lambda.version_status(function, "$LATEST")
    published = client.publish_version(FunctionName=function)["Version"]

    # then
    assert updating["last_update_status"] == "InProgress"
    assert latest["last_update_status"] == "Successful"
    assert published == "4"
    settled = eventually(
        lambda: aws_lambda.version_status(function, "4"),
        lambda s: s["last_update_status"] != "InProgress",
        timeout=aws_patience,
    )
    assert (settled["state"], settled["last_update_status"]) == ("Active", "Successful")


def test_update_refused_while_another_is_in_progress(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto
) -> None:
    # given
    function = aws_fleet.functions[0]
    client = aws_boto.lambda_
    with updates_held("UpdateFunctionCode", function):
        client.update_function_code(FunctionName=function, ZipFile=function_code(4))

        # when / then: Lambda refuses to publish during the update
        with pytest.raises(client.exceptions.ResourceConflictException) as caught:
            client.publish_version(FunctionName=function)
    assert "An update is in progress" in str(caught.value)


@pytest.mark.standin
def test_alias_update_done_when_the_version_settles(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto, aws_patience: float
) -> None:
    # given: a version published a moment ago, still InProgress
    function = aws_fleet.functions[0]
    client = aws_boto.lambda_
    client.update_function_code(FunctionName=function, ZipFile=function_code(4))
    await_settled(client, function, timeout=aws_patience)
    with updates_held("PublishVersion", function):
        version = client.publish_version(FunctionName=function)["Version"]

        # when
        moved = aws_lambda.update_alias(aws_lambda.alias(function, "staging"), version=version)

        # then: not done while the version's update runs
        assert (moved["status"], moved["done"]) == ("InProgress", False)
        assert aws_lambda.inspect(moved)["done"] is False

    # and done once it has settled
    settled = eventually(
        lambda: aws_lambda.inspect(moved), lambda h: h["done"], timeout=aws_patience
    )
    assert (settled["status"], settled["ok"]) == ("Successful", True)


@pytest.mark.standin
@pytest.mark.parametrize("fault", ["throttle", "drop_request"])
def test_alias_moved_but_version_unread_is_not_an_error(
    fault: str,
    aws_clients: AwsClients,
    aws_fleet: Fleet,
    aws_standin: AwsStandIn,
    aws_patience: float,
) -> None:
    # given: an adapter whose reads are not retried, and the read of the version right after
    # UpdateAlias fails
    lambda_ = Lambda(clients=dataclasses.replace(aws_clients, max_attempts=1))
    function = aws_fleet.functions[0]
    planned = lambda_.alias(function, "production")
    read = aws_standin.faults.arm("GetFunctionConfiguration", fault)

    # when
    moved = lambda_.update_alias(planned, version="3")

    # then: the alias moved, and the handle says so (not an error that says nothing changed)
    now = lambda_.alias(function, "production")
    assert read.fired == 1
    assert (moved["status"], moved["done"], moved["ok"]) == ("APPLIED", False, False)
    assert moved["observations"]["alias_version"] == "3"
    assert moved["observations"]["revision_id"] == now["revision_id"]
    assert moved["observations"]["status_error"]["type"] in ("Throttled", "Transient")
    assert now["version"] == "3"

    # and inspect() fills the status in
    settled = eventually(lambda: lambda_.inspect(moved), lambda h: h["done"], timeout=aws_patience)
    assert (settled["status"], settled["ok"]) == ("Successful", True)
    assert "status_error" not in settled["observations"]


@pytest.mark.standin
def test_gateway_error_after_alias_update_recovered(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: Lambda applies the update, a gateway answers 502
    function = aws_fleet.functions[0]
    planned = aws_lambda.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    aws_standin.faults.arm("UpdateAlias", "server_error", apply=True)

    # when
    moved = aws_lambda.update_alias(planned, version="3")

    # then: resolved by reading the alias, not reported Transient; one update performed
    assert moved["observations"]["recovered"] is True
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert aws_lambda.alias(function, "production")["version"] == "3"


class _EarlierAttemptLandsLate:
    """The mutation client, as seen when an earlier UpdateAlias of ours was delayed in the
    network: it lands just before the adapter's ``on``-th send (which then meets the RevisionId
    it consumed)."""

    def __init__(self, client: Any, late: Any, *, on: int = 2) -> None:
        self._client = client
        self._late = late
        self._on = on
        self.sent = 0

    def update_alias(self, **kwargs: Any) -> Any:
        self.sent += 1
        if self.sent == self._on:
            self._late.update_alias(**kwargs)
        return self._client.update_alias(**kwargs)


@pytest.mark.standin
def test_resend_refused_because_the_first_landed_is_recovered(
    aws_clients: AwsClients, aws_boto: Boto, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: the first UpdateAlias gets a 502 without being applied yet, and lands late
    function = aws_fleet.functions[0]
    mutation = _EarlierAttemptLandsLate(
        aws_clients.client("lambda", max_attempts=1), aws_boto.lambda_
    )
    lambda_ = Lambda(client=aws_boto.lambda_, mutation_client=mutation)
    planned = lambda_.alias(function, "production")
    aws_standin.faults.arm("UpdateAlias", "server_error", apply=False)

    # when: the re-send is refused on the RevisionId
    moved = lambda_.update_alias(planned, version="3")

    # then: the alias is read back and the update taken as applied, not a Conflict
    assert mutation.sent == 2
    assert moved["observations"]["recovered"] is True
    assert "PreconditionFailedException" in moved["observations"]["cause"]
    assert lambda_.alias(function, "production")["version"] == "3"


@pytest.mark.standin
def test_precondition_failed_because_an_earlier_attempt_landed_is_recovered(
    aws_clients: AwsClients, aws_boto: Boto, aws_fleet: Fleet
) -> None:
    # given: an earlier attempt of this update (a previous run of the step) was in flight when
    # the alias was read, and lands just before this attempt's UpdateAlias
    function = aws_fleet.functions[0]
    mutation = _EarlierAttemptLandsLate(
        aws_clients.client("lambda", max_attempts=1), aws_boto.lambda_, on=1
    )
    lambda_ = Lambda(client=aws_boto.lambda_, mutation_client=mutation)
    planned = lambda_.alias(function, "production")

    # when: this attempt is refused on the RevisionId the earlier one consumed
    moved = lambda_.update_alias(planned, version="3")

    # then: read back and recovered, not a Conflict
    assert mutation.sent == 1
    assert moved["observations"]["recovered"] is True
    assert moved["observations"]["ownership"] == "unproven"
    assert "PreconditionFailedException" in moved["observations"]["cause"]
    assert lambda_.alias(function, "production")["version"] == "3"


class _LostThenBusy:
    """The mutation client: the first UpdateAlias is lost in the network (not applied yet),
    the adapter's re-send is refused because "an update is in progress"."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.sent = 0

    def update_alias(self, **kwargs: Any) -> Any:
        self.sent += 1
        if self.sent == 1:
            raise ConnectionClosedError(endpoint_url="http://lambda.invalid/")
        if self.sent == 2:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ResourceConflictException",
                        "Message": "The operation cannot be performed at this time. An update "
                        f"is in progress for resource: {kwargs['FunctionName']}",
                    },
                    "ResponseMetadata": {"HTTPStatusCode": 409},
                },
                "UpdateAlias",
            )
        return self._client.update_alias(**kwargs)


@pytest.mark.standin
def test_busy_resend_is_transient_and_the_retry_finds_the_late_first_attempt(
    aws_boto: Boto, aws_fleet: Fleet, aws_standin: AwsStandIn
) -> None:
    # given: the first UpdateAlias is lost on the way and still in flight; the re-send is
    # refused as "update in progress"
    function = aws_fleet.functions[0]
    mutation = _LostThenBusy(aws_boto.lambda_)
    lambda_ = Lambda(client=aws_boto.lambda_, mutation_client=mutation)
    planned = lambda_.alias(function, "production")
    before = aws_standin.calls["UpdateAlias"]
    with pytest.raises(Transient):
        lambda_.update_alias(planned, version="3")

    # when: the first attempt lands, then the engine retries the step with its plan
    aws_boto.lambda_.update_alias(
        FunctionName=function,
        Name="production",
        FunctionVersion="3",
        RevisionId=planned["revision_id"],
    )
    again = lambda_.update_alias(planned, version="3")

    # then: found by reading first, not a Conflict on the consumed RevisionId; one update
    assert mutation.sent == 2
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert (again["observations"]["recovered"], again["observations"]["ownership"]) == (
        True,
        "unproven",
    )
    assert lambda_.alias(function, "production")["version"] == "3"


@pytest.mark.standin
def test_failed_update_reported(
    aws_lambda: Lambda,
    aws_fleet: Fleet,
    aws_boto: Boto,
    aws_standin: AwsStandIn,
    aws_patience: float,
) -> None:
    # given: a version whose update fails
    function = aws_fleet.functions[0]
    client = aws_boto.lambda_
    client.update_function_code(FunctionName=function, ZipFile=function_code(4))
    await_settled(client, function, timeout=aws_patience)
    aws_standin.faults.arm("PublishVersion", "fail_update")
    version = client.publish_version(FunctionName=function)["Version"]

    # when
    moved = aws_lambda.update_alias(aws_lambda.alias(function, "staging"), version=version)
    settled = eventually(
        lambda: aws_lambda.inspect(moved), lambda h: h["done"], timeout=aws_patience
    )

    # then
    assert (settled["status"], settled["ok"]) == ("Failed", False)
    assert settled["observations"]["last_update_status_reason"]


def test_restore_moves_the_alias_back_once(aws_lambda: Lambda, aws_fleet: Fleet) -> None:
    # given
    function = aws_fleet.functions[0]
    moved = aws_lambda.update_alias(aws_lambda.alias(function, "production"), version="3")

    # when
    restored = aws_lambda.restore(moved)
    again = aws_lambda.restore(moved)

    # then: back at 2; the second restore changes nothing
    assert aws_lambda.alias(function, "production")["version"] == "2"
    assert restored["kind"] == "alias_restore"
    assert restored["observations"]["already_restored"] is False
    assert again["observations"]["already_restored"] is True
    assert again["observations"]["revision_id"] == restored["observations"]["revision_id"]


def test_restore_refused_when_the_alias_moved_elsewhere(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto
) -> None:
    # given: after Alfred moved production to 3, someone moved it to 1
    function = aws_fleet.functions[0]
    moved = aws_lambda.update_alias(aws_lambda.alias(function, "production"), version="3")
    aws_boto.lambda_.update_alias(FunctionName=function, Name="production", FunctionVersion="1")

    # when / then
    with pytest.raises(Conflict) as caught:
        aws_lambda.restore(moved)
    assert caught.value.code == "AliasMoved"
    assert aws_lambda.alias(function, "production")["version"] == "1"


def test_restore_refused_when_someone_set_the_same_version_since(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto
) -> None:
    # given: after Alfred moved production to 3, someone moved it to 1 and back to 3 (A→B→A)
    function = aws_fleet.functions[0]
    moved = aws_lambda.update_alias(aws_lambda.alias(function, "production"), version="3")
    for version in ("1", "3"):
        aws_boto.lambda_.update_alias(
            FunctionName=function, Name="production", FunctionVersion=version
        )
    theirs = aws_lambda.alias(function, "production")

    # when: the handle is inspected (it keeps the RevisionId our update produced) and restored
    inspected = aws_lambda.inspect(moved)
    with pytest.raises(Conflict) as caught:
        aws_lambda.restore(inspected)

    # then: their change is not undone
    assert inspected["observations"]["revision_id"] == moved["observations"]["revision_id"]
    assert inspected["observations"]["alias_revision_id"] == theirs["revision_id"]
    assert caught.value.code == "AliasMoved"
    assert caught.value.details["expected_revision_id"] == moved["observations"]["revision_id"]
    assert aws_lambda.alias(function, "production") == theirs


def test_inspect_reports_an_alias_moved_away_as_drifted(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto
) -> None:
    # given
    function = aws_fleet.functions[0]
    moved = aws_lambda.update_alias(aws_lambda.alias(function, "production"), version="3")
    aws_boto.lambda_.update_alias(FunctionName=function, Name="production", FunctionVersion="1")

    # when
    inspected = aws_lambda.inspect(moved)

    # then
    assert (inspected["status"], inspected["done"], inspected["ok"]) == ("DRIFTED", True, False)
    assert inspected["observations"]["alias_version"] == "1"


def test_check_published(aws_lambda: Lambda, aws_fleet: Fleet) -> None:
    function = aws_fleet.functions[0]

    assert aws_lambda.check_published(function, "3")["version"] == "3"
    with pytest.raises(NotFound):
        aws_lambda.check_published(function, "9")
    with pytest.raises(Rejected):
        aws_lambda.check_published(function, "$LATEST")


def test_update_of_busy_function_is_transient(
    aws_lambda: Lambda, aws_fleet: Fleet, aws_boto: Boto
) -> None:
    # given: an update in progress
    function = aws_fleet.functions[0]
    with updates_held("UpdateFunctionCode", function):
        aws_boto.lambda_.update_function_code(FunctionName=function, ZipFile=function_code(4))

        # when / then: the adapter calls it what it is: try again later
        with pytest.raises(Transient):
            try:
                aws_boto.lambda_.update_function_code(
                    FunctionName=function, ZipFile=function_code(5)
                )
            except aws_boto.lambda_.exceptions.ResourceConflictException as exc:
                raise translate(exc, provider="aws.lambda", operation="UpdateFunctionCode") from exc


def test_stop_is_unsupported(aws_lambda: Lambda, aws_fleet: Fleet) -> None:
    moved = aws_lambda.update_alias(
        aws_lambda.alias(aws_fleet.functions[0], "production"), version="3"
    )
    with pytest.raises(StopUnsupported):
        aws_lambda.stop(moved)


def test_malformed_handles_rejected(aws_lambda: Lambda) -> None:
    foreign = {"provider": "aws.route53", "kind": "change", "id": None, "status": "APPLIED"}
    hollow = {
        "provider": "aws.lambda",
        "kind": "alias_update",
        "id": "arn",
        "status": "APPLIED",
        "observations": {"function": "f"},
    }
    for malformed in (foreign, hollow, None):
        for use in (aws_lambda.inspect, aws_lambda.restore, aws_lambda.stop):
            with pytest.raises(Rejected):
                use(malformed)  # type: ignore[arg-type]


def _update_status(client: Any, function: str, version: str) -> dict[str, Any]:
    configuration = client.get_function_configuration(FunctionName=function, Qualifier=version)
    return {
        "status": configuration.get("LastUpdateStatus"),
        "reason": configuration.get("LastUpdateStatusReason"),
    }


@pytest.mark.standin
def test_fail_update_armed_on_update_alias_fails_the_version_the_alias_moved_to(
    aws_boto: Boto, aws_fleet: Fleet, aws_standin: AwsStandIn, aws_patience: float
) -> None:
    # given: production at 2, and a fail_update armed on UpdateAlias
    client = aws_boto.lambda_
    function = aws_fleet.functions[0]
    aws_standin.faults.arm("UpdateAlias", "fail_update")
    before = aws_standin.calls["UpdateAlias"]

    # when: the alias is moved to 3, with boto3
    client.update_alias(FunctionName=function, Name="production", FunctionVersion="3")
    settled = eventually(
        lambda: _update_status(client, function, "3"),
        lambda s: s["status"] != "InProgress",
        timeout=aws_patience,
    )

    # then: the move was applied once, and version 3 reports its update Failed
    assert aws_standin.calls["UpdateAlias"] - before == 1
    assert client.get_alias(FunctionName=function, Name="production")["FunctionVersion"] == "3"
    assert settled["status"] == "Failed"
    assert "fail_update" in settled["reason"]
    # and: the fault fired once: the next move is Successful at once
    client.update_alias(FunctionName=function, Name="staging", FunctionVersion="1")
    assert _update_status(client, function, "1")["status"] == "Successful"
    assert aws_standin.faults.listing() == []


@pytest.mark.standin
def test_hold_update_armed_on_update_alias_holds_the_version_until_cleared(
    aws_boto: Boto, aws_fleet: Fleet, aws_standin: AwsStandIn, aws_patience: float
) -> None:
    # given: a standing hold on UpdateAlias for the first function only
    client = aws_boto.lambda_
    held, free = aws_fleet.functions
    aws_standin.faults.arm("UpdateAlias", "hold_update", times=None, function=held)

    # when: both functions' production aliases move to 3
    for function in (held, free):
        client.update_alias(FunctionName=function, Name="production", FunctionVersion="3")

    # then: the held one's version 3 stays InProgress well past the update delay; the other
    # one's is not held
    for _ in range(6):
        assert _update_status(client, held, "3")["status"] == "InProgress"
        time.sleep(aws_standin.lambda_update_delay)
    assert _update_status(client, free, "3")["status"] == "Successful"
    # and: once cleared, it ends as it would have
    aws_standin.faults.clear()
    settled = eventually(
        lambda: _update_status(client, held, "3"),
        lambda s: s["status"] != "InProgress",
        timeout=aws_patience,
    )
    assert settled["status"] == "Successful"
