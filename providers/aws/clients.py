"""boto3 clients, and what their failures mean to a workflow.

Two kinds of client, on purpose:

- **Read clients** use botocore's ``standard`` retry mode with ``max_attempts`` (throttling,
  5xx, dropped connections are retried transparently). Reads are safe to repeat.
- **Mutation clients** (``max_attempts=1``) carry the calls whose repetition is not safe to
  leave to botocore: a Route53 change batch (a re-sent CREATE fails, a re-sent DELETE fails,
  a re-sent batch is a second change), a Lambda alias update (a re-sent update with the old
  RevisionId fails). botocore's standard mode treats a dropped connection or a read timeout
  as transient and would re-send the request after the provider may already have applied it.
  The adapters retry throttling themselves (nothing was applied) and resolve an ambiguous
  failure (:func:`is_ambiguous`) by reading the provider's state (see
  :mod:`providers.aws.route53`, :mod:`.lambda_`).

Region, credentials and endpoint come from the standard AWS environment (``AWS_REGION``, then
``AWS_DEFAULT_REGION`` or the profile; the credentials chain; ``AWS_ENDPOINT_URL`` and its
per-service forms, which boto3 applies itself) unless given explicitly; nothing here reads
Django settings.

Sessions are shared (:func:`shared_session`): building one loads and parses the service
models (about 200 ms), a client from a built one costs about 15 ms, and a workflow builds a
client in nearly every step. A session is not thread-safe (its clients are), so there is one
per process, thread and set of credentials; a forked worker never uses its parent's.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    IncompleteReadError,
)

from providers.budgets import BUDGET_SPENT, budget_hook
from providers.errors import (
    Conflict,
    NotFound,
    ProviderError,
    Rejected,
    Throttled,
    Transient,
    Unknown,
)
from providers.observe import call_observed, outcome_of_status

if TYPE_CHECKING:
    from providers.config import AwsConfig
    from providers.handles import Handle

T = TypeVar("T")

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",  # Route53: too many changes still PENDING; nothing applied
    }
)
NOT_FOUND_CODES = frozenset(
    {
        "NoSuchHostedZone",
        "NoSuchChange",
        "NoSuchHealthCheck",
        "ResourceNotFoundException",
        "NoSuchEntity",
    }
)
CONFLICT_CODES = frozenset(
    {
        "PreconditionFailedException",
        "ResourceConflictException",
        "ConflictException",
        "HostedZoneAlreadyExists",
        "HostedZoneNotEmpty",
        "ResourceInUseException",
        "InvalidStateException",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServiceError",
        "ServiceUnavailable",
        "ServiceException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


GLOBAL_SERVICES = frozenset({"route53", "iam", "cloudfront"})
# What a session without explicit keys takes from the environment, once, when it is built.
_SESSION_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
_SESSIONS: dict[tuple[Any, ...], boto3.session.Session] = {}


def shared_session(
    *,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    region_name: str | None = None,
) -> boto3.session.Session:
    """This process's and thread's session for these credentials (or, with none, for the
    environment's credentials chain as it reads now)."""
    given = (aws_access_key_id, aws_secret_access_key, aws_session_token, region_name)
    environment = tuple(os.environ.get(name) for name in _SESSION_ENVIRONMENT)
    key = (os.getpid(), threading.get_ident(), given, environment)
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = boto3.session.Session(
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            region_name=region_name,
        )
    return session


@dataclass(frozen=True)
class AwsClients:
    """Builds boto3 clients. Every field may be left to boto3's environment."""

    session: boto3.session.Session | None = None
    endpoint_url: str | None = None
    region: str | None = None
    max_attempts: int = 5
    account: str = "default"  # whose rate budget (providers.budgets)
    connect_timeout: float = 5.0
    read_timeout: float = 30.0

    @classmethod
    def from_config(
        cls, config: AwsConfig, *, session: boto3.session.Session | None = None
    ) -> AwsClients:
        return cls(
            session=session,
            endpoint_url=config.endpoint_url,
            region=config.region,
            max_attempts=config.max_attempts,
            account=config.account,
        )

    def client(self, service: str, *, max_attempts: int | None = None) -> Any:
        """A client for ``service``; ``max_attempts=1`` for a mutation client.

        ``max_attempts`` counts every attempt, the first included (as ``AWS_MAX_ATTEMPTS``
        does). botocore's ``retries={"max_attempts": n}`` counts *retries* (n + 1 attempts):
        ``{"max_attempts": 1}`` would still re-send a lost change batch once, so the total is
        set with ``total_max_attempts``."""
        config = Config(
            retries={
                "mode": "standard",
                "total_max_attempts": self.max_attempts if max_attempts is None else max_attempts,
            },
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )
        session = self.session or shared_session()
        kwargs: dict[str, Any] = {"config": config}
        if self.endpoint_url:  # otherwise boto3 applies AWS_ENDPOINT_URL[_<SERVICE>] itself
            kwargs["endpoint_url"] = self.endpoint_url
        # botocore itself reads AWS_DEFAULT_REGION (and the profile) but not AWS_REGION, which
        # the other AWS SDKs and Alfred's configuration honour first.
        region = self.region or os.environ.get("AWS_REGION") or session.region_name
        if not region and service in GLOBAL_SERVICES:
            region = "us-east-1"  # where AWS signs the global services
        if region:
            kwargs["region_name"] = region
        client = session.client(service, **kwargs)
        _observe(client, f"aws.{service}", self.account)
        return client


# AWS's error codes that ask the caller to slow down (Route53's PriorRequestNotComplete too).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "PriorRequestNotComplete",
    }
)


