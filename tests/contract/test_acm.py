"""ACM adapter contract: idempotent requests, DNS validation records, override checks, deletion.

Against a real account (ALFRED_CONTRACT_TARGET=real) the certificates are validated through
the contract zone, which takes ACM minutes; see tests/contract/fixtures/aws.py.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Sequence

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from providers.aws.acm import Acm, covers
from providers.aws.route53 import Change, Route53, Zone, record
from providers.errors import NotFound, Rejected
from providers.sandbox.aws import AwsStandIn
from tests.contract.fixtures.aws import (
    Boto,
    Certificates,
    DnsNames,
    absent,
    eventually,
    unique,
)


def validate(
    acm: Acm,
    route53: Route53,
    zone: Zone,
    dns_names: DnsNames,
    arn: str,
    *,
    patience: float,
) -> None:
    """Publish the certificate's validation records in the zone (as add-certificate does)."""
    validation = acm.validation_records(arn, wait=patience)
    assert validation["complete"], validation
    dns_names.names.extend(r["name"] for r in validation["records"])
    route53.change(
        zone["id"],
        [
            Change(
                action="UPSERT",
                record=record(r["name"], r["type"], ttl=300, values=[r["value"]]),
            )
            for r in validation["records"]
        ],
        operation=unique("acm-validation-"),
    )


def issued(
    acm: Acm,
    route53: Route53,
    zone: Zone,
    dns_names: DnsNames,
    certificates: Certificates,
    domain: str,
    sans: Sequence[str] = (),
    *,
    patience: float,
) -> str:
    requested = acm.request(domain, alternative_names=sans, idempotency_token=unique("t"))
    arn = certificates.track(str(requested["id"]))
    validate(acm, route53, zone, dns_names, arn, patience=patience)
    done = eventually(lambda: acm.inspect(requested), lambda h: h["done"], timeout=patience)
    assert done["status"] == "ISSUED"
    return arn


@pytest.fixture(scope="module")
def wildcard(
    aws_acm: Acm, aws_route53: Route53, aws_zone: Zone, aws_patience: float
) -> Iterator[tuple[str, str]]:
    """An ISSUED certificate for ``<base>`` and ``*.<base>``: (ARN, base)."""
    base = f"{unique('w')}.{aws_zone['name']}"
    names = DnsNames(aws_zone, aws_route53)
    certificates = Certificates(aws_acm)
    try:
        arn = issued(
            aws_acm,
            aws_route53,
            aws_zone,
            names,
            certificates,
            base,
            [f"*.{base}"],
            patience=aws_patience,
        )
        yield arn, base
    finally:
        certificates.clean()
        names.clean()


def test_request_is_pending_dns_validation(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates
) -> None:
    # given
    domain = f"{unique('c')}.{aws_zone['name']}"

    # when
    requested = aws_acm.request(
        domain.upper(), alternative_names=[f"www.{domain}"], idempotency_token=unique("t")
    )
    aws_certificates.track(str(requested["id"]))

    # then
    assert requested["kind"] == "certificate"
    assert requested["status"] == "PENDING_VALIDATION"
    assert (requested["done"], requested["ok"]) == (False, False)
    certificate = aws_acm.describe(str(requested["id"]))
    assert certificate["domain"] == domain
    assert certificate["alternative_names"] == [f"www.{domain}"]
    assert certificate["type"] == "AMAZON_ISSUED"


def test_idempotency_token_returns_same_arn(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates, aws_boto: Boto
) -> None:
    # given
    domain = f"{unique('c')}.{aws_zone['name']}"
    token = f"alfred-execution-{unique('')}:add-certificate:request"  # not \w{1,32}: hashed

    # when
    first = aws_acm.request(domain, idempotency_token=token)
    again = aws_acm.request(domain, idempotency_token=token)
    aws_certificates.track(str(first["id"]))

    # then: one certificate
    assert again["id"] == first["id"]
    listed = aws_boto.acm.list_certificates()["CertificateSummaryList"]
    assert [c["DomainName"] for c in listed].count(domain) == 1


@pytest.mark.standin
def test_lost_request_response_returns_same_certificate(
    aws_acm: Acm,
    aws_zone: Zone,
    aws_certificates: Certificates,
    aws_boto: Boto,
    aws_standin: AwsStandIn,
) -> None:
    # given: ACM creates the certificate, but the response is lost
    domain = f"{unique('c')}.{aws_zone['name']}"
    aws_standin.faults.arm("RequestCertificate", "lose_response")

    # when: botocore re-sends with the same token
    requested = aws_acm.request(domain, idempotency_token=unique("t"))
    aws_certificates.track(str(requested["id"]))

    # then
    listed = aws_boto.acm.list_certificates()["CertificateSummaryList"]
    assert [c["CertificateArn"] for c in listed if c["DomainName"] == domain] == [requested["id"]]


