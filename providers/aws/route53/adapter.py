"""The Route53 adapter (boto3): hosted zones, the records at a name, and ONE atomic change
batch per request, its failures mapped onto :mod:`providers.errors`.

The values it reads and writes are :mod:`.model`'s; the batch it sends is
:func:`.batch.compare_and_swap` of the caller's against the records it read first.

Every batch sent is a compare-and-swap against the records read first; an ambiguous failure is
resolved by reading again, never by sending again; a recovered handle's ownership is
"unproven". The whole protocol, step by step, is in docs/providers.md ("Route53: every batch
a compare-and-swap"), which this module implements.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.clients import (
    AwsClients,
    call,
    check_handle,
    describe,
    error_code,
    error_message,
    is_ambiguous,
    outcome_unknown,
    retry_throttled,
    translate,
)
from providers.aws.route53.batch import (
    BatchState,
    compare_and_swap,
    expected_states,
    holds,
    normalize_changes,
    refuse_traffic_policy_sets,
    touched,
)
from providers.aws.route53.model import (
    PROVIDER,
    Change,
    Key,
    Record,
    Zone,
    key_of,
    normalize,
    normalize_name,
    to_wire,
    wire_name,
)
from providers.budgets import budget_patient
from providers.errors import Conflict, NotFound, ProviderError, Rejected, Transient, Unknown
from providers.handles import Handle, StopUnsupported, handle

# botocore's own default for either timeout, when a change client does not say its own.
DEFAULT_TIMEOUT = 60.0
IN_FLIGHT_MARGIN = 5.0
COMMENT_LIMIT = 256


# -- the adapter -------------------------------------------------------------------------------


class Route53:
    def __init__(
        self,
        *,
        clients: AwsClients | None = None,
        client: Any = None,
        change_client: Any = None,
        throttle_attempts: int = 6,
        throttle_backoff: float = 0.5,
        settle_seconds: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``client`` reads (and creates zones: CallerReference makes that safe to retry);
        ``change_client`` must not retry (``max_attempts=1``). Give ``clients`` to have both
        built, or both clients explicitly."""
        if client is not None and change_client is None and clients is None:
            raise ValueError("give change_client (max_attempts=1) along with client, or clients")
        factory = clients or AwsClients()
        self._client = client or factory.client("route53")
        self._change_client = change_client or factory.client("route53", max_attempts=1)
        self.throttle_attempts = throttle_attempts
        self.throttle_backoff = throttle_backoff
        self.settle_seconds = settle_seconds
        self._sleep = sleep

    @property
    def in_flight_window(self) -> float:
        """How long a change batch whose request failed ambiguously may still land, in seconds:
        the change client's connect timeout + read timeout (``meta.config``; botocore's 60 s
        each where it says none) + :data:`IN_FLIGHT_MARGIN`. By then a request still in
        flight has landed or died. ``NotApplied`` carries it as ``retry_after_seconds``."""
        config = getattr(getattr(self._change_client, "meta", None), "config", None)
        return (
            _timeout(getattr(config, "connect_timeout", None))
            + _timeout(getattr(config, "read_timeout", None))
            + IN_FLIGHT_MARGIN
        )

    # -- reads -------------------------------------------------------------------------------

    def _call(self, operation: str, **kwargs: Any) -> Any:
        return call(self._client, PROVIDER, operation, **kwargs)

    def zone(self, name: str) -> Zone:
        """The public hosted zone named exactly ``name``: NotFound if there is none, Conflict if
        there are several (Route53 allows duplicates; Alfred will not guess)."""
        name = normalize_name(name)
        found = [z for z in self._zones_named(name) if not z["Config"].get("PrivateZone")]
        if not found:
            raise NotFound(
                f"no public hosted zone named {name}", provider=PROVIDER, code="NoSuchHostedZone"
            )
        if len(found) > 1:
            raise Conflict(
                f"{len(found)} public hosted zones are named {name}",
                provider=PROVIDER,
                code="AmbiguousHostedZone",
                details={"zone_ids": [_zone_id(z["Id"]) for z in found]},
            )
        return self.zone_by_id(_zone_id(found[0]["Id"]))

    def zone_by_id(self, zone_id: str) -> Zone:
        response = self._call("GetHostedZone", Id=zone_id)
        return _zone(response["HostedZone"], response.get("DelegationSet") or {})

    def _zones_named(self, name: str) -> list[dict[str, Any]]:
        """Every hosted zone (public or private) named exactly ``name``."""
        kwargs: dict[str, Any] = {"DNSName": wire_name(name), "MaxItems": "100"}
        zones: list[dict[str, Any]] = []
        while True:
            response = self._call("ListHostedZonesByName", **kwargs)
            for zone in response["HostedZones"]:
                if normalize_name(zone["Name"]) != name:
                    return zones
                zones.append(zone)
            if not response.get("IsTruncated"):
                return zones
            kwargs = {
                "DNSName": response["NextDNSName"],
                "HostedZoneId": response["NextHostedZoneId"],
                "MaxItems": "100",
            }

    def records(self, zone_id: str, name: str) -> list[Record]:
        """Every record set at exactly ``name`` (all types), in Route53's order."""
        name = normalize_name(name)
        kwargs: dict[str, Any] = {
            "HostedZoneId": zone_id,
            "StartRecordName": wire_name(name),
            "MaxItems": "300",
        }
        found: list[Record] = []
        while True:
            response = self._call("ListResourceRecordSets", **kwargs)
            for raw in response["ResourceRecordSets"]:
                if normalize_name(raw["Name"]) != name:
                    return found
                found.append(normalize(raw))
            if not response.get("IsTruncated"):
                return found
            kwargs = {
                "HostedZoneId": zone_id,
                "StartRecordName": response["NextRecordName"],
                "StartRecordType": response["NextRecordType"],
                "MaxItems": "300",
            }
            if response.get("NextRecordIdentifier"):
                kwargs["StartRecordIdentifier"] = response["NextRecordIdentifier"]

    def apex_alias(self, zone: Zone) -> list[Record]:
        """The A/AAAA alias records at the zone apex (empty if the apex has none)."""
        return [
            r
            for r in self.records(zone["id"], zone["name"])
            if r["alias"] is not None and r["type"] in ("A", "AAAA") and not r["set_identifier"]
        ]

    def batch_state(self, zone_id: str, changes: Sequence[Change]) -> BatchState:
        """Evidence for an operator: whether the records at the batch's names hold its
        post-state, a pre-state as far as the batch says one (every DELETEd set present
        exactly, every CREATEd set absent; an UPSERT's prior value is not known), or neither.
        :meth:`change` never decides to send on this "pre"."""
        changes = normalize_changes(changes)
        observed = self._observe(zone_id, changes)
        pre, post = expected_states(changes)
        if holds(observed, post):
            return "post"
        return "pre" if holds(observed, pre) else "neither"

    def _observe(self, zone_id: str, changes: Sequence[Change]) -> dict[Key, Record]:
        """Every record set at the batch's names (all types), by key."""
        observed: dict[Key, Record] = {}
        for name in dict.fromkeys(c["record"]["name"] for c in changes):
            for rec in self.records(zone_id, name):
                observed[key_of(rec)] = rec
        return observed

    # -- the change batch --------------------------------------------------------------------

    def change(self, zone_id: str, changes: Sequence[Change], *, operation: str) -> Handle:
        """Apply ``changes`` as ONE atomic batch whose Comment names ``operation`` (the
        caller's operation identity), unless the records already hold its post-state. The
        batch is sent as a compare-and-swap against the records read first (each UPSERT as
        DELETE of the set read + CREATE). Returns a ``change`` handle (PENDING, later INSYNC;
        ownership proven), or a recovered one (ownership unproven; see the module docstring).
        Safe to call again with the same batch after any failure, at any time.

        Raises Conflict (InvalidChangeBatch against the current records: a stale DELETE, a
        CNAME conflict, a CREATE of an existing set, a set changed by another writer between
        the read and the write), Rejected (a batch Route53 can never accept, a malformed
        change, a set a traffic policy made: ``TrafficPolicyRecord``), Throttled, NotFound (no
        such zone), Transient (``NotApplied``: an ambiguous failure after which the records
        still hold the pre-state; the caller MUST NOT retry before
        ``details["retry_after_seconds"]`` have passed — see the module docstring) or
        Unknown."""
        changes = normalize_changes(changes)
        comment = f"alfred {operation}"[:COMMENT_LIMIT]
        before = self._observe(zone_id, changes)
        refuse_traffic_policy_sets(touched(before, changes).values())
        _, post = expected_states(changes)
        if holds(before, post):
            return self._recovered_handle(
                zone_id,
                changes,
                None,
                comment,
                before,
                cause="the records at the batch's names already hold its post-state; "
                "nothing was sent",
                already_applied=True,
            )
        sent = compare_and_swap(changes, before)
        batch = {
            "Comment": comment,
            "Changes": [
                {"Action": c["action"], "ResourceRecordSet": to_wire(c["record"])} for c in sent
            ],
        }
        try:
            info = self._send(zone_id, batch)
        except (ClientError, BotoCoreError) as exc:
            if is_ambiguous(exc):
                return self._resolve(zone_id, changes, sent, comment, before, exc)
            error = _change_error(exc)
            if isinstance(error, Conflict) and error.code == "InvalidChangeBatch":
                return self._recheck(zone_id, changes, sent, comment, error, exc)
            raise error from exc
        return self._change_handle(zone_id, changes, sent, comment, info)

    def _send(self, zone_id: str, batch: dict[str, Any]) -> dict[str, Any]:
        response = retry_throttled(
            lambda: self._change_client.change_resource_record_sets(
                HostedZoneId=zone_id, ChangeBatch=batch
            ),
            attempts=self.throttle_attempts,
            backoff=self.throttle_backoff,
            sleep=self._sleep,
        )
        return dict(response["ChangeInfo"])

    def _resolve(
        self,
        zone_id: str,
        changes: list[Change],
        sent: list[Change],
        comment: str,
        before: dict[Key, Record],
        cause: BaseException,
    ) -> Handle:
        """Step 3 of the module docstring: never sends anything."""
        try:
            with budget_patient():  # a refused read would make it "unknown" for nothing
                observed = self._observe(zone_id, changes)
        except ProviderError as exc:
            raise _unknown(zone_id, changes, sent, cause, before=before, read_error=exc) from cause
        _, post = expected_states(changes)
        if holds(observed, post):
            return self._recovered_handle(zone_id, changes, sent, comment, observed, cause=cause)
        # Records at the names that the batch does not change (another type beside ours) do
        # not tell whether it applied.
        if touched(observed, changes) == touched(before, changes):
            wait = self.in_flight_window
            raise Transient(
                f"the change batch failed ambiguously ({describe(cause)}) and the record sets "
                "it changes still hold the state read before sending: not applied so far. It "
                f"may still be in flight: do not retry before {wait:g} s have passed (a copy "
                "landing after a retry and that retry's compensation would apply again)",
                provider=PROVIDER,
                code="NotApplied",
                details={
                    "zone_id": zone_id,
                    "changes": changes,
                    "sent": sent,
                    "cause": describe(cause),
                    "observed": list(observed.values()),
                    "retry_after_seconds": wait,
                },
            ) from cause
        raise _unknown(zone_id, changes, sent, cause, before=before, observed=observed) from cause

    def _recheck(
        self,
        zone_id: str,
        changes: list[Change],
        sent: list[Change],
        comment: str,
        error: Conflict,
        cause: BaseException,
    ) -> Handle:
        """A Conflict may be an earlier copy of this very batch that landed after the records
        were read (it was still in flight): the post-state says so — or another writer made
        the same result; the recovered handle's ownership is unproven either way."""
        error.details.setdefault("sent", sent)
        try:
            observed = self._observe(zone_id, changes)
        except ProviderError:
            raise error from cause
        _, post = expected_states(changes)
        if not holds(observed, post):
            raise error from cause
        return self._recovered_handle(zone_id, changes, sent, comment, observed, cause=cause)

    def _change_handle(
        self,
        zone_id: str,
        changes: list[Change],
        sent: list[Change],
        comment: str,
        info: Mapping[str, Any],
    ) -> Handle:
        status = str(info["Status"])
        submitted = info.get("SubmittedAt")
        return handle(
            provider=PROVIDER,
            kind="change",
            id=_change_id(str(info["Id"])),
            status=status,
            done=status == "INSYNC",
            ok=status == "INSYNC",
            observations={
                "zone_id": zone_id,
                "comment": comment,
                "changes": list(changes),
                "sent": list(sent),
                "submitted_at": submitted.isoformat()
                if isinstance(submitted, dt.datetime)
                else submitted,
                "recovered": False,
                # Route53 answered this batch: it, as sent, is what changed the names.
                "ownership": "proven",
            },
        )

    def _recovered_handle(
        self,
        zone_id: str,
        changes: list[Change],
        sent: list[Change] | None,
        comment: str,
        observed: Mapping[Key, Record],
        *,
        cause: BaseException | str,
        already_applied: bool = False,
    ) -> Handle:
        """The names hold the batch's result; whose batch made it cannot be read back."""
        return handle(
            provider=PROVIDER,
            kind="change",
            id=None,
            status="APPLIED",
            done=False,
            ok=False,
            observations={
                "zone_id": zone_id,
                "comment": comment,
                "changes": list(changes),
                "sent": None if sent is None else list(sent),
                "recovered": True,
                "already_applied": already_applied,
                "ownership": "unproven",
                "recovered_at": _now(),
                "settle_seconds": self.settle_seconds,
                "cause": cause if isinstance(cause, str) else describe(cause),
                "records": list(observed.values()),
            },
        )

    # -- hosted zones ------------------------------------------------------------------------

    def create_zone(
        self, name: str, *, caller_reference: str, comment: str | None = None
    ) -> Handle:
        """Create a public hosted zone, idempotently: the same ``caller_reference`` finds the
        zone an earlier (possibly lost) request created. The handle's observations carry the
        NS delegation (``name_servers``) to hand to the domain's registrar."""
        name = normalize_name(name)
        kwargs: dict[str, Any] = {"Name": name, "CallerReference": caller_reference}
        if comment:
            kwargs["HostedZoneConfig"] = {"Comment": comment[:256], "PrivateZone": False}
        try:
            response = self._client.create_hosted_zone(**kwargs)
        except ClientError as exc:
            if error_code(exc) != "HostedZoneAlreadyExists":
                raise translate(exc, provider=PROVIDER, operation="CreateHostedZone") from exc
            existing = self._zone_by_reference(name, caller_reference)
            if existing is None:
                raise Conflict(
                    f"the caller reference {caller_reference!r} was used for another zone "
                    f"than {name} (or for a zone since deleted)",
                    provider=PROVIDER,
                    code="HostedZoneAlreadyExists",
                    details={"message": error_message(exc)},
                ) from exc
            return self._zone_handle(existing, None, recovered=f"HostedZoneAlreadyExists: {exc}")
        except BotoCoreError as exc:
            existing = self._zone_by_reference(name, caller_reference)
            if existing is None:
                raise Transient(
                    f"CreateHostedZone failed ({exc}) and no zone carries the caller reference; "
                    "repeating with the same reference is safe",
                    provider=PROVIDER,
                    code=type(exc).__name__,
                ) from exc
            return self._zone_handle(existing, None, recovered=f"{type(exc).__name__}: {exc}")
        zone = _zone(response["HostedZone"], response.get("DelegationSet") or {})
        return self._zone_handle(zone, response["ChangeInfo"], recovered=None)

    def _zone_by_reference(self, name: str, caller_reference: str) -> Zone | None:
        for zone in self._zones_named(name):
            if zone.get("CallerReference") == caller_reference:
                return self.zone_by_id(_zone_id(zone["Id"]))
        return None

    def _zone_handle(
        self, zone: Zone, info: Mapping[str, Any] | None, *, recovered: str | None
    ) -> Handle:
        """``info`` is CreateHostedZone's ChangeInfo; None when the zone was found by its
        caller reference (``recovered`` says why), whose creation change is unknowable."""
        observations: dict[str, Any] = {
            "zone": zone,
            "name_servers": zone["name_servers"],
            "caller_reference": zone["caller_reference"],
            "change_id": None if info is None else _change_id(str(info["Id"])),
            "recovered": info is None,
        }
        if info is None:
            observations.update(
                recovered_at=_now(), settle_seconds=self.settle_seconds, cause=recovered
            )
            status, done = "APPLIED", False
        else:
            status = str(info["Status"])
            done = status == "INSYNC"
        return handle(
            provider=PROVIDER,
            kind="hosted_zone",
            id=zone["id"],
            status=status,
            done=done,
            ok=done,
            observations=observations,
        )

    def delete_zone(self, zone_id: str) -> Handle:
        """Delete an empty hosted zone (compensation of :meth:`create_zone`). A zone already gone
        counts as deleted; one that still holds records is a Conflict (HostedZoneNotEmpty)."""
        change_id: str | None = None
        try:
            change_id = _change_id(
                str(self._client.delete_hosted_zone(Id=zone_id)["ChangeInfo"]["Id"])
            )
        except ClientError as exc:
            if error_code(exc) != "NoSuchHostedZone":
                raise translate(exc, provider=PROVIDER, operation="DeleteHostedZone") from exc
        except BotoCoreError as exc:
            raise translate(exc, provider=PROVIDER, operation="DeleteHostedZone") from exc
        return handle(
            provider=PROVIDER,
            kind="hosted_zone_deletion",
            id=zone_id,
            status="DELETED",
            done=True,
            ok=True,
            observations={"already_absent": change_id is None, "change_id": change_id},
        )

    # -- handles -----------------------------------------------------------------------------

    def inspect(self, previous: Handle) -> Handle:
        """The current view of the work ``previous`` names (a new handle). Rejected for a
        handle this adapter did not make (or a malformed one)."""
        previous = check_handle(previous, provider=PROVIDER, kinds=_HANDLE_KINDS)
        kind = previous["kind"]
        observations = dict(previous["observations"])
        if kind == "change":
            if previous["id"] is None:
                check_handle(previous, provider=PROVIDER, kinds={"change": _RECOVERED_KEYS})
                return self._inspect_recovered(previous)
            info = self._call("GetChange", Id=previous["id"])["ChangeInfo"]
            status = str(info["Status"])
            return handle(
                provider=PROVIDER,
                kind=kind,
                id=previous["id"],
                status=status,
                done=status == "INSYNC",
                ok=status == "INSYNC",
                observations=observations,
            )
        if kind == "hosted_zone":
            zone = self.zone_by_id(str(previous["id"]))
            observations.update(zone=zone, name_servers=zone["name_servers"])
            change_id = observations.get("change_id")
            if change_id:
                status = str(self._call("GetChange", Id=change_id)["ChangeInfo"]["Status"])
                done = status == "INSYNC"
            else:
                status, done = "APPLIED", _settled(observations)
            return handle(
                provider=PROVIDER,
                kind=kind,
                id=previous["id"],
                status=status,
                done=done,
                ok=done,
                observations=observations,
            )
        if kind == "hosted_zone_deletion":
            try:
                self.zone_by_id(str(previous["id"]))
            except NotFound:
                status = "DELETED"
            else:
                status = "PRESENT"
            return handle(
                provider=PROVIDER,
                kind=kind,
                id=previous["id"],
                status=status,
                done=True,
                ok=status == "DELETED",
                observations=observations,
            )
        raise AssertionError(f"unhandled handle kind {kind}")  # pragma: no cover

    def _inspect_recovered(self, previous: Handle) -> Handle:
        observations = dict(previous["observations"])
        changes = normalize_changes(observations["changes"])
        observed = self._observe(str(observations["zone_id"]), changes)
        observations["records"] = list(observed.values())
        if not holds(observed, expected_states(changes)[1]):
            status, done, ok = "DRIFTED", True, False
        else:
            status, done = "APPLIED", _settled(observations)
            ok = done
        return handle(
            provider=PROVIDER,
            kind="change",
            id=None,
            status=status,
            done=done,
            ok=ok,
            observations=observations,
        )

    def stop(self, previous: Handle) -> NoReturn:
        check_handle(previous, provider=PROVIDER, kinds=_HANDLE_KINDS)
        raise StopUnsupported(
            "Route53 cannot stop a submitted change batch; compensate with another batch"
        )


