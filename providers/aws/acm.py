"""ACM: request a DNS-validated certificate once, read its validation records, check an override.

**Idempotency.** ``RequestCertificate`` carries an ``IdempotencyToken``: ACM answers a repeat
with the same token (within one hour) with the same ARN instead of a second certificate, so the
request may be retried by botocore and by the workflow after a lost response. ACM accepts only
``\\w{1,32}`` tokens; a longer or richer caller token is reduced to the first 32 hex digits of
its SHA-256 (stable, so the same caller token always maps to the same ACM token).

**Validation records.** ACM adds each ``DomainValidationOptions[].ResourceRecord`` a moment
after the request, not in its response. :meth:`Acm.validation_records` polls
``DescribeCertificate`` for up to ``wait`` seconds and returns what is there, saying whether
the set is ``complete`` and which domains are still ``pending``; a caller that gets an
incomplete set asks again later instead of writing half the records.

**Override ARNs.** :meth:`Acm.check_override` accepts an existing certificate only if it exists
(NotFound otherwise), is not expired, is ISSUED, and covers the domain and every alternative
name (a ``*.example.com`` entry covers exactly one label: ``a.example.com``, not
``example.com`` nor ``a.b.example.com``); anything else is Rejected with the reason.

``delete`` is the compensation of a request (and the handle's ``stop``): a certificate already
gone counts as deleted; one in use (attached to a load balancer or distribution) is a Conflict.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.clients import AwsClients, call, check_handle, error_code, translate
from providers.errors import NotFound, Rejected
from providers.handles import Handle, handle

PROVIDER = "aws.acm"
_ARN = re.compile(r"arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[A-Za-z0-9-]+")
FINAL_STATUSES = frozenset(
    {"ISSUED", "FAILED", "EXPIRED", "REVOKED", "VALIDATION_TIMED_OUT", "INACTIVE"}
)


class ValidationRecord(TypedDict):
    name: str  # without the trailing dot
    type: str
    value: str


class DomainValidation(TypedDict):
    domain: str
    status: str | None
    record: ValidationRecord | None


class Certificate(TypedDict):
    arn: str
    domain: str
    alternative_names: list[str]
    status: str
    type: str | None
    not_before: str | None
    not_after: str | None
    in_use_by: list[str]
    validation: list[DomainValidation]
    failure_reason: str | None  # ACM's FailureReason once FAILED (None otherwise)


class ValidationRecords(TypedDict):
    arn: str
    records: list[ValidationRecord]  # one per distinct record (a wildcard shares its base's)
    complete: bool
    pending: list[str]  # domains whose record ACM has not published yet


def acm_token(token: str) -> str:
    """ACM's form of a caller's token (``\\w{1,32}``), stable for a given token."""
    if re.fullmatch(r"\w{1,32}", token, flags=re.ASCII):
        return token
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def covers(names: Iterable[str], wanted: str) -> bool:
    """Whether a certificate for ``names`` is valid for the host name ``wanted``."""
    wanted = wanted.lower().rstrip(".")
    for name in names:
        name = name.lower().rstrip(".")
        if name == wanted:
            return True
        if name.startswith("*."):
            head, _, rest = wanted.partition(".")
            if head and head != "*" and rest == name[2:]:
                return True
    return False


class Acm:
    def __init__(
        self,
        *,
        clients: AwsClients | None = None,
        client: Any = None,
        poll_interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client or (clients or AwsClients()).client("acm")
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._clock = clock

    def _call(self, operation: str, **kwargs: Any) -> Any:
        return call(self._client, PROVIDER, operation, **kwargs)

    # -- requests ----------------------------------------------------------------------------

    def request(
        self,
        domain: str,
        *,
        alternative_names: Iterable[str] = (),
        idempotency_token: str,
        tags: Mapping[str, str] | None = None,
    ) -> Handle:
        """Request a DNS-validated certificate for ``domain`` (+ ``alternative_names``). A repeat
        with the same token returns the same certificate (see the module docstring). ``tags``
        go in the request itself, so a certificate found again after a lost response has them
        too (``acm:AddTagsToCertificate``)."""
        domain = domain.lower().rstrip(".")
        names = [n.lower().rstrip(".") for n in alternative_names]
        kwargs: dict[str, Any] = {
            "DomainName": domain,
            "ValidationMethod": "DNS",
            "IdempotencyToken": _token(idempotency_token),
        }
        sans = list(dict.fromkeys([domain, *names]))
        if len(sans) > 1:
            kwargs["SubjectAlternativeNames"] = sans
        if tags:
            kwargs["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
        arn = self._call("RequestCertificate", **kwargs)["CertificateArn"]
        result = self._certificate_handle(self._describe_new(arn))
        result["observations"]["idempotency_token"] = kwargs["IdempotencyToken"]
        return result

    def describe(self, arn: str) -> Certificate:
        raw = self._call("DescribeCertificate", CertificateArn=arn)["Certificate"]
        return _certificate(raw)

    def _describe_new(self, arn: str, *, wait: float = 10.0) -> Certificate:
        """ACM is eventually consistent: a certificate may be "not found" for a moment after
        the request that created it."""
        deadline = self._clock() + wait
        while True:
            try:
                return self.describe(arn)
            except NotFound:
                if self._clock() >= deadline:
                    raise
                self._sleep(self.poll_interval)

    def validation_records(self, arn: str, *, wait: float = 10.0) -> ValidationRecords:
        """The DNS records that validate ``arn``, polling up to ``wait`` seconds for ACM to
        publish all of them (``complete`` says whether it did)."""
        deadline = self._clock() + wait
        while True:
            certificate = self.describe(arn)
            pending = [v["domain"] for v in certificate["validation"] if v["record"] is None]
            if not pending or self._clock() >= deadline:
                break
            self._sleep(self.poll_interval)
        records: dict[tuple[str, str], ValidationRecord] = {}
        for validation in certificate["validation"]:
            rec = validation["record"]
            if rec is not None:
                records.setdefault((rec["name"], rec["type"]), rec)
        return ValidationRecords(
            arn=arn,
            records=list(records.values()),
            complete=not pending and bool(certificate["validation"]),
            pending=pending,
        )

    def delete(self, arn: str) -> Handle:
        """Delete the certificate (compensation). Already deleted counts as deleted."""
        try:
            self._client.delete_certificate(CertificateArn=arn)
            absent = False
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise translate(exc, provider=PROVIDER, operation="DeleteCertificate") from exc
            absent = True
        except BotoCoreError as exc:
            raise translate(exc, provider=PROVIDER, operation="DeleteCertificate") from exc
        return handle(
            provider=PROVIDER,
            kind="certificate_deletion",
            id=arn,
            status="DELETED",
            done=True,
            ok=True,
            observations={"already_absent": absent},
        )

    def stop(self, previous: Handle) -> Handle:
        """Stop a certificate request: delete the certificate."""
        previous = check_handle(previous, provider=PROVIDER, kinds={"certificate": ()})
        if not previous["id"]:
            raise Rejected(
                "a certificate handle without an ARN", provider=PROVIDER, code="MalformedHandle"
            )
        return self.delete(previous["id"])

    def inspect(self, previous: Handle) -> Handle:
        previous = check_handle(
            previous, provider=PROVIDER, kinds={"certificate": (), "certificate_deletion": ()}
        )
        if not previous["id"]:
            raise Rejected(
                "a certificate handle without an ARN", provider=PROVIDER, code="MalformedHandle"
            )
        if previous["kind"] == "certificate":
            return self._certificate_handle(
                self.describe(str(previous["id"])), base=previous["observations"]
            )
        if previous["kind"] == "certificate_deletion":
            try:
                self.describe(str(previous["id"]))
            except NotFound:
                status = "DELETED"
            else:
                status = "PRESENT"
            return handle(
                provider=PROVIDER,
                kind="certificate_deletion",
                id=previous["id"],
                status=status,
                done=True,
                ok=status == "DELETED",
                observations=dict(previous["observations"]),
            )
        raise AssertionError(f"unhandled handle kind {previous['kind']}")  # pragma: no cover

    def _certificate_handle(
        self, certificate: Certificate, base: Mapping[str, Any] | None = None
    ) -> Handle:
        status = certificate["status"]
        return handle(
            provider=PROVIDER,
            kind="certificate",
            id=certificate["arn"],
            status=status,
            done=status in FINAL_STATUSES,
            ok=status == "ISSUED",
            observations={**(base or {}), "certificate": certificate},
        )

    # -- overrides ---------------------------------------------------------------------------

    def check_override(
        self, arn: str, *, domain: str, alternative_names: Iterable[str] = ()
    ) -> Certificate:
        """``arn`` if it may serve ``domain`` and ``alternative_names`` now; NotFound if there is
        no such certificate, Rejected (with the reason) otherwise."""
        if not _ARN.fullmatch(arn):
            raise Rejected(
                f"{arn} is not a valid certificate ARN (arn:aws:acm:<region>:<account>:"
                "certificate/<id>)",
                provider=PROVIDER,
                code="InvalidArnException",
            )
        try:
            certificate = self.describe(arn)
        except Rejected as exc:  # a malformed ARN: ValidationException, InvalidArnException
            raise Rejected(
                f"{arn} is not a valid certificate ARN: {exc.message}",
                provider=PROVIDER,
                code=exc.code,
            ) from exc
        reasons: list[str] = []
        not_after = certificate["not_after"]
        if not_after and dt.datetime.fromisoformat(not_after) <= dt.datetime.now(dt.UTC):
            reasons.append(f"it expired at {not_after}")
        if certificate["status"] != "ISSUED":
            reasons.append(f"its status is {certificate['status']}, not ISSUED")
        names = [certificate["domain"], *certificate["alternative_names"]]
        wanted = [domain, *alternative_names]
        uncovered = [n.lower().rstrip(".") for n in wanted if not covers(names, n)]
        if uncovered:
            reasons.append(
                f"it does not cover {', '.join(uncovered)} "
                f"(it covers {', '.join(sorted(set(names)))})"
            )
        if reasons:
            raise Rejected(
                f"certificate {arn} cannot be used: " + "; ".join(reasons),
                provider=PROVIDER,
                code="CertificateNotUsable",
                details={"reasons": reasons, "certificate": certificate},
            )
        return certificate


def _token(token: str) -> str:
    if not token:
        raise Rejected("an idempotency token is required", provider=PROVIDER)
    return acm_token(token)


def _iso(value: Any) -> str | None:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    return None


def _certificate(raw: Mapping[str, Any]) -> Certificate:
    validation: list[DomainValidation] = []
    for option in raw.get("DomainValidationOptions") or []:
        rr = option.get("ResourceRecord")
        validation.append(
            DomainValidation(
                domain=str(option["DomainName"]),
                status=option.get("ValidationStatus"),
                record=None
                if not rr
                else ValidationRecord(
                    name=str(rr["Name"]).rstrip(".").lower(),
                    type=str(rr["Type"]),
                    value=str(rr["Value"]),
                ),
            )
        )
    validation.sort(key=lambda v: v["domain"])
    domain = str(raw.get("DomainName", ""))
    return Certificate(
        arn=str(raw["CertificateArn"]),
        domain=domain,
        alternative_names=sorted(
            n for n in raw.get("SubjectAlternativeNames") or [] if n != domain
        ),
        status=str(raw.get("Status", "")),
        type=raw.get("Type"),
        not_before=_iso(raw.get("NotBefore")),
        not_after=_iso(raw.get("NotAfter")),
        in_use_by=list(raw.get("InUseBy") or []),
        validation=validation,
        failure_reason=str(raw["FailureReason"]) if raw.get("FailureReason") else None,
    )
