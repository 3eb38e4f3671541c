"""Lambda: a fleet found by tag, and each function's environment alias moved with compare-and-swap.

A **fleet** is the set of functions whose tag ``tag_key`` (default ``alfred:fleet``) equals the
target; discovery pages through ``ListFunctions`` and reads each function's tags (``ListTags``).
The Resource Groups Tagging API (``GetResources``, which moto 5.2 also serves for Lambda) would
answer in fewer calls, but it is eventually consistent: a function tagged or deleted a moment
ago may be missing from it or still listed, and a deployment must not miss a member of the
fleet. An **environment** is an alias of that name (``staging``, ``production``) on each
function.

**Compare-and-swap.** :meth:`Lambda.update_alias` takes the :class:`AliasState` the caller
planned from (version + RevisionId) and sends ``UpdateAlias`` with that RevisionId: if anyone
moved the alias since, Lambda answers ``PreconditionFailedException`` and the adapter raises
:class:`~providers.errors.Conflict`, so a plan never overwrites a change it did not see.

**Read first, sent once.** ``update_alias`` first reads the alias: already at the target
version, nothing is sent and the handle is *recovered* (``already_applied``) — a step re-run
with its stored plan after a worker died past ``UpdateAlias`` finds its update there instead
of meeting the RevisionId it consumed. Otherwise ``UpdateAlias`` goes through a client with
``max_attempts=1`` (botocore would re-send it after a lost response, and the re-send would fail
on the RevisionId the first attempt consumed). Throttling is retried here (nothing was
applied). Any ``PreconditionFailedException`` is re-read before it is reported: at the target
version, an earlier attempt still in flight landed first and the handle is recovered; else
Conflict. After an ambiguous failure (a lost response, a read timeout, a TLS error, a 5xx) the
adapter reads the alias: at the target version, recovered; still at the planned version with
the planned RevisionId, the update is re-sent once — safe even if the first is still in flight,
because both carry the same RevisionId and only one can succeed; anything else is
:class:`~providers.errors.Unknown`. A re-send that fails is read back the same way; its
non-ambiguous errors (e.g. ``Transient`` "an update is in progress") stand, and retrying then is
safe at any time for the same reason: every attempt reads first and carries the planned
RevisionId.

**Ownership.** ``observations["ownership"]`` is ``"proven"`` when Lambda answered our
``UpdateAlias`` (``revision_id`` is then the RevisionId our update produced) and
``"unproven"`` for a recovered handle: the alias is at the target version, but another writer
may have put it there, and Lambda's RevisionIds (random) cannot say whose update made them.
Compensation must not blindly restore an unproven update; the workflow layer asks an operator.

**Done.** Moving an alias is immediate, but the version it points at may still be updating
(``LastUpdateStatus`` ``InProgress``); an ``alias_update`` handle is done when that version's
update is ``Successful`` (ok) or ``Failed`` (not ok), and ``inspect()`` re-reads the alias and
the version (an alias moved away since is ``DRIFTED``). If reading the version fails right after
the alias moved, the handle is still returned — status ``APPLIED``, not done, the alias's new
RevisionId and the read's error in ``observations`` — because the alias did move: an error
there would tell the caller nothing changed. ``inspect()`` fills the status in later.

``revision_id`` is set once, when the handle is made (the alias's RevisionId right after our
update, or as read at recovery); ``inspect()`` keeps it and reports the alias's current one as
``alias_revision_id``.

**Restore** (compensation) moves the alias back to the version the receipt says it had, only if
the alias is still exactly as the handle left it: at the version Alfred set AND with the
handle's ``revision_id`` (someone who set the same version since — A→B→A — made a new
RevisionId, and their change is not undone); checked by reading, enforced by sending that
RevisionId. Already back is a no-op; anything else is a Conflict (``AliasMoved``) for an
operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypedDict

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.clients import (
    AwsClients,
    call,
    check_handle,
    describe,
    is_ambiguous,
    outcome_unknown,
    retry_throttled,
    translate,
)
from providers.budgets import budget_patient
from providers.errors import Conflict, ProviderError, Rejected, Transient, Unknown
from providers.handles import Handle, StopUnsupported, handle

PROVIDER = "aws.lambda"
DEFAULT_TAG_KEY = "alfred:fleet"


class FunctionRef(TypedDict):
    name: str
    arn: str


class AliasState(TypedDict):
    function: str
    alias: str
    version: str
    revision_id: str
    arn: str


class VersionStatus(TypedDict):
    function: str
    version: str
    arn: str
    state: str | None  # Pending, Active, Inactive, Failed
    last_update_status: str | None  # InProgress, Successful, Failed
    last_update_status_reason: str | None
    code_sha256: str | None


class Lambda:
    def __init__(
        self,
        *,
        clients: AwsClients | None = None,
        client: Any = None,
        mutation_client: Any = None,
        tag_key: str = DEFAULT_TAG_KEY,
        throttle_attempts: int = 6,
        throttle_backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``client`` reads; ``mutation_client`` must not retry (``max_attempts=1``). Give
        ``clients`` to have both built, or both clients explicitly."""
        if client is not None and mutation_client is None and clients is None:
            raise ValueError("give mutation_client (max_attempts=1) with client, or clients")
        factory = clients or AwsClients()
        self._client = client or factory.client("lambda")
        self._mutation_client = mutation_client or factory.client("lambda", max_attempts=1)
        self.tag_key = tag_key
        self.throttle_attempts = throttle_attempts
        self.throttle_backoff = throttle_backoff
        self._sleep = sleep

    def _call(self, operation: str, **kwargs: Any) -> Any:
        return call(self._client, PROVIDER, operation, **kwargs)

    # -- reads -------------------------------------------------------------------------------

    def fleet(self, target: str) -> list[FunctionRef]:
        """The functions tagged ``tag_key=target``, by name (empty if none)."""
        members: list[FunctionRef] = []
        try:
            pages = list(self._client.get_paginator("list_functions").paginate())
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, provider=PROVIDER, operation="ListFunctions") from exc
        for page in pages:
            for function in page["Functions"]:
                tags = self._call("ListTags", Resource=function["FunctionArn"]).get("Tags") or {}
                if tags.get(self.tag_key) == target:
                    members.append(
                        FunctionRef(name=function["FunctionName"], arn=function["FunctionArn"])
                    )
        return sorted(members, key=lambda f: f["name"])

    def alias(self, function: str, alias: str) -> AliasState:
        """The version ``alias`` points at and its RevisionId. NotFound if there is no such
        function or alias."""
        raw = self._call("GetAlias", FunctionName=function, Name=alias)
        return _alias_state(function, raw)

    def version_status(self, function: str, version: str) -> VersionStatus:
        """State and LastUpdateStatus of one version (``$LATEST``, a number, or an alias)."""
        raw = self._call("GetFunctionConfiguration", FunctionName=function, Qualifier=version)
        return VersionStatus(
            function=function,
            version=str(raw.get("Version", version)),
            arn=str(raw.get("FunctionArn", "")),
            state=raw.get("State"),
            last_update_status=raw.get("LastUpdateStatus"),
            last_update_status_reason=raw.get("LastUpdateStatusReason"),
            code_sha256=raw.get("CodeSha256"),
        )

    def check_published(self, function: str, version: str) -> VersionStatus:
        """``version`` must be a published version of ``function``: NotFound if it is not,
        Rejected if it is not a version number (``$LATEST`` or an alias cannot be deployed)."""
        if not str(version).isdigit():
            raise Rejected(
                f"{version!r} is not a published version number",
                provider=PROVIDER,
                code="InvalidVersion",
            )
        return self.version_status(function, str(version))

    # -- the alias update --------------------------------------------------------------------

    def update_alias(self, current: AliasState, *, version: str) -> Handle:
        """Move the alias of ``current`` to ``version``, only if it is still as ``current``
        describes it (its RevisionId). Reads first: an alias already at ``version`` is a
        recovered handle, nothing sent. Conflict if it moved; Unknown if a lost response cannot
        be resolved (see the module docstring). Safe to call again with the same plan."""
        version = str(version)
        return self._move(current, self.alias(current["function"], current["alias"]), version)

    def _move(self, current: AliasState, observed: AliasState, version: str) -> Handle:
        """Update from ``current`` (the plan) given the alias as just ``observed``."""
        if observed["version"] == version:
            return self._alias_handle(
                current,
                version,
                observed,
                recovered="the alias already points at the version; nothing was sent",
                already_applied=True,
            )
        try:
            raw = self._send(current, version)
        except (ClientError, BotoCoreError) as exc:
            if is_ambiguous(exc):
                return self._recover(current, version, exc)
            return self._refused(current, version, exc)
        return self._alias_handle(current, version, _alias_state(current["function"], raw))

    def _send(self, current: AliasState, version: str) -> Any:
        return retry_throttled(
            lambda: self._mutation_client.update_alias(
                FunctionName=current["function"],
                Name=current["alias"],
                FunctionVersion=version,
                RevisionId=current["revision_id"],
            ),
            attempts=self.throttle_attempts,
            backoff=self.throttle_backoff,
            sleep=self._sleep,
        )

    def _refused(
        self, current: AliasState, version: str, exc: ClientError | BotoCoreError
    ) -> Handle:
        """A non-ambiguous failure of UpdateAlias, read back before it is reported: a
        PreconditionFailed (or a refusal such as "an update is in progress") may follow an
        earlier attempt of this update, still in flight when the alias was read, that landed
        since: at the target version, the handle is recovered."""
        error = translate(exc, provider=PROVIDER, operation="UpdateAlias")
        if not isinstance(error, Conflict | Transient):
            raise error from exc
        try:
            observed = self.alias(current["function"], current["alias"])
        except ProviderError:
            raise error from exc
        if observed["version"] == version:
            return self._alias_handle(current, version, observed, recovered=exc)
        error.details["observed"] = observed
        raise error from exc

    def _recover(self, current: AliasState, version: str, cause: BaseException) -> Handle:
        observed = self._read_or_unknown(current, version, cause)
        if observed["version"] == version:
            return self._alias_handle(current, version, observed, recovered=cause)
        if (observed["version"], observed["revision_id"]) != (
            current["version"],
            current["revision_id"],
        ):
            raise _unknown(current, version, cause, observed=observed)
        # Untouched so far. Send it again, once, with the same RevisionId: if the first attempt
        # is still in flight, only one of the two can succeed.
        try:
            raw = self._send(current, version)
        except (ClientError, BotoCoreError) as exc:
            if not is_ambiguous(exc):
                # Read back; a refusal that stands ("an update is in progress") is safe to
                # retry later: the retry reads first and carries the same RevisionId.
                return self._refused(current, version, exc)
            observed = self._read_or_unknown(current, version, exc)
            if observed["version"] == version:
                return self._alias_handle(current, version, observed, recovered=exc)
            raise _unknown(current, version, exc, observed=observed) from exc
        result = self._alias_handle(current, version, _alias_state(current["function"], raw))
        result["observations"]["resent_after"] = describe(cause)
        return result

    def _read_or_unknown(
        self, current: AliasState, version: str, cause: BaseException
    ) -> AliasState:
        try:
            with budget_patient():  # a refused read would make it "unknown" for nothing
                return self.alias(current["function"], current["alias"])
        except ProviderError as exc:
            raise _unknown(current, version, cause, read_error=exc) from exc

    def _alias_handle(
        self,
        current: AliasState,
        version: str,
        observed: AliasState,
        *,
        recovered: BaseException | str | None = None,
        already_applied: bool = False,
        kind: str = "alias_update",
    ) -> Handle:
        """``observed`` is the alias as our UpdateAlias answered it (ownership proven) or, for
        a ``recovered`` handle, as read back (unproven)."""
        observations: dict[str, Any] = {
            "function": current["function"],
            "alias": current["alias"],
            "from_version": current["version"],
            "from_revision_id": current["revision_id"],
            "to_version": version,
            "recovered": recovered is not None,
            "already_applied": already_applied,
            "ownership": "proven" if recovered is None else "unproven",
            "revision_id": observed["revision_id"],
        }
        if recovered is not None:
            observations["cause"] = recovered if isinstance(recovered, str) else describe(recovered)
        try:
            return self._observed_handle(kind, observed["arn"], observations, observed)
        except ProviderError as exc:
            # The alias moved; only reading its version failed. An error here would say
            # nothing changed.
            return handle(
                provider=PROVIDER,
                kind=kind,
                id=observed["arn"],
                status="APPLIED",
                done=False,
                ok=False,
                observations={
                    **observations,
                    "alias_version": observed["version"],
                    "alias_revision_id": observed["revision_id"],
                    "state": None,
                    "last_update_status": None,
                    "last_update_status_reason": None,
                    "status_error": exc.as_dict(),
                },
            )

    def _observed_handle(
        self, kind: str, arn: str, observations: dict[str, Any], observed: AliasState
    ) -> Handle:
        status = self.version_status(observed["function"], observations["to_version"])
        observations = {
            "revision_id": observed["revision_id"],  # unless the handle already has one
            **observations,
            "alias_version": observed["version"],
            "alias_revision_id": observed["revision_id"],
            "state": status["state"],
            "last_update_status": status["last_update_status"],
            "last_update_status_reason": status["last_update_status_reason"],
        }
        observations.pop("status_error", None)
        if observed["version"] != observations["to_version"]:
            word, done, ok = "DRIFTED", True, False
        else:
            # A version whose last update predates LastUpdateStatus reporting has none.
            word = status["last_update_status"] or "Successful"
            done = word in ("Successful", "Failed")
            ok = word == "Successful" and status["state"] in (None, "Active")
        return handle(
            provider=PROVIDER,
            kind=kind,
            id=arn,
            status=word,
            done=done,
            ok=ok,
            observations=observations,
        )

    # -- compensation and handles ------------------------------------------------------------

    def restore(self, previous: Handle) -> Handle:
        """Move the alias of an ``alias_update`` back to its ``from_version``, only if it is
        still at the ``to_version`` with the handle's ``revision_id`` (see the module
        docstring). The caller decides first whether an unproven update may be restored."""
        previous = check_handle(previous, provider=PROVIDER, kinds={"alias_update": _RESTORE_KEYS})
        observations = previous["observations"]
        function, alias = observations["function"], observations["alias"]
        ours, back_to = str(observations["to_version"]), str(observations["from_version"])
        current = self.alias(function, alias)
        if current["version"] == back_to:
            already = {
                "function": function,
                "alias": alias,
                "from_version": ours,
                "from_revision_id": None,
                "to_version": back_to,
                "recovered": False,
                "already_restored": True,
                "ownership": "unproven",
            }
            return self._observed_handle("alias_restore", current["arn"], already, current)
        left = observations["revision_id"]
        if (current["version"], current["revision_id"]) != (ours, left):
            moved = "another version" if current["version"] != ours else "the same version again"
            raise Conflict(
                f"{function}:{alias} is at version {current['version']} (RevisionId "
                f"{current['revision_id']}), not as Alfred left it (version {ours}, RevisionId "
                f"{left}): someone set {moved} since; not moving it back to {back_to}",
                provider=PROVIDER,
                code="AliasMoved",
                details={
                    "alias": current,
                    "expected_version": ours,
                    "expected_revision_id": left,
                    "restore_to": back_to,
                },
            )
        result = self._move(current, current, back_to)  # just read: no second GetAlias
        result["kind"] = "alias_restore"
        result["observations"]["already_restored"] = False
        return result

    def inspect(self, previous: Handle) -> Handle:
        previous = check_handle(previous, provider=PROVIDER, kinds=_HANDLE_KINDS)
        observations = dict(previous["observations"])
        observed = self.alias(observations["function"], observations["alias"])
        return self._observed_handle(
            previous["kind"], str(previous["id"] or observed["arn"]), observations, observed
        )

    def stop(self, previous: Handle) -> NoReturn:
        check_handle(previous, provider=PROVIDER, kinds=_HANDLE_KINDS)
        raise StopUnsupported("an alias update is immediate; restore() moves the alias back")


def _alias_state(function: str, raw: Mapping[str, Any]) -> AliasState:
    return AliasState(
        function=function,
        alias=str(raw["Name"]),
        version=str(raw["FunctionVersion"]),
        revision_id=str(raw["RevisionId"]),
        arn=str(raw["AliasArn"]),
    )


_HANDLE_KINDS: dict[str, tuple[str, ...]] = {
    kind: ("function", "alias", "from_version", "to_version")
    for kind in ("alias_update", "alias_restore")
}
_RESTORE_KEYS = (*_HANDLE_KINDS["alias_update"], "revision_id")


def _unknown(
    current: AliasState,
    version: str,
    cause: BaseException,
    *,
    observed: AliasState | None = None,
    read_error: ProviderError | None = None,
) -> Unknown:
    details: dict[str, Any] = {"planned": current, "to_version": version}
    if observed is not None:
        details["observed"] = observed
    return outcome_unknown(
        provider=PROVIDER,
        code="AliasUpdateOutcomeUnknown",
        subject=f"moving {current['function']}:{current['alias']} to {version}",
        cause=cause,
        finding="the alias is neither where it was planned from nor at the target",
        details=details,
        read_error=read_error,
    )