# -- helpers -----------------------------------------------------------------------------------


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _settled(observations: Mapping[str, Any]) -> bool:
    """Whether ``settle_seconds`` have passed since a recovered handle's ``recovered_at``."""
    try:
        since = dt.datetime.fromisoformat(str(observations["recovered_at"]))
    except (KeyError, ValueError) as exc:
        raise Rejected(
            f"malformed recovered handle: {describe(exc)}",
            provider=PROVIDER,
            code="MalformedHandle",
        ) from exc
    elapsed = (dt.datetime.now(dt.UTC) - since).total_seconds()
    return elapsed >= float(observations.get("settle_seconds", 60.0))


def _zone_id(raw: str) -> str:
    return raw.removeprefix("/hostedzone/")


def _change_id(raw: str) -> str:
    return raw.removeprefix("/change/")


def _zone(raw: Mapping[str, Any], delegation: Mapping[str, Any]) -> Zone:
    return Zone(
        id=_zone_id(str(raw["Id"])),
        name=normalize_name(str(raw["Name"])),
        caller_reference=str(raw.get("CallerReference", "")),
        private=bool((raw.get("Config") or {}).get("PrivateZone", False)),
        record_set_count=int(raw.get("ResourceRecordSetCount") or 0),
        name_servers=list(delegation.get("NameServers") or []),
    )