@pytest.mark.standin
def test_validation_records_published_after_a_moment(
    aws_acm: Acm,
    aws_zone: Zone,
    aws_certificates: Certificates,
    aws_standin: AwsStandIn,
    aws_patience: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: a request for a name and its wildcard, while ACM takes its time (long enough
    # for any number of round trips) to publish the validation records
    monkeypatch.setattr(aws_standin, "acm_record_delay", 3600.0)
    domain = f"{unique('c')}.{aws_zone['name']}"
    requested = aws_acm.request(
        domain, alternative_names=[f"*.{domain}"], idempotency_token=unique("t")
    )
    arn = aws_certificates.track(str(requested["id"]))

    # when: asked at once, then with patience once ACM has published them
    early = aws_acm.validation_records(arn, wait=0)
    monkeypatch.setattr(aws_standin, "acm_record_delay", 0.2)
    later = aws_acm.validation_records(arn, wait=aws_patience)

    # then: ACM had not published them yet; later one record serves both names
    assert early["complete"] is False
    assert sorted(early["pending"]) == sorted([domain, f"*.{domain}"])
    assert later["complete"] is True
    assert later["pending"] == []
    assert len(later["records"]) == 1
    assert later["records"][0]["type"] == "CNAME"
    assert later["records"][0]["name"].endswith(f".{domain}")


@pytest.mark.standin
def test_issued_only_once_validation_records_are_served(
    aws_acm: Acm,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_certificates: Certificates,
    aws_standin: AwsStandIn,
    aws_patience: float,
) -> None:
    # given: a request whose validation records are not in DNS
    domain = f"{unique('c')}.{aws_zone['name']}"
    requested = aws_acm.request(domain, idempotency_token=unique("t"))
    arn = aws_certificates.track(str(requested["id"]))
    aws_acm.validation_records(arn, wait=aws_patience)
    time.sleep(aws_standin.acm_issue_delay * 2)
    assert aws_acm.inspect(requested)["status"] == "PENDING_VALIDATION"

    # when: they are published
    validate(aws_acm, aws_route53, aws_zone, aws_dns_names, arn, patience=aws_patience)

    # then
    done = eventually(lambda: aws_acm.inspect(requested), lambda h: h["done"], timeout=5)
    assert (done["status"], done["ok"]) == ("ISSUED", True)


def test_override_accepts_issued_certificate_covering_the_names(
    aws_acm: Acm, wildcard: tuple[str, str]
) -> None:
    # given
    arn, base = wildcard

    # when
    certificate = aws_acm.check_override(
        arn, domain=f"shop.{base}", alternative_names=[base, f"WWW.{base}."]
    )

    # then
    assert certificate["arn"] == arn
    assert certificate["status"] == "ISSUED"


def test_override_rejects_names_the_certificate_does_not_cover(
    aws_acm: Acm, wildcard: tuple[str, str], aws_zone: Zone
) -> None:
    # given: a wildcard covers one label only, and not another base
    arn, base = wildcard

    for domain in (f"a.b.{base}", aws_zone["name"], f"other-{base}"):
        # when
        with pytest.raises(Rejected) as caught:
            aws_acm.check_override(arn, domain=domain)

        # then
        assert caught.value.code == "CertificateNotUsable"
        assert caught.value.details["reasons"] == [
            f"it does not cover {domain} (it covers *.{base}, {base})"
        ]


def test_override_rejects_certificate_not_issued(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates
) -> None:
    # given
    domain = f"{unique('c')}.{aws_zone['name']}"
    arn = aws_certificates.track(str(aws_acm.request(domain, idempotency_token=unique("t"))["id"]))

    # when / then
    with pytest.raises(Rejected) as caught:
        aws_acm.check_override(arn, domain=domain)
    assert caught.value.details["reasons"] == ["its status is PENDING_VALIDATION, not ISSUED"]


def _short_lived_certificate(domain: str, seconds: float) -> tuple[bytes, bytes, dt.datetime]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    now = dt.datetime.now(dt.UTC)
    # X.509 keeps whole seconds: end on one, at least ``seconds`` from now
    not_after = (now + dt.timedelta(seconds=seconds + 1)).replace(microsecond=0)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
        not_after,
    )


@pytest.mark.standin  # AWS may refuse to import a certificate that is about to expire
def test_override_rejects_expired_certificate(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates, aws_boto: Boto
) -> None:
    # given: an imported certificate for the domain (valid long enough for the round trips of
    # the first check, even on a loaded machine), expired since
    domain = f"{unique('c')}.{aws_zone['name']}"
    body, key, not_after = _short_lived_certificate(domain, seconds=2.0)
    arn = aws_certificates.track(
        aws_boto.acm.import_certificate(Certificate=body, PrivateKey=key)["CertificateArn"]
    )
    assert aws_acm.check_override(arn, domain=domain)["status"] == "ISSUED"
    time.sleep(max(0.0, (not_after - dt.datetime.now(dt.UTC)).total_seconds()) + 0.05)

    # when / then
    with pytest.raises(Rejected) as caught:
        aws_acm.check_override(arn, domain=domain)
    assert caught.value.details["reasons"][0].startswith("it expired at ")


def test_override_of_unknown_certificate_not_found(aws_acm: Acm, aws_boto: Boto) -> None:
    # given: a well-formed ARN in this account and region that names nothing
    account = aws_boto.sts.get_caller_identity()["Account"]
    region = aws_boto.acm.meta.region_name
    arn = f"arn:aws:acm:{region}:{account}:certificate/00000000-0000-4000-8000-000000000000"

    # when / then
    with pytest.raises(NotFound) as caught:
        aws_acm.check_override(arn, domain="example.com")
    assert caught.value.code == "ResourceNotFoundException"


def test_override_of_malformed_arn_rejected(aws_acm: Acm) -> None:
    for arn in ("not-an-arn", "arn:aws:acm:us-east-1:123456789012:nothing-here"):
        with pytest.raises(Rejected) as caught:
            aws_acm.check_override(arn, domain="example.com")
        assert "is not a valid certificate ARN" in caught.value.message


def test_delete_and_stop_remove_the_certificate(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates
) -> None:
    # given: two requested certificates
    first = aws_acm.request(f"{unique('c')}.{aws_zone['name']}", idempotency_token=unique("t"))
    second = aws_acm.request(f"{unique('c')}.{aws_zone['name']}", idempotency_token=unique("t"))
    aws_certificates.arns += [str(first["id"]), str(second["id"])]

    # when: one is deleted (compensation), the other's request stopped
    deleted = aws_acm.delete(str(first["id"]))
    stopped = aws_acm.stop(second)

    # then: both gone; deleting again is a no-op
    assert (deleted["status"], stopped["status"]) == ("DELETED", "DELETED")
    assert absent(lambda: aws_acm.describe(str(first["id"])))
    assert absent(lambda: aws_acm.describe(str(second["id"])))
    assert aws_acm.inspect(deleted)["status"] == "DELETED"
    assert aws_acm.delete(str(first["id"]))["observations"]["already_absent"] is True


def test_malformed_handles_rejected(aws_acm: Acm) -> None:
    foreign = {"provider": "aws.route53", "kind": "change", "id": None, "status": "APPLIED"}
    arnless: dict[str, object] = {
        "provider": "aws.acm",
        "kind": "certificate",
        "id": None,
        "status": "PENDING_VALIDATION",
        "observations": {},
    }
    malformed_handles: list[object] = [foreign, arnless, {"kind": "certificate"}, []]
    for malformed in malformed_handles:
        for use in (aws_acm.inspect, aws_acm.stop):
            with pytest.raises(Rejected):
                use(malformed)  # type: ignore[arg-type]


@pytest.mark.standin
def test_throttled_describe_retried(
    aws_acm: Acm, aws_zone: Zone, aws_certificates: Certificates, aws_standin: AwsStandIn
) -> None:
    # given
    requested = aws_acm.request(f"{unique('c')}.{aws_zone['name']}", idempotency_token=unique("t"))
    aws_certificates.track(str(requested["id"]))
    fault = aws_standin.faults.arm("DescribeCertificate", "throttle")

    # when
    inspected = aws_acm.inspect(requested)

    # then
    assert fault.fired == 1
    assert inspected["id"] == requested["id"]


def test_wildcard_matching_rules() -> None:
    names = ["example.com", "*.example.com"]
    assert covers(names, "example.com")
    assert covers(names, "shop.EXAMPLE.com.")
    assert not covers(names, "a.shop.example.com")
    assert not covers(["*.example.com"], "example.com")
    assert not covers(names, "badexample.com")
