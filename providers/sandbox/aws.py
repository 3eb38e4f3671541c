"""The AWS stand-in: one endpoint for boto3 (``AWS_ENDPOINT_URL``), faithful where Alfred relies
on AWS's behaviour.

Requests are routed by what they are, not by host name:

- **Route53** (REST-XML under ``/2013-04-01/``) is served by :mod:`providers.sandbox.route53`,
  an implementation that keeps AWS's rules where moto 5.2 does not (atomic batches, exact
  DELETEs, CNAME exclusivity, PENDING before INSYNC, ``NoSuchChange``).
- **Everything else** (ACM, Lambda, IAM, STS, ...) goes to moto's in-process server app, which
  picks the service from the request's SigV4 credential scope. The stand-in closes moto's gaps
  on the way through:

  - *Lambda LastUpdateStatus.* moto reports every update ``Successful`` at once. Here
    ``UpdateFunctionCode`` / ``UpdateFunctionConfiguration`` put ``$LATEST`` ``InProgress``
    (and ``PublishVersion`` the version it publishes) for ``lambda_update_delay`` seconds,
    then ``Successful`` (or ``Failed`` under the ``fail_update`` fault), as ``GetFunction`` /
    ``GetFunctionConfiguration`` / ``ListVersionsByFunction`` report it; and, as Lambda does,
    another update or a publish of a function whose update is in progress is refused with
    ``ResourceConflictException`` (409).
  - *Lambda alias RevisionId.* moto neither changes an alias's RevisionId on update nor checks
    the one a caller sends. Here every successful ``UpdateAlias`` gives the alias a new
    RevisionId, and an ``UpdateAlias`` whose RevisionId is not the current one fails with
    ``PreconditionFailedException`` (412), so compare-and-swap on an alias is real.
  - *ACM DNS validation.* moto turns a certificate ISSUED after ``MOTO_ACM_VALIDATION_WAIT``
    seconds whatever DNS says. With ``acm_requires_dns`` (the default) a certificate is issued
    only once every validation CNAME it asks for is served by this stand-in's Route53, and
    has been for ``acm_issue_delay`` seconds. (This sets moto's process-wide
    ``ACM_VALIDATION_WAIT`` out of reach: moto's backends are process-global.) And as in real
    ACM, ``DescribeCertificate`` omits the validation ``ResourceRecord`` for the first
    ``acm_record_delay`` seconds after the request.

moto's state is process-global; each stand-in therefore uses its own AWS account id (moto's
``x-moto-account-id``), so two stand-ins in one process (the contract suite, the devstack) do
not see each other's certificates or functions. Route53 state belongs to the instance.

**State across restarts** (``state_dir``, as ``make run`` gives it; none in most tests): Route53
saves its state to ``route53.json`` (:class:`providers.sandbox.route53.Route53`), and the rest
to ``aws.json``: the account id, every request that changed something in moto (2xx, not a
``Get``/``List``/``Describe``/``Invoke``), the aliases' RevisionIds and the certificates issued
here. moto's objects cannot be written out (private keys, locks), so a start replays those
requests, in order, into a clean account, and gives each certificate back the ARN it had
(moto draws a new one): ARNs, versions, aliases and their RevisionIds come back as they
were. What is not kept: Lambda updates in progress (they have ended by the restart, each
``Successful``, even one under ``fail_update``), ACM's record and issue delays (they start
again), and :attr:`calls` (counted from this start).

Faults: ``self.faults.arm(operation, kind, ...)``, ``operation`` an AWS operation name or
``*``; the kinds (``lose_response``, ``drop_request``, ``throttle``, ``server_error``,
``hold_request``, ``fail_update``, ``hold_update``) and the ``foreign_changes`` a Route53
fault applies as another writer's batch: docs/providers.md, "The sandbox" (fault injection).

Introspection for tests: :attr:`AwsStandIn.calls` counts the operations that reached a
backend (performed, successful or not; not a held request, which ``route53.late_batches``
records when it lands), :attr:`AwsStandIn.route53` ``.change_batches`` lists the applied
change batches.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import threading
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from werkzeug.test import EnvironBuilder, run_wsgi_app

from providers.sandbox.route53 import API as ROUTE53_API
from providers.sandbox.route53 import Route53, Route53Error, error_response
from providers.sandbox.server import LOST, Fault, Request, Response, StandIn, _Lost
from providers.sandbox.state import StateFile

logger = logging.getLogger(__name__)

_SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request")
_HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "server", "date"}
_LAMBDA_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(r"^/\d{4}-\d{2}-\d{2}" + pattern), name)
    for method, pattern, name in [
        ("GET", r"/functions/?$", "ListFunctions"),
        ("POST", r"/functions/?$", "CreateFunction"),
        ("GET", r"/functions/[^/]+/?$", "GetFunction"),
        ("DELETE", r"/functions/[^/]+/?$", "DeleteFunction"),
        ("GET", r"/functions/[^/]+/configuration/?$", "GetFunctionConfiguration"),
        ("PUT", r"/functions/[^/]+/configuration/?$", "UpdateFunctionConfiguration"),
        ("PUT", r"/functions/[^/]+/code/?$", "UpdateFunctionCode"),
        ("POST", r"/functions/[^/]+/versions/?$", "PublishVersion"),
        ("GET", r"/functions/[^/]+/versions/?$", "ListVersionsByFunction"),
        ("POST", r"/functions/[^/]+/aliases/?$", "CreateAlias"),
        ("GET", r"/functions/[^/]+/aliases/?$", "ListAliases"),
        ("GET", r"/functions/[^/]+/aliases/[^/]+/?$", "GetAlias"),
        ("PUT", r"/functions/[^/]+/aliases/[^/]+/?$", "UpdateAlias"),
        ("DELETE", r"/functions/[^/]+/aliases/[^/]+/?$", "DeleteAlias"),
        ("POST", r"/functions/[^/]+/invocations/?$", "Invoke"),
        ("GET", r"/tags/.+$", "ListTags"),
        ("POST", r"/tags/.+$", "TagResource"),
        ("DELETE", r"/tags/.+$", "UntagResource"),
    ]
]
_LAMBDA_UPDATES = {"UpdateFunctionCode", "UpdateFunctionConfiguration", "PublishVersion"}


@dataclass
class _Update:
    operation: str  # the operation that started it
    started: float  # time.monotonic()
    failed: bool
    held: bool  # started under a hold_update fault: InProgress while one is armed


class AwsStandIn(StandIn):
    name = "aws"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        route53_change_delay: float = 2.0,
        lambda_update_delay: float = 0.5,
        acm_record_delay: float = 1.0,
        acm_issue_delay: float = 3.0,
        acm_requires_dns: bool = True,
        account_id: str | None = None,
        state_dir: Path | None = None,
        rates: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        from moto.moto_server.werkzeug_app import (  # a sandbox-only dependency
            DomainDispatcherApplication,
            create_backend_app,
        )

        self.route53 = Route53(
            change_delay=route53_change_delay,
            state=None if state_dir is None else StateFile(state_dir / "route53.json"),
        )
        self.lambda_update_delay = lambda_update_delay
        self.acm_record_delay = acm_record_delay
        self.acm_issue_delay = acm_issue_delay
        self.acm_requires_dns = acm_requires_dns
        self._state = None if state_dir is None else StateFile(state_dir / "aws.json")
        saved = self._state.load() if self._state is not None else None
        self.account_id = (
            account_id or (saved or {}).get("account_id") or f"{uuid.uuid4().int % 10**12:012d}"
        )
        self._moto_requests: list[dict[str, Any]] = []  # what a restart replays
        self._issued: list[tuple[str, str]] = []  # (region, ARN) issued here
        self.calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()
        # AWS's request rates per account (``RATES``: Route53's five a second...), each
        # service's a bucket of one second's worth; a request past it is refused as AWS
        # refuses it (``_throttled``) and counted in ``throttled``. None: no limit.
        self._buckets = {
            service: _Bucket(rate) for service, rate in (rates or {}).items() if rate > 0
        }
        self.throttled: Counter[str] = Counter()
        self._moto_app = DomainDispatcherApplication(create_backend_app)
        # moto's backends are not built for concurrent mutation, and the RevisionId check
        # below must read and update an alias as one step.
        self._moto_lock = threading.RLock()
        self._alias_revisions: dict[str, str] = {}  # alias ARN -> RevisionId
        self._updates: dict[tuple[str, str, str], _Update] = {}  # (region, function, version)
        self._cert_requested: dict[str, float] = {}  # ARN -> time.monotonic()
        self._cert_dns_seen: dict[str, float] = {}  # ARN -> when all its CNAMEs were seen
        if acm_requires_dns:
            from moto import settings as moto_settings

            moto_settings.ACM_VALIDATION_WAIT = 10**9
        if saved is not None:
            self._replay(saved)
        self._save()  # the account id, from the first start on

    @property
    def moto_account(self) -> str:
        """The account moto files this stand-in's resources under (MOTO_ACCOUNT_ID wins)."""
        return os.environ.get("MOTO_ACCOUNT_ID") or self.account_id

    def limit(self, service: str, rate: float | None) -> None:
        """Meter ``service`` at ``rate`` requests a second from now on (None: no limit)."""
        if rate:
            self._buckets[service] = _Bucket(rate)
        else:
            self._buckets.pop(service, None)

    def journal(self) -> dict[str, Any]:
        """The operations that reached a backend (:attr:`calls`, since this start) and
        Route53's change batches."""
        with self._calls_lock:
            calls = dict(sorted(self.calls.items()))
            throttled = dict(sorted(self.throttled.items()))
        return {"calls": calls, "throttled": throttled, "route53": self.route53.journal()}

    # -- dispatch ----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | _Lost:
        if request.path.startswith(ROUTE53_API + "/"):
            routed = Route53.operation(request)
            return self._serve(request, "route53", "us-east-1", routed[0] if routed else "Route53")
        scope = _SCOPE.search(request.headers.get("authorization", ""))
        service = scope["service"] if scope else "unknown"
        region = scope["region"] if scope else "us-east-1"
        return self._serve(request, service, region, _operation(service, request))

    def _serve(
        self, request: Request, service: str, region: str, operation: str
    ) -> Response | _Lost:
        bucket = self._buckets.get(service)
        if bucket is not None and not bucket.take():
            with self._calls_lock:
                self.throttled[service] += 1
            logger.info("aws: %s over its rate: throttled", operation)
            return _throttled(service, request)
        throttled = self.faults.take(operation, "throttle")
        if throttled:
            logger.info("aws: throttling %s", operation)
            self._interfere(request, operation, throttled)
            return _throttled(service, request)
        dropped = self.faults.take(operation, "drop_request")
        if dropped:
            logger.info("aws: dropping the request %s", operation)
            self._interfere(request, operation, dropped)
            return LOST
        if operation == "ChangeResourceRecordSets":
            held = self.faults.take(operation, "hold_request")
            if held:
                logger.info("aws: holding the request %s; it lands later", operation)
                self.route53.hold(request, after=int(held.params.get("after") or 1))
                return LOST
        failing = self.faults.take(operation, "server_error")
        if failing and not failing.params.get("apply"):
            logger.info("aws: a gateway error instead of %s", operation)
            self._interfere(request, operation, failing)
            return _gateway_error(failing)
        if service == "route53":
            response = self.route53.handle(request)
        else:
            response = self._moto(request, service, region, operation)
        with self._calls_lock:
            self.calls[operation] += 1
        if failing:
            logger.info("aws: a gateway error after performing %s", operation)
            self._interfere(request, operation, failing)
            return _gateway_error(failing)
        lost = self.faults.take(operation, "lose_response")
        if lost:
            logger.info("aws: losing the response to %s", operation)
            self._interfere(request, operation, lost)
            return LOST
        return response

    def _interfere(self, request: Request, operation: str, fault: Fault) -> None:
        changes = fault.params.get("foreign_changes")
        if operation != "ChangeResourceRecordSets" or not changes:
            return
        routed = Route53.operation(request)
        if routed is None:
            return
        try:
            self.route53.apply_foreign(routed[1]["id"], changes)
        except Route53Error:
            logger.exception("aws: the foreign batch of a drop_request fault was refused")

    # -- moto ----------------------------------------------------------------------------------

    def _moto(self, request: Request, service: str, region: str, operation: str) -> Response:
        with self._moto_lock:
            if service == "acm" and self.acm_requires_dns:
                self._issue_validated_certificates(region)
            if service == "lambda":
                refused = self._lambda_precondition(request, region, operation)
                if refused is not None:
                    return refused
            response = self._forward(request)
            if service == "lambda":
                response = self._lambda_observe(request, region, operation, response)
            elif service == "acm":
                response = self._acm_observe(request, operation, response)
            if 200 <= response.status < 300 and not operation.startswith(_READS):
                self._record(request, service, region, operation, response)
            return response

    # -- state on disk -------------------------------------------------------------------------

    def _record(
        self, request: Request, service: str, region: str, operation: str, response: Response
    ) -> None:
        """Keep a request that changed moto's state, for a restart to replay."""
        if self._state is None:
            return
        entry: dict[str, Any] = {
            "service": service,
            "region": region,
            "operation": operation,
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "headers": dict(request.headers),
            "body": base64.b64encode(request.body).decode(),
        }
        if operation == "RequestCertificate":
            entry["certificate_arn"] = _json(response.body).get("CertificateArn")
        self._moto_requests.append(entry)
        self._save()

    def _save(self) -> None:
        if self._state is None:
            return
        self._state.save(
            {
                "account_id": self.account_id,
                "moto_requests": self._moto_requests,
                "alias_revisions": self._alias_revisions,
                "issued_certificates": self._issued,
            }
        )

    def _replay(self, saved: dict[str, Any]) -> None:
        """Put moto back as ``saved`` left it: into a clean account (one this process used
        before holds the objects of then), the saved requests in order."""
        from moto.acm.models import acm_backends
        from moto.backends import get_backend

        requests: list[dict[str, Any]] = saved.get("moto_requests") or []
        for service in {entry["service"] for entry in requests}:
            get_backend(service)[self.moto_account].reset()
        for entry in requests:
            response = self._forward(
                Request(
                    method=entry["method"],
                    path=entry["path"],
                    query=entry["query"],
                    headers=entry["headers"],
                    body=base64.b64decode(entry["body"]),
                )
            )
            if not 200 <= response.status < 300:
                logger.warning(
                    "aws: replaying %s gave %s: %s",
                    entry["operation"],
                    response.status,
                    response.body[:200],
                )
                continue
            kept = entry.get("certificate_arn")
            drawn = _json(response.body).get("CertificateArn")
            if kept and drawn and drawn != kept:
                _rename_certificate(acm_backends[self.moto_account][entry["region"]], drawn, kept)
        self._moto_requests = list(requests)
        self._alias_revisions = dict(saved.get("alias_revisions") or {})
        for region, arn in saved.get("issued_certificates") or []:
            certificate = acm_backends[self.moto_account][region]._certificates.get(arn)
            if certificate is not None:
                certificate.status = "ISSUED"
                self._issued.append((region, arn))
        logger.info("aws: %d requests replayed from %s", len(requests), self._state)

    def _forward(
        self, request: Request, *, method: str | None = None, body: bytes | None = None
    ) -> Response:
        headers = [(k, v) for k, v in request.headers.items() if k != "content-length"]
        headers.append(("x-moto-account-id", self.account_id))
        environ = EnvironBuilder(
            path=request.path,
            method=method or request.method,
            query_string=urlencode(request.query, doseq=True),
            headers=headers,
            data=request.body if body is None else body,
        ).get_environ()
        app_iter, status, response_headers = run_wsgi_app(self._moto_app, environ, buffered=True)
        try:
            data = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
        kept = {k: v for k, v in response_headers.items() if k.lower() not in _HOP_BY_HOP}
        return Response(int(status.split()[0]), data, kept)

    # -- Lambda --------------------------------------------------------------------------------

    def _lambda_precondition(
        self, request: Request, region: str, operation: str
    ) -> Response | None:
        """Lambda's refusals that moto does not make (see the module docstring)."""
        if operation == "UpdateAlias":
            current = self._forward(request, method="GET", body=b"")
            if not 200 <= current.status < 300:
                return None  # moto answers the forwarded request with the same error
            alias = json.loads(current.body)
            revision = self._alias_revisions.setdefault(alias["AliasArn"], alias["RevisionId"])
            wanted = _json(request.body).get("RevisionId")
            if wanted and wanted != revision:
                return _lambda_error(
                    412,
                    "PreconditionFailedException",
                    "The Revision Id provided does not match the latest Revision Id. "
                    "Call the GetFunction/GetAlias API to retrieve the latest Revision Id",
                )
        if operation in _LAMBDA_UPDATES:
            function = _function_name(request.path)
            if function and self._update_status(region, function, "$LATEST")[0] == "InProgress":
                arn = f"arn:aws:lambda:{region}:{self.moto_account}:function:{function}"
                return _lambda_error(
                    409,
                    "ResourceConflictException",
                    "The operation cannot be performed at this time. "
                    f"An update is in progress for resource: {arn}",
                )
        return None

    def _lambda_observe(
        self, request: Request, region: str, operation: str, response: Response
    ) -> Response:
        if not 200 <= response.status < 300 or not response.body:
            return response
        if operation in {"GetAlias", "UpdateAlias"}:
            response.status = 200  # moto answers 201 (Lambda: 201 for CreateAlias only)
        body = _json(response.body)
        if operation in {"CreateAlias", "GetAlias", "UpdateAlias"}:
            arn = body.get("AliasArn")
            if arn:
                if operation == "CreateAlias":
                    self._alias_revisions[arn] = body["RevisionId"]
                elif operation == "UpdateAlias":
                    self._alias_revisions[arn] = str(uuid.uuid4())
                body["RevisionId"] = self._alias_revisions.setdefault(arn, body["RevisionId"])
        elif operation == "ListAliases":
            for alias in body.get("Aliases") or []:
                arn = alias["AliasArn"]
                alias["RevisionId"] = self._alias_revisions.setdefault(arn, alias["RevisionId"])
        if operation == "UpdateAlias":
            self._alias_update_faulted(request, region, str(body.get("FunctionVersion")))
        if operation in _LAMBDA_UPDATES:
            version = "$LATEST" if operation != "PublishVersion" else str(body.get("Version"))
            key = (region, str(body.get("FunctionName")), version)
            if operation != "PublishVersion" or key not in self._updates:
                # (moto answers a publish without changes with the existing version.)
                failed = self.faults.take(operation, "fail_update") is not None
                self._updates[key] = _Update(
                    operation=operation,
                    started=time.monotonic(),
                    failed=failed,
                    held=self._held(operation, key[1]),
                )
        configurations: list[dict[str, Any]] = []
        if operation in {"GetFunctionConfiguration", *_LAMBDA_UPDATES}:
            configurations.append(body)
        elif operation == "GetFunction" and isinstance(body.get("Configuration"), dict):
            configurations.append(body["Configuration"])
        elif operation in {"ListVersionsByFunction", "ListFunctions"}:
            configurations.extend(body.get("Versions") or body.get("Functions") or [])
        for configuration in configurations:
            status, reason = self._update_status(
                region, str(configuration.get("FunctionName")), str(configuration.get("Version"))
            )
            if status is not None:
                configuration["LastUpdateStatus"] = status
                if reason:
                    configuration["LastUpdateStatusReason"] = reason
                    configuration["LastUpdateStatusReasonCode"] = "InternalError"
        response.body = json.dumps(body).encode()
        return response

    def _alias_update_faulted(self, request: Request, region: str, version: str) -> None:
        """An alias moved under a ``fail_update`` or ``hold_update`` fault armed on
        ``UpdateAlias``: the version it now points to reports the update as one started now
        (``InProgress``, then ``Failed``, or held) — what update-lambda-version waits on after
        moving an alias, so a slow or failed move can be simulated. Lambda itself reports no
        status for an alias move, so without such a fault the version's status is left as
        it was."""
        function = _function_name(request.path)
        if not function:
            return
        held = self._held("UpdateAlias", function)
        failed = self.faults.take("UpdateAlias", "fail_update") is not None
        if failed or held:
            self._updates[(region, function, version)] = _Update(
                operation="UpdateAlias", started=time.monotonic(), failed=failed, held=held
            )

    def _update_status(
        self, region: str, function: str, version: str
    ) -> tuple[str | None, str | None]:
        update = self._updates.get((region, function, version))
        if update is None:
            return None, None
        if update.held and self._held(update.operation, function):
            return "InProgress", None
        if time.monotonic() - update.started < self.lambda_update_delay:
            return "InProgress", None
        if update.failed:
            return "Failed", "The update failed (a fail_update fault of the AWS stand-in)."
        return "Successful", None

    def _held(self, operation: str, function: str) -> bool:
        return any(
            fault["kind"] == "hold_update"
            and fault["operation"] in (operation, "*")
            and fault["params"].get("function") in (None, function)
            for fault in self.faults.listing()
        )

    # -- ACM -----------------------------------------------------------------------------------

    def _issue_validated_certificates(self, region: str) -> None:
        """Issue the pending certificates whose validation CNAMEs Route53 has been serving for
        ``acm_issue_delay`` seconds (what ACM's validation does, minus the real DNS)."""
        from moto.acm.models import acm_backends

        backend = acm_backends[self.moto_account][region]
        now = time.monotonic()
        for cert in list(backend.list_certificates(["PENDING_VALIDATION"], {})):
            if cert.type != "AMAZON_ISSUED":
                continue
            options = cert.describe()["Certificate"].get("DomainValidationOptions") or []
            records = [o["ResourceRecord"] for o in options if o.get("ResourceRecord")]
            if records and all(self._served(r["Name"], r["Type"], r["Value"]) for r in records):
                seen = self._cert_dns_seen.setdefault(cert.arn, now)
                if now - seen >= self.acm_issue_delay:
                    cert.status = "ISSUED"
                    self._issued.append((region, cert.arn))
                    self._save()
                    logger.info("aws: issued %s (its validation records are served)", cert.arn)
            else:
                self._cert_dns_seen.pop(cert.arn, None)

    def _served(self, name: str, rtype: str, value: str) -> bool:
        wanted = value.rstrip(".").lower()
        return any(v.rstrip(".").lower() == wanted for v in self.route53.lookup(name, rtype))

    def _acm_observe(self, request: Request, operation: str, response: Response) -> Response:
        if response.status != 200 or not response.body:
            return response
        if operation == "RequestCertificate":
            arn = _json(response.body).get("CertificateArn")
            if arn:
                self._cert_requested.setdefault(arn, time.monotonic())
        elif operation == "DescribeCertificate":
            body = _json(response.body)
            certificate = body.get("Certificate") or {}
            requested = self._cert_requested.get(certificate.get("CertificateArn", ""))
            if requested is not None and time.monotonic() - requested < self.acm_record_delay:
                for option in certificate.get("DomainValidationOptions") or []:
                    option.pop("ResourceRecord", None)
                response.body = json.dumps(body).encode()
        return response


