"""Lambda moves for the workflows: read a fleet's aliases for an environment, move one alias
to a version (a RevisionId compare-and-swap) with its receipt, wait for the version's update
to be Successful, read the aliases back, and move an alias back exactly.

Each function here is a step function (``ctx.step(key, fn, ...)``) or, for the undo, stage
code given ``ctx``. A dry run gets :class:`ReadOnlyLambda` (no mutating call is reachable)
and :func:`simulate_update` instead of the update.

An update's receipt: ``resource = aws.lambda.alias``, ``action = update``, ``before`` the
alias as planned (version, RevisionId), ``after`` the alias as Alfred's update left it (the
version, the RevisionId the update produced), ``undo`` the function, the alias and the
version to restore, and the provider's ``handle``. Its compensation reads the alias again:
still at ``after`` (version AND RevisionId), it moves the alias back to ``before``'s version,
sending ``after``'s RevisionId; otherwise it fails with ``drifted``, naming what differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings

from executions.runtime.errors import FatalError
from executions.runtime.stage import StageContext
from providers.aws.lambda_ import AliasState, Lambda
from providers.errors import Conflict, NotFound, ProviderError
from providers.factory import Providers
from workflows.steps.compensations import Drifted, mutation
from workflows.steps.errors import engine_error, provider_errors
from workflows.steps.planning import operator_consent, plan_hash

RESOURCE = "aws.lambda.alias"
UPDATE = mutation(RESOURCE, "update")
_READS = frozenset({"fleet", "alias", "version_status", "check_published", "inspect", "tag_key"})
SETTLE_POLL_SECONDS = 1.0
SETTLE_TIMEOUT_SECONDS = 900.0


class ReadOnlyLambda:
    """The Lambda adapter with its reads only: what a dry run's steps are given."""

    def __init__(self, adapter: Lambda) -> None:
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise AttributeError(f"a dry run reaches no mutating Lambda call ({name})")
        return getattr(self._adapter, name)


def lambda_(*, dry_run: bool) -> Any:
    adapter = Providers(settings.ALFRED_PROVIDERS).lambda_()
    return ReadOnlyLambda(adapter) if dry_run else adapter


def read_fleet(target: str, environment: str, version: str, *, dry_run: bool) -> dict[str, Any]:
    """The functions tagged with ``target`` (by name), each with its ``environment`` alias as
    it is now (version, RevisionId) and whether ``version`` is published for it (plan's read).
    A function without that alias is a readiness failure (``alias_not_found``)."""
    adapter = lambda_(dry_run=dry_run)
    with provider_errors():
        members = adapter.fleet(target)
    functions = []
    for member in members:
        name = member["name"]
        with provider_errors(readiness="alias_not_found", check=f"alias {environment} of {name}"):
            alias = adapter.alias(name, environment)
        with provider_errors():
            try:
                status = adapter.check_published(name, version)
            except NotFound:
                status = None
        functions.append(
            {
                "function": name,
                "arn": member["arn"],
                "alias": dict(alias),
                "published": status is not None,
                "version_state": status["state"] if status else None,
            }
        )
    return {"tag_key": adapter.tag_key, "functions": functions}


def read_aliases(functions: Sequence[str], alias: str, *, dry_run: bool) -> list[dict[str, Any]]:
    adapter = lambda_(dry_run=dry_run)
    with provider_errors():
        return [dict(adapter.alias(function, alias)) for function in sorted(functions)]


@UPDATE
def update_alias(*, current: Mapping[str, Any], version: str) -> dict[str, Any]:
    """Move the alias ``current`` describes (as planned) to ``version``, sending the planned
    RevisionId. Safe to run again after any failure: the adapter reads first and finds an
    update of an earlier attempt that landed. A foreign change since the plan is refused by
    Lambda and reported as ``alias_changed``, never overwritten."""
    planned = AliasState(**current)  # type: ignore[typeddict-item]
    adapter = Providers(settings.ALFRED_PROVIDERS).lambda_()
    try:
        handle = adapter.update_alias(planned, version=version)
    except Conflict as exc:
        raise FatalError(
            f"{planned['function']}:{planned['alias']} changed since the plan (it was at "
            f"version {planned['version']}, RevisionId {planned['revision_id']}); not "
            "overwritten",
            code="alias_changed",
            function=planned["function"],
            alias=planned["alias"],
            planned=dict(planned),
            observed=exc.details.get("observed"),
            provider=exc.as_dict(),
        ) from exc
    except ProviderError as exc:
        raise engine_error(exc) from exc
    return _receipt(planned, version, dict(handle))


def simulate_update(*, current: Mapping[str, Any], version: str) -> dict[str, Any]:
    """What :func:`update_alias` would record, without a call: the dry run's update."""
    handle = {
        "provider": "aws.lambda",
        "kind": "alias_update",
        "id": current["arn"],
        "status": "Successful",
        "done": True,
        "ok": True,
        "observations": {
            "simulated": True,
            "function": current["function"],
            "alias": current["alias"],
            "from_version": current["version"],
            "to_version": version,
            "revision_id": None,
        },
    }
    return _receipt(current, version, handle, simulated=True)


