"""The sandbox as `make run` runs it: the three stand-ins together, adapters built from the
environment it hands to Alfred (``Sandbox.environ()`` → ``ProviderConfig`` → ``Providers``).

What no single provider's contract shows: ArgoCD converges on what was committed through the
GitHub stand-in, ACM issues once its validation records are in Route53, and faults armed over
HTTP (as a developer pokes `make run`) reach the adapters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from providers.aws.route53 import record
from providers.config import ProviderConfig
from providers.factory import Providers
from providers.gitops.concerns import NGINX_HOSTS, add_domain
from providers.handles import Handle
from providers.sandbox.argocd import APP_MYSTIQUE, APP_NGINX_INGRESS
from providers.sandbox.aws import AwsStandIn, seed_aws
from providers.sandbox.stack import Sandbox

pytestmark = pytest.mark.standin


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root: Path = tmp_path_factory.mktemp("sandbox")
    # converge_delay: long enough that the in-progress state is observed even under load
    with Sandbox(root=root, route53_change_delay=0.3, converge_delay=2.0) as running:
        yield running


@pytest.fixture
def providers(sandbox: Sandbox) -> Iterator[Providers]:
    yield Providers(ProviderConfig.from_env(sandbox.environ()))
    sandbox.clear_faults()


def settle(inspect: Any, handle: Handle, timeout: float = 15.0) -> Handle:
    deadline = time.monotonic() + timeout
    while not handle["done"]:
        assert time.monotonic() < deadline, f"not done within {timeout}s: {handle}"
        time.sleep(0.1)
        handle = inspect(handle)
    return handle


def test_the_environment_names_sandbox_mode(sandbox):
    config = ProviderConfig.from_env(sandbox.environ())

    assert config.mode == "sandbox"
    assert config.aws.endpoint_url == sandbox.aws.url
    assert config.github.api_url == f"{sandbox.github.url}/api/v3"


def test_argocd_converges_on_the_commit_that_added_a_domain(providers, sandbox):
    # given: the seeded Helm values, and the nginx application converged on their head
    helm = providers.helm_repository()
    argocd = providers.argocd()

    # when: a domain is committed to the nginx hosts
    commit = add_domain(helm, NGINX_HOSTS, "example.com", branch="main", operation="sbx-argo-1")
    assert commit["status"] == "landed"
    sha = str(commit["id"])
    assert sandbox.github.head("platform/helm-values", "main") == sha

    # then: ArgoCD first reports the rollout under way, then converged at exactly that commit
    first = argocd.watch(APP_NGINX_INGRESS, sha)
    assert not first["done"]
    converged = settle(argocd.inspect, first)
    assert converged["ok"]
    status = argocd.application(APP_NGINX_INGRESS)
    assert status.sync_revision == sha
    # and: the other application of that repository converges on the same head
    assert settle(argocd.inspect, argocd.watch(APP_MYSTIQUE, sha))["ok"]


def test_acm_issues_once_its_validation_records_are_in_route53(providers):
    # given: a certificate requested for a seeded zone's name
    acm, route53 = providers.acm(), providers.route53()
    certificate = acm.request("cdn.example.com", idempotency_token="sbx-acm-1")
    validation = acm.validation_records(str(certificate["id"]), wait=10.0)
    assert validation["complete"]
    assert acm.inspect(certificate)["status"] == "PENDING_VALIDATION"

    # when: its validation records are written to the zone
    zone = route53.zone("example.com")
    change = route53.change(
        zone["id"],
        [
            {
                "action": "UPSERT",
                "record": record(item["name"], item["type"], ttl=300, values=[item["value"]]),
            }
            for item in validation["records"]
        ],
        operation="sbx-acm-1",
    )
    assert settle(route53.inspect, change)["status"] == "INSYNC"

    # then: ACM issues it
    issued = settle(acm.inspect, certificate, timeout=20.0)
    assert issued["status"] == "ISSUED"


def test_a_fault_armed_over_http_reaches_the_adapter(providers, sandbox):
    # given: a lost response armed through the control endpoint, as against `make run`
    armed = httpx.post(
        f"{sandbox.aws.url}/_sandbox/faults",
        json={"operation": "ChangeResourceRecordSets", "kind": "lose_response"},
    )
    assert armed.status_code == 201
    route53 = providers.route53()
    zone = route53.zone("example.com")
    before = len(sandbox.aws.route53.change_batches)

    # when: a change batch is submitted and its response is dropped
    handle = route53.change(
        zone["id"],
        [
            {
                "action": "CREATE",
                "record": record("fault.example.com", "A", ttl=60, values=["192.0.2.77"]),
            }
        ],
        operation="sbx-fault-1",
    )

    # then: the adapter recovered by reading the records, and the batch was applied once
    assert handle["observations"]["recovered"] is True
    assert len(sandbox.aws.route53.change_batches) == before + 1
    assert httpx.get(f"{sandbox.aws.url}/_sandbox/faults").json() == {"faults": []}
    [created] = route53.records(zone["id"], "fault.example.com")
    assert created["values"] == ["192.0.2.77"]


def test_seeding_aws_again_changes_nothing(providers, sandbox):
    # given: the seeded sandbox, its zones' records and the fleets as they are
    route53, lambda_ = providers.route53(), providers.lambda_()
    zone = route53.zone("example.com")
    records = route53.records(zone["id"], "api.example.com")
    fleet = lambda_.fleet("checkout-api")

    # when: the seed runs again (as documented: safe on a seeded stand-in)
    summary = seed_aws(sandbox.aws.url)

    # then: the same zones and fleets, no second zone of a name, records unchanged
    assert summary["zones"]["example.com"] == zone["id"]
    assert route53.zone("example.com")["id"] == zone["id"]
    assert route53.records(zone["id"], "api.example.com") == records
    assert lambda_.fleet("checkout-api") == fleet


@pytest.mark.slow  # six calls at 0.6 a second
def test_a_seed_throttled_past_two_retries_waits_and_seeds_everything():
    # given: a stand-in metering Route53 at 0.6 calls a second (the seed makes six
    # in a row: each zone looked up, created and filled), as a busy machine's seed met AWS's
    # five a second
    aws = AwsStandIn(rates={"route53": 0.6}).start()
    try:
        # when: it is seeded
        summary = seed_aws(aws.url)

        # then: the seed waited its turns out (botocore's default gave up after two retries
        # and the sandbox exited): both zones are there, filled
        assert sorted(summary["zones"]) == ["acme.com", "example.com"]
        assert aws.journal()["throttled"].get("route53", 0) > 2
    finally:
        aws.stop()


def test_the_journals_say_over_http_what_the_stand_ins_were_asked_to_do(providers, sandbox):
    # given: a change batch, a commit and a sync through the adapters, as Alfred makes them
    route53 = providers.route53()
    zone = route53.zone("example.com")
    change = route53.change(
        zone["id"],
        [
            {
                "action": "CREATE",
                "record": record("journal.example.com", "A", ttl=60, values=["192.0.2.81"]),
            }
        ],
        operation="sbx-journal-1",
    )
    helm = providers.helm_repository()
    commit = add_domain(helm, NGINX_HOSTS, "journal.example.com", branch="main", operation="j-1")
    sha = str(commit["id"])
    settle(providers.argocd().inspect, providers.argocd().watch(APP_NGINX_INGRESS, sha))

    # when: an operator reads each stand-in's journal, as against `make run`
    aws = httpx.get(f"{sandbox.aws.url}/_sandbox/journal").json()
    github = httpx.get(f"{sandbox.github.url}/_sandbox/journal").json()
    argocd = httpx.get(f"{sandbox.argocd.url}/_sandbox/journal").json()

    # then: the batch as Route53 applied it, in boto3's shape, and the calls that reached AWS
    [batch] = [b for b in aws["route53"]["change_batches"] if b["change_id"] == change["id"]]
    assert batch["zone_id"] == zone["id"]
    assert batch["changes"] == [
        {
            "Action": "CREATE",
            "ResourceRecordSet": {
                "Name": "journal.example.com.",
                "Type": "A",
                "TTL": 60,
                "ResourceRecords": [{"Value": "192.0.2.81"}],
            },
        }
    ]
    assert aws["calls"]["ChangeResourceRecordSets"] >= 1
    # and: the commit Alfred POSTed and the branch moved to it
    assert {"repository": "platform/helm-values", "sha": sha} in github["created_commits"]
    [moved] = [u for u in github["ref_updates"] if u["new"] == sha]
    assert (moved["repository"], moved["branch"], moved["source"]) == (
        "platform/helm-values",
        "main",
        "api",
    )
    # and: the sync ArgoCD ran to that commit
    assert [op["revision"] for op in argocd["operations"][APP_NGINX_INGRESS]][-1] == sha
    assert argocd["name"] == "argocd"


def test_a_journal_is_read_only(sandbox):
    response = httpx.delete(f"{sandbox.github.url}/_sandbox/journal")

    assert response.status_code == 405
    assert httpx.get(f"{sandbox.github.url}/_sandbox/journal").status_code == 200