# -- helpers -----------------------------------------------------------------------------------

# Operations that change nothing: a restart need not replay them.
_READS = ("Get", "List", "Describe", "Invoke")


def _rename_certificate(backend: Any, drawn: str, kept: str) -> None:
    """Give the certificate moto has just made under ``drawn`` the ARN it had (``kept``),
    where moto's ACM backend keeps it: the object, its key in the backend, and the
    idempotency tokens that name it."""
    certificate = backend._certificates.pop(drawn)
    certificate.arn = kept
    backend._certificates[kept] = certificate
    for token in backend._idempotency_tokens.values():
        if token["arn"] == drawn:
            token["arn"] = kept


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _operation(service: str, request: Request) -> str:
    """The AWS operation name of a request for moto: from X-Amz-Target (JSON protocols), the
    method and path (Lambda's REST-JSON), or the Action of a query-protocol form."""
    target = request.headers.get("x-amz-target")
    if target:
        return target.rsplit(".", 1)[-1]
    if service == "lambda":
        for method, pattern, name in _LAMBDA_ROUTES:
            if request.method == method and pattern.match(request.path):
                return name
    action = (
        request.arg("Action")
        or parse_qs(request.body.decode(errors="replace")).get("Action", [""])[0]
    )
    return action or f"{service}:{request.method} {request.path}"