def _receipt(
    current: Mapping[str, Any], version: str, handle: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return UPDATE.receipt(
        undo={
            "function": current["function"],
            "alias": current["alias"],
            "restore_to": current["version"],
        },
        before={"version": current["version"], "revision_id": current["revision_id"]},
        after={"version": version, "revision_id": handle["observations"].get("revision_id")},
        handle=handle,
        **extra,
    )


def updates_settled(handles: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A probe for ``ctx.wait_until``: each update's version as Lambda reports it now; the
    statuses once every one is ``Successful``, None while any is in progress. A ``Failed``
    update is a FatalError (``update_failed``) with Lambda's reason; an alias moved away from
    the version meanwhile, ``alias_changed``."""
    statuses: dict[str, str] = {}
    pending = False
    for handle in handles:
        observations = handle.get("observations", {})
        if observations.get("simulated"):
            statuses[observations["function"]] = "Successful"
            continue
        with provider_errors():
            current = Providers(settings.ALFRED_PROVIDERS).lambda_().inspect(handle)  # type: ignore[arg-type]
        found = current["observations"]
        function = found["function"]
        if current["status"] == "DRIFTED":
            raise FatalError(
                f"{function}:{found['alias']} moved to version {found['alias_version']} while "
                f"its update to {found['to_version']} settled",
                code="alias_changed",
                function=function,
                observed={
                    "version": found["alias_version"],
                    "revision_id": found["alias_revision_id"],
                },
            )
        if current["done"] and not current["ok"]:
            reason = found.get("last_update_status_reason") or f"state {found.get('state')}"
            raise FatalError(
                f"the update of {function} to version {found['to_version']} failed: {reason}",
                code="update_failed",
                function=function,
                version=found["to_version"],
                status=current["status"],
                state=found.get("state"),
                reason=found.get("last_update_status_reason"),
            )
        pending = pending or not current["done"]
        statuses[function] = current["status"]
    return None if pending else {"statuses": statuses}


def restore_alias(*, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Move the alias of ``receipt`` back to its previous version, only if it is still as
    Alfred's update left it (version and RevisionId, sent as the compare-and-swap); already
    back is a no-op. A receipt of the same shape, for the rollback run's record."""
    undo = receipt["undo"]
    adapter = Providers(settings.ALFRED_PROVIDERS).lambda_()
    try:
        handle = adapter.restore(receipt["handle"])
    except Conflict as exc:
        raise Drifted(RESOURCE, [_difference(receipt, exc.details.get("alias"))]) from exc
    except ProviderError as exc:
        raise engine_error(exc) from exc
    return UPDATE.receipt(
        undo={
            "function": undo["function"],
            "alias": undo["alias"],
            "restore_to": receipt["after"]["version"],
        },
        before=dict(receipt["after"]),
        after={
            "version": undo["restore_to"],
            "revision_id": handle["observations"].get("revision_id"),
        },
        handle=dict(handle),
    )


def _difference(receipt: Mapping[str, Any], found: Mapping[str, Any] | None) -> dict[str, Any]:
    undo = receipt["undo"]
    return {
        "function": undo["function"],
        "alias": undo["alias"],
        "expected": dict(receipt["after"]),
        "found": (
            {"version": found["version"], "revision_id": found["revision_id"]} if found else None
        ),
    }


@UPDATE.undo
def undo_update(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Compensate an alias update: the alias must be exactly as Alfred left it (``after``:
    version and RevisionId), else ``drifted`` and it is left alone; then ONE update back to
    the previous version, and the wait for that version to be Successful. A simulated update
    has nothing to undo.

    An update recovered after a lost answer or a lost worker (``ownership: unproven``: the
    alias was at the version, but no read can tell who put it there) is not reversed on the
    receipt's word: the rollback pauses for an operator to approve the move back, shown as a
    plan, and reads the alias again once approved."""
    if receipt.get("simulated"):
        return {"restored": [], "simulated": True}
    undo = receipt["undo"]
    function, alias = undo["function"], undo["alias"]
    current = ctx.step("read", read_aliases, [function], alias, dry_run=False)[0]
    if current["version"] == undo["restore_to"]:
        return {"restored": [], "already": {"function": function, "version": current["version"]}}
    found = {"version": current["version"], "revision_id": current["revision_id"]}
    if found != receipt["after"]:
        raise Drifted(RESOURCE, [_difference(receipt, current)])
    if (receipt.get("handle") or {}).get("observations", {}).get("ownership") == "unproven":
        proposed = {"function": function, "alias": alias, "version": undo["restore_to"]}
        digest = plan_hash(proposed=proposed, existing=found)
        operator_consent(
            ctx,
            "confirm",
            plan_hash=digest,
            payload={
                "plan": {
                    "function": function,
                    "alias": alias,
                    "before": found,
                    "after": {"version": undo["restore_to"]},
                },
                "summary": f"roll back: alias {alias} of {function} from version "
                f"{found['version']} to {undo['restore_to']}",
                "why": "the alias update was recovered after a lost answer: nothing proves "
                "the version it points at was set by Alfred",
            },
        )
    restored = ctx.step("restore", restore_alias, receipt=receipt, mutation=True)
    ctx.wait_until(
        "settled",
        lambda: updates_settled([restored["handle"]]),
        every=SETTLE_POLL_SECONDS,
        timeout=SETTLE_TIMEOUT_SECONDS,
    )
    return {"restored": [{"function": function, "alias": alias, "version": undo["restore_to"]}]}
