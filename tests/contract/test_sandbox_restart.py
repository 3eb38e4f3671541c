"""The sandbox keeps its state across a restart, as `make run` restarts it.

`python -m providers.sandbox` is run as a process, changed through the real clients (boto3,
the GitOps adapter on PyGithub, httpx), stopped with SIGTERM and started again on the same
directory: what an execution in flight recorded (a zone id, a change id, a certificate ARN,
an alias's RevisionId, a commit, a sync) must still be there, and the demo seed must not undo
what was changed since.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from alfred.devstack import free_port_base
from providers.config import ProviderConfig
from providers.factory import Providers
from providers.gitops.concerns import NGINX_HOSTS, add_domain
from providers.sandbox.argocd import APP_NGINX_INGRESS
from providers.sandbox.stack import Sandbox
from tests.conftest import ROOT, wait_for

pytestmark = [pytest.mark.standin, pytest.mark.slow]  # the sandbox in processes of its own


class SandboxProcess:
    """`python -m providers.sandbox` on ``root``, as `make run` supervises it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = free_port_base()
        self.log = root.parent / f"{root.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> dict[str, str]:
        """Start it and wait until it is ready; the environment it hands to Alfred."""
        env_file = self.root / "sandbox.env"
        env_file.unlink(missing_ok=True)  # written anew once the stand-ins are seeded
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "providers.sandbox",
                "--root",
                str(self.root),
                "--port-base",
                str(self.base),
                "--route53-change-delay",
                "0.3",
                "--converge-delay",
                "1.0",
            ],
            cwd=ROOT,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: self._alive() and env_file.exists(), timeout=120, interval=0.1)
        return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the sandbox exited:\n{self.log.read_text()[-4000:]}")
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


@pytest.fixture
def sandbox_process(tmp_path: Path) -> Iterator[SandboxProcess]:
    process = SandboxProcess(tmp_path / "sandbox")
    try:
        yield process
    finally:
        process.stop()


def _aws(environ: dict[str, str], service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=environ["AWS_ENDPOINT_URL"],
        region_name=environ["AWS_REGION"],
        aws_access_key_id=environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environ["AWS_SECRET_ACCESS_KEY"],
    )


def _zone_id(route53: Any, name: str) -> str:
    [zone] = route53.list_hosted_zones_by_name(DNSName=name, MaxItems="1")["HostedZones"]
    assert zone["Name"] == f"{name}."
    return str(zone["Id"]).removeprefix("/hostedzone/")


def _values(route53: Any, zone_id: str, name: str, rtype: str) -> list[str]:
    sets = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=name, StartRecordType=rtype, MaxItems="1"
    )["ResourceRecordSets"]
    if not sets or sets[0]["Name"] != f"{name}." or sets[0]["Type"] != rtype:
        return []
    return [r["Value"] for r in sets[0].get("ResourceRecords", [])]


def _upsert_a(route53: Any, zone_id: str, name: str, value: str) -> str:
    change = route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {
                        "Name": name,
                        "Type": "A",
                        "TTL": 60,
                        "ResourceRecords": [{"Value": value}],
                    },
                }
            ]
        },
    )
    return str(change["ChangeInfo"]["Id"]).removeprefix("/change/")


def _journal(environ: dict[str, str], variable: str) -> Any:
    base = environ[variable].removesuffix("/api/v3")
    return httpx.get(f"{base}/_sandbox/journal", timeout=10).json()


def _certificates(acm: Any) -> list[tuple[str, str, str]]:
    """ARN, name and status of each certificate (moto makes a certificate again at a restart:
    its key, serial and dates are new)."""
    return [
        (c["CertificateArn"], c["DomainName"], c["Status"])
        for c in acm.list_certificates()["CertificateSummaryList"]
    ]


def _status(acm: Any, arn: str) -> str:
    return str(acm.describe_certificate(CertificateArn=arn)["Certificate"]["Status"])