def _function_name(path: str) -> str | None:
    match = re.match(r"^/\d{4}-\d{2}-\d{2}/functions/([^/]+)", path)
    if not match:
        return None
    name = unquote(match[1])
    return name.split(":")[6] if name.startswith("arn:") else name.split(":")[0]


def _lambda_error(status: int, code: str, message: str) -> Response:
    return Response.json(status, {"Type": "User", "message": message}, {"x-amzn-ErrorType": code})


def _gateway_error(fault: Fault) -> Response:
    status = int(fault.params.get("status") or 502)
    phrase = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
    text = phrase.get(status, "Gateway Timeout")
    body = f"<html><body><h1>{status} {text}</h1></body></html>"
    return Response(status, body.encode(), {"Content-Type": "text/html"})


# AWS's documented request rates per account and second: Route53's API (all of it), ACM's
# DescribeCertificate (its most used), Lambda's control plane.
RATES: Mapping[str, float] = {"route53": 5.0, "acm": 10.0, "lambda": 15.0}


class _Bucket:
    """A token bucket of ``rate`` a second holding one second's worth, as AWS meters."""

    def __init__(self, rate: float) -> None:
        # at least one token's room, or a rate under 1/s would never let one through
        self.rate, self.capacity = rate, max(1.0, rate)
        self.tokens, self.at = self.capacity, time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