def _unknown(
    zone_id: str,
    changes: list[Change],
    sent: list[Change],
    cause: BaseException,
    *,
    before: Mapping[Key, Record],
    observed: Mapping[Key, Record] | None = None,
    read_error: ProviderError | None = None,
) -> Unknown:
    details: dict[str, Any] = {
        "zone_id": zone_id,
        "changes": changes,
        "sent": sent,
        "before": list(before.values()),
    }
    if observed is not None:
        details["observed"] = list(observed.values())
    return outcome_unknown(
        provider=PROVIDER,
        code="ChangeOutcomeUnknown",
        subject="the change batch",
        cause=cause,
        finding="the records at its names hold neither the state read before sending nor "
        "the batch's post-state (another writer changed them)",
        details=details,
        read_error=read_error,
    )


def _timeout(value: object) -> float:
    """A client timeout in seconds; botocore's default where there is none to read."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return DEFAULT_TIMEOUT


# Kinds of handle and the observations each needs.
_HANDLE_KINDS: dict[str, tuple[str, ...]] = {
    "change": (),  # a recovered one (id None) needs zone_id and changes: _RECOVERED_KEYS
    "hosted_zone": (),
    "hosted_zone_deletion": (),
}

_RECOVERED_KEYS = ("zone_id", "changes", "recovered_at")

# InvalidChangeBatch messages no state of the zone could accept.
_PERMANENT = (
    "is not permitted in zone",
    "is not permitted at apex",
    "Invalid Resource Record",
    "Duplicate Resource Record",
    "The request contains an invalid set of changes",
    "A HostedZone must contain",
)


def _change_error(exc: ClientError | BotoCoreError) -> ProviderError:
    """InvalidChangeBatch is a Conflict when the zone's current records refuse the batch (a
    stale DELETE, a CNAME conflict, a CREATE of an existing set), Rejected when no state of
    the zone could accept it; its messages are kept one by one in ``details``."""
    error = translate(exc, provider=PROVIDER, operation="ChangeResourceRecordSets")
    if isinstance(exc, ClientError) and error_code(exc) == "InvalidChangeBatch":
        messages = _messages(error_message(exc))
        details = {**error.details, "messages": messages}
        kind = Rejected if all(any(p in m for p in _PERMANENT) for m in messages) else Conflict
        return kind(error.message, provider=PROVIDER, code="InvalidChangeBatch", details=details)
    return error


def _messages(message: str) -> list[str]:
    """Route53 joins a batch's errors as ``[first, second]``."""
    inner = message.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    parts = re.split(
        r", (?=Tried to |RRSet |Invalid Resource Record|Duplicate Resource Record|"
        r"The request contains |A HostedZone must )",
        inner,
    )
    return [p.strip() for p in parts if p.strip()]