def test_a_restarted_sandbox_has_what_it_had(sandbox_process):
    # given: a running sandbox, changed as an execution in flight changes it
    environ = sandbox_process.start()
    route53, acm, lambda_ = (_aws(environ, s) for s in ("route53", "acm", "lambda"))
    zone_id = _zone_id(route53, "example.com")
    change_id = _upsert_a(route53, zone_id, "restart.example.com", "192.0.2.91")
    _upsert_a(route53, zone_id, "api.example.com", "192.0.2.92")  # a seeded record, changed
    created = route53.create_hosted_zone(Name="restart.test", CallerReference="alfred-restart-1")
    new_zone_id = str(created["HostedZone"]["Id"]).removeprefix("/hostedzone/")
    certificate = acm.request_certificate(
        DomainName="restart.example.com", ValidationMethod="DNS", IdempotencyToken="restart1"
    )["CertificateArn"]
    alias = lambda_.get_alias(FunctionName="checkout-api-cart", Name="production")
    moved = lambda_.update_alias(
        FunctionName="checkout-api-cart",
        Name="production",
        FunctionVersion="3",
        RevisionId=alias["RevisionId"],
    )
    assert moved["RevisionId"] != alias["RevisionId"]
    providers = Providers(ProviderConfig.from_env(environ))
    commit = add_domain(
        providers.helm_repository(),
        NGINX_HOSTS,
        "restart.example.com",
        branch="main",
        operation="restart-1",
    )
    sha = str(commit["id"])
    argocd = providers.argocd()
    wait_for(lambda: argocd.inspect(argocd.watch(APP_NGINX_INGRESS, sha))["ok"], timeout=30)
    before = httpx.get(
        f"{environ['ALFRED_ARGOCD_URL']}/api/v1/applications/{APP_NGINX_INGRESS}",
        headers={"Authorization": f"Bearer {environ['ALFRED_ARGOCD_TOKEN']}"},
    ).json()
    syncs = _journal(environ, "ALFRED_ARGOCD_URL")["operations"][APP_NGINX_INGRESS]
    batches = _journal(environ, "AWS_ENDPOINT_URL")["route53"]["change_batches"]

    # when: it is stopped and started again on the same directory
    sandbox_process.stop()
    environ = sandbox_process.start()
    route53, acm, lambda_ = (_aws(environ, s) for s in ("route53", "acm", "lambda"))

    # then: Route53 has the same zones, records and changes; the seed undid nothing
    assert _zone_id(route53, "example.com") == zone_id
    assert _values(route53, zone_id, "restart.example.com", "A") == ["192.0.2.91"]
    assert _values(route53, zone_id, "api.example.com", "A") == ["192.0.2.92"]
    assert route53.get_change(Id=change_id)["ChangeInfo"]["Status"] == "INSYNC"
    assert route53.get_hosted_zone(Id=new_zone_id)["HostedZone"]["Name"] == "restart.test."
    with pytest.raises(ClientError) as reused:
        route53.create_hosted_zone(Name="other.test", CallerReference="alfred-restart-1")
    assert reused.value.response["Error"]["Code"] == "HostedZoneAlreadyExists"
    assert _journal(environ, "AWS_ENDPOINT_URL")["route53"]["change_batches"] == batches
    # and: ACM has the certificate under its ARN, and its idempotency token still names it
    described = acm.describe_certificate(CertificateArn=certificate)["Certificate"]
    assert described["DomainName"] == "restart.example.com"
    again = acm.request_certificate(
        DomainName="restart.example.com", ValidationMethod="DNS", IdempotencyToken="restart1"
    )
    assert again["CertificateArn"] == certificate
    # and: the alias where it was moved, with the RevisionId a compare-and-swap needs
    alias = lambda_.get_alias(FunctionName="checkout-api-cart", Name="production")
    assert (alias["FunctionVersion"], alias["RevisionId"]) == ("3", moved["RevisionId"])
    back = lambda_.update_alias(
        FunctionName="checkout-api-cart",
        Name="production",
        FunctionVersion="2",
        RevisionId=moved["RevisionId"],
    )
    assert back["FunctionVersion"] == "2"
    # and: the commit on its branch, and ArgoCD's application as it was, syncs included
    providers = Providers(ProviderConfig.from_env(environ))
    assert providers.helm_repository().head("main") == sha
    after = httpx.get(
        f"{environ['ALFRED_ARGOCD_URL']}/api/v1/applications/{APP_NGINX_INGRESS}",
        headers={"Authorization": f"Bearer {environ['ALFRED_ARGOCD_TOKEN']}"},
    ).json()
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["sync"]["revision"] == sha
    assert after["status"]["history"] == before["status"]["history"]
    assert _journal(environ, "ALFRED_ARGOCD_URL")["operations"][APP_NGINX_INGRESS] == syncs