def _throttled(service: str, request: Request) -> Response:
    if service == "route53":
        return error_response(400, "Throttling", "Rate exceeded")
    if service == "lambda":
        return Response.json(
            429,
            {"Reason": "CallerRateLimitExceeded", "Type": "User", "message": "Rate exceeded"},
            {"x-amzn-ErrorType": "TooManyRequestsException"},
        )
    if request.headers.get("x-amz-target"):
        return Response(
            400,
            json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode(),
            {"Content-Type": "application/x-amz-json-1.1"},
        )
    body = (
        "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>"
        f"<Message>Rate exceeded</Message></Error><RequestId>{uuid.uuid4()}</RequestId>"
        "</ErrorResponse>"
    )
    return Response(400, body.encode(), {"Content-Type": "text/xml"})


# -- seed --------------------------------------------------------------------------------------

CLOUDFRONT_ZONE_ID = "Z2FDTNDATAQYW2"  # every CloudFront distribution's alias zone
ALB_ZONE_ID_US_EAST_1 = "Z35SXDOTRQ7X7K"  # Elastic Load Balancing in us-east-1
SEED_FLEETS = {
    "checkout-api": ("checkout-api-cart", "checkout-api-orders", "checkout-api-payments"),
    "search-api": ("search-api-query", "search-api-indexer"),
}
SEED_ALIASES = {"staging": "3", "production": "2"}