def _observe(client: Any, provider: str, account: str) -> None:
    """Draw each attempt botocore makes from the provider's rate budget for ``account`` (a
    throttled one it retries included: ``providers.budgets``), then report it to the
    observers: ``before-send`` starts its clock once the budget let it go, ``response-received``
    ends it."""

    def sent(request: Any, **_: Any) -> None:
        request.context["alfred_sent"] = time.monotonic()

    def received(
        context: dict[str, Any],
        exception: Exception | None,
        response_dict: dict[str, Any] | None,
        parsed_response: dict[str, Any] | None,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        if getattr(exception, "code", None) == BUDGET_SPENT:
            return  # refused by the budget before it was sent: no call to AWS
        seconds = time.monotonic() - context.pop("alfred_sent", time.monotonic())
        code = str(((parsed_response or {}).get("Error") or {}).get("Code") or "")
        if exception is not None or response_dict is None:
            outcome = "transient"
        elif code in THROTTLING_CODES:
            outcome = "throttled"
        else:
            outcome = outcome_of_status(int(response_dict.get("status_code") or 0))
        call_observed(provider, context.get("alfred_operation", "?"), outcome, seconds)

    def calling(model: Any, context: dict[str, Any], **_: Any) -> None:
        context["alfred_operation"] = model.name

    client.meta.events.register("before-call", calling)
    client.meta.events.register("before-send", budget_hook(provider, account))
    client.meta.events.register("before-send", sent)
    client.meta.events.register("response-received", received)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


def error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message") or "")


def is_throttling(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) in THROTTLING_CODES


def http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def is_ambiguous(exc: BaseException) -> bool:
    """A mutation's outcome cannot be told from this failure: the request may have reached the
    provider and been applied. Only a failure that proves nothing was sent is unambiguous: the
    connection could not be opened (refused, a name that does not resolve:
    ``EndpointConnectionError``) or opening it timed out (``ConnectTimeoutError``). Every other
    connection failure may come mid-exchange — a closed connection, a read timeout, a TLS error
    (``SSLError``: a reset during the handshake of a reused connection, or after the request
    went out), a proxy's error, a response that stopped streaming — and so may a 5xx answer: a
    gateway's 502 or 504 may come after the backend applied the request, and AWS's own 500/503
    do not promise that nothing was changed. Errors raised before anything is sent
    (parameters, credentials, region) are not ambiguous."""
    if isinstance(exc, ClientError):
        return http_status(exc) >= 500 and not is_throttling(exc)
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        return False
    return isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, for the evidence in handles and errors."""
    return f"{type(exc).__name__}: {exc}"


def snake_case(operation: str) -> str:
    """boto3's method name for an AWS operation name (``GetAlias`` -> ``get_alias``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def call(client: Any, provider: str, operation: str, /, **kwargs: Any) -> Any:
    """``operation`` (AWS's name) on ``client``, its failures translated for ``provider``."""
    try:
        return getattr(client, snake_case(operation))(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, provider=provider, operation=operation) from exc


def outcome_unknown(
    *,
    provider: str,
    code: str,
    subject: str,
    cause: BaseException,
    finding: str,
    details: Mapping[str, Any],
    read_error: ProviderError | None = None,
) -> Unknown:
    """The :class:`~providers.errors.Unknown` of a mutation (``subject``) that failed
    ambiguously (``cause``) and whose outcome reading the provider back could not establish:
    the read failed (``read_error``) or found neither outcome (``finding`` says what)."""
    found = f"reading it back failed ({read_error})" if read_error is not None else finding
    evidence: dict[str, Any] = {**details, "cause": describe(cause)}
    if read_error is not None:
        evidence["read_error"] = read_error.as_dict()
    return Unknown(
        f"{subject} failed ambiguously ({describe(cause)}) and {found}; not repeated",
        provider=provider,
        code=code,
        details=evidence,
    )


def check_handle(
    previous: Any,
    *,
    provider: str,
    kinds: Mapping[str, Collection[str]],
) -> Handle:
    """``previous`` if it is a handle of ``provider`` whose kind is one of ``kinds`` and whose
    observations hold that kind's keys; :class:`~providers.errors.Rejected` otherwise (a
    malformed or foreign handle is a caller's error, never worth repeating)."""
    if not isinstance(previous, Mapping):
        raise Rejected("not a handle", provider=provider, code="MalformedHandle")
    kind = previous.get("kind")
    observations = previous.get("observations")
    if previous.get("provider") != provider or not isinstance(kind, str) or kind not in kinds:
        raise Rejected(
            f"not a {provider} handle of kind {', '.join(kinds)}: "
            f"{previous.get('provider')!r}/{kind!r}",
            provider=provider,
            code="UnknownHandle",
        )
    missing = [k for k in ("id", "status") if k not in previous]
    if not isinstance(observations, Mapping):
        missing.append("observations")
    else:
        missing += [k for k in kinds[kind] if k not in observations]
    if missing:
        raise Rejected(
            f"malformed {provider} {kind} handle: missing {', '.join(missing)}",
            provider=provider,
            code="MalformedHandle",
        )
    return previous  # type: ignore[return-value]


def translate(exc: Exception, *, provider: str, operation: str) -> ProviderError:
    """The :mod:`providers.errors` form of a boto3 failure, keeping AWS's code and message."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = error_message(exc) or str(exc)
        status = http_status(exc)
        details: dict[str, Any] = {"operation": operation, "http_status": status}
        if code in THROTTLING_CODES:
            return Throttled(message, provider=provider, code=code, details=details)
        if code in NOT_FOUND_CODES:
            return NotFound(message, provider=provider, code=code, details=details)
        if code == "ResourceConflictException" and "update is in progress" in message:
            # Lambda refuses a change while the previous update of the function runs.
            return Transient(message, provider=provider, code=code, details=details)
        if code in CONFLICT_CODES:
            return Conflict(message, provider=provider, code=code, details=details)
        if code in TRANSIENT_CODES or status >= 500:
            return Transient(message, provider=provider, code=code, details=details)
        return Rejected(message, provider=provider, code=code or str(status), details=details)
    if isinstance(exc, BotoCoreError):
        kind: type[ProviderError] = Rejected  # parameters, credentials, region: fix, not retry
        if isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError):
            # Connection failures reach here only after botocore's own retries (or from a
            # mutation client, whose callers handle the ambiguous ones before translating).
            kind = Transient
        return kind(
            str(exc), provider=provider, code=type(exc).__name__, details={"operation": operation}
        )
    raise exc


def retry_throttled(
    call: Callable[[], T],
    *,
    attempts: int,
    backoff: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``call`` until it is not throttled, at most ``attempts`` times, with capped
    exponential backoff and full jitter. For mutation clients: a throttled request was not
    applied, so repeating it is safe; anything else propagates at once."""
    for attempt in range(attempts):
        try:
            return call()
        except ClientError as exc:
            if not is_throttling(exc) or attempt == attempts - 1:
                raise
            sleep(random.uniform(0, min(backoff * 2**attempt, 20.0)))  # noqa: S311 - jitter
    raise AssertionError("unreachable")  # pragma: no cover