def test_a_fresh_directory_is_a_fresh_sandbox(tmp_path):
    # given: a sandbox changed, then stopped
    first = SandboxProcess(tmp_path / "one")
    try:
        environ = first.start()
        route53 = _aws(environ, "route53")
        _upsert_a(route53, _zone_id(route53, "example.com"), "only.example.com", "192.0.2.93")
        zone_id = _zone_id(route53, "example.com")
    finally:
        first.stop()

    # when: another starts on a directory of its own (as each test's fixture does)
    second = SandboxProcess(tmp_path / "two")
    try:
        environ = second.start()
        route53 = _aws(environ, "route53")

        # then: it has the seed alone
        fresh = _zone_id(route53, "example.com")
        assert fresh != zone_id
        assert _values(route53, fresh, "only.example.com", "A") == []
    finally:
        second.stop()


def test_a_sandbox_restarted_in_the_same_process_lists_what_it_listed(tmp_path):
    """In one process (moto's backends are process-global, so the account still holds the
    objects of the first start) and with what a plain record does not show: routing
    members, an escaped wildcard name, alias targets, a certificate's tags."""
    root = tmp_path / "sandbox"
    with Sandbox(root=root, route53_change_delay=60.0, acm_issue_delay=0.0) as sandbox:
        environ = sandbox.environ()
        route53, acm = _aws(environ, "route53"), _aws(environ, "acm")
        zone_id = _zone_id(route53, "example.com")
        pending = route53.change_resource_record_sets(
            HostedZoneId=zone_id,
            ChangeBatch={
                "Changes": [
                    {
                        "Action": "CREATE",
                        "ResourceRecordSet": {
                            "Name": f"{name}.example.com",
                            "Type": "A",
                            "SetIdentifier": name,
                            "Weight": weight,
                            "TTL": 60,
                            "ResourceRecords": [{"Value": value}],
                        },
                    }
                    for name, weight, value in (("*", 10, "192.0.2.1"), ("w", 0, "192.0.2.2"))
                ]
            },
        )["ChangeInfo"]
        arn = acm.request_certificate(
            DomainName="tagged.example.com",
            ValidationMethod="DNS",
            Tags=[{"Key": "alfred:execution", "Value": "e-1"}],
        )["CertificateArn"]
        [validation] = wait_for(
            lambda: [
                option["ResourceRecord"]
                for option in acm.describe_certificate(CertificateArn=arn)["Certificate"][
                    "DomainValidationOptions"
                ]
                if "ResourceRecord" in option
            ],
            timeout=10,
        )
        route53.change_resource_record_sets(
            HostedZoneId=zone_id,
            ChangeBatch={
                "Changes": [
                    {
                        "Action": "CREATE",
                        "ResourceRecordSet": {
                            "Name": validation["Name"],
                            "Type": "CNAME",
                            "TTL": 300,
                            "ResourceRecords": [{"Value": validation["Value"]}],
                        },
                    }
                ]
            },
        )
        issued = acm.request_certificate(DomainName="issued.example.com", ValidationMethod="DNS")
        wait_for(lambda: _status(acm, arn) == "ISSUED", timeout=10)
        records = route53.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
        certificates = _certificates(acm)

    # (an issue delay ACM's check would take to issue it again: what was issued stays so)
    with Sandbox(root=root, route53_change_delay=60.0, acm_issue_delay=60.0) as sandbox:
        environ = sandbox.environ()
        route53, acm = _aws(environ, "route53"), _aws(environ, "acm")

        listed = route53.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
        assert listed == records
        # a change still PENDING at the restart stays so until its delay ends
        change = route53.get_change(Id=pending["Id"])["ChangeInfo"]
        assert (change["Status"], change["SubmittedAt"]) == ("PENDING", pending["SubmittedAt"])
        assert _certificates(acm) == certificates
        assert _status(acm, arn) == "ISSUED"
        assert _status(acm, issued["CertificateArn"]) == "PENDING_VALIDATION"
        tags = acm.list_tags_for_certificate(CertificateArn=arn)["Tags"]
        assert tags == [{"Key": "alfred:execution", "Value": "e-1"}]