def _alias(zone_id: str, dns_name: str) -> dict[str, Any]:
    return {"HostedZoneId": zone_id, "DNSName": dns_name, "EvaluateTargetHealth": False}


def _zone_records(zone: str) -> list[dict[str, Any]]:
    if zone == "example.com":
        cloudfront = _alias(CLOUDFRONT_ZONE_ID, "d111111abcdef8.cloudfront.net.")
        return [
            {"Name": "example.com.", "Type": "A", "AliasTarget": cloudfront},
            {"Name": "example.com.", "Type": "AAAA", "AliasTarget": cloudfront},
            {"Name": "www.example.com.", "Type": "A", "AliasTarget": cloudfront},
            {
                "Name": "blog.example.com.",
                "Type": "CNAME",
                "TTL": 300,
                "ResourceRecords": [{"Value": "example-blog.ghost.io"}],
            },
            {
                "Name": "api.example.com.",
                "Type": "A",
                "TTL": 300,
                "ResourceRecords": [{"Value": "192.0.2.10"}],
            },
        ]
    # acme.com is already on the platform: the GitHub stand-in's Helm values and nginx
    # booking files list these names (providers/sandbox/github_seed.py).
    alb = _alias(
        ALB_ZONE_ID_US_EAST_1, "dualstack.acme-edge-alb-1234567890.us-east-1.elb.amazonaws.com."
    )
    names = (zone, f"www.{zone}", f"shop.{zone}", f"www.shop.{zone}", f"magazine.{zone}")
    # a dualstack load balancer: A and AAAA, as add-domain writes them
    return [
        {"Name": f"{name}.", "Type": kind, "AliasTarget": alb}
        for name in names
        for kind in ("A", "AAAA")
    ]


def _code(function: str, version: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "index.py",
            f"def handler(event, context):\n    return {{'function': {function!r}, "
            f"'build': {version}}}\n",
        )
    return buffer.getvalue()


def seed_aws(endpoint_url: str, *, region: str = "us-east-1") -> dict[str, Any]:
    """Seed a demo through boto3 against the stand-in at ``endpoint_url``: two hosted zones with
    apex aliases (and, in example.com, a CNAME and a plain A a subdomain request would have to
    overwrite), and two Lambda fleets with versions 1-3 and aliases staging -> 3,
    production -> 2. Safe to run again on a seeded stand-in: it adds only the zones and
    functions that are missing, and leaves those there as they are (a restart of ``make run``
    seeds again, and must not undo what Alfred changed). Returns a summary."""
    # Fixed credentials: the stand-in checks no signature, and a developer's real keys have
    # no business in requests to it.
    session = boto3.session.Session(
        aws_access_key_id="sandbox",
        aws_secret_access_key="sandbox",  # noqa: S106 - a stand-in's placeholder
        region_name=region,
    )
    # The stand-in meters AWS's rates (Route53's five a second) from its start, seeding
    # included: a burst past them is refused as AWS would, and the seed waits it out, as
    # patiently as it takes (botocore's default gave up after two retries of a throttled
    # call on a busy machine, and the sandbox exited). A throttled call did nothing: sent again.
    patient = Config(retries={"mode": "standard", "max_attempts": 20})
    route53 = session.client("route53", endpoint_url=endpoint_url, config=patient)
    iam = session.client("iam", endpoint_url=endpoint_url, config=patient)
    lambda_ = session.client("lambda", endpoint_url=endpoint_url, config=patient)

    zones: dict[str, str] = {}
    for zone in ("example.com", "acme.com"):
        found = route53.list_hosted_zones_by_name(DNSName=zone, MaxItems="1")["HostedZones"]
        if found and found[0]["Name"] == f"{zone}.":
            zones[zone] = found[0]["Id"].removeprefix("/hostedzone/")
            continue
        # A reference is never reusable, and the sandbox keeps them: a seeded zone deleted
        # since is seeded again under a new one.
        reference = f"alfred-seed-{zone}-{uuid.uuid4().hex[:8]}"
        zone_id = route53.create_hosted_zone(Name=zone, CallerReference=reference)["HostedZone"][
            "Id"
        ].removeprefix("/hostedzone/")
        route53.change_resource_record_sets(
            HostedZoneId=zone_id,
            ChangeBatch={
                "Comment": "alfred sandbox seed",
                "Changes": [
                    {"Action": "UPSERT", "ResourceRecordSet": record}
                    for record in _zone_records(zone)
                ],
            },
        )
        zones[zone] = zone_id

    try:
        role = iam.get_role(RoleName="alfred-sandbox-lambda")["Role"]["Arn"]
    except ClientError:
        role = iam.create_role(
            RoleName="alfred-sandbox-lambda",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )["Role"]["Arn"]

    existing = {
        f["FunctionName"]
        for page in lambda_.get_paginator("list_functions").paginate()
        for f in page["Functions"]
    }
    fresh = [
        (fleet, name)
        for fleet, names in SEED_FLEETS.items()
        for name in names
        if name not in existing
    ]
    for fleet, name in fresh:
        lambda_.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=role,
            Handler="index.handler",
            Code={"ZipFile": _code(name, 1)},
            Publish=True,
            Tags={"alfred:fleet": fleet},
        )
    # Versions 2 and 3: update every function, wait once for the updates to settle (Lambda
    # refuses to publish during an update), publish every function.
    for build in (2, 3):
        for _, name in fresh:
            lambda_.update_function_code(FunctionName=name, ZipFile=_code(name, build))
        for _, name in fresh:
            _await_update(lambda_, name)
            lambda_.publish_version(FunctionName=name, Description=f"build {build}")
    for _, name in fresh:
        for alias, version in SEED_ALIASES.items():
            lambda_.create_alias(FunctionName=name, Name=alias, FunctionVersion=version)

    return {
        "zones": zones,
        "fleets": {fleet: list(names) for fleet, names in SEED_FLEETS.items()},
        "aliases": dict(SEED_ALIASES),
        "fleet_tag": "alfred:fleet",
    }


def _await_update(client: Any, function: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get_function_configuration(FunctionName=function).get("LastUpdateStatus")
        if status != "InProgress":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{function} is still updating after {timeout} s")
        time.sleep(0.05)
