"""update-lambda-version's stages (docs/workflows.md): ``plan`` reads the fleet, ``update_aliases``
moves each function's environment alias (one compare-and-swap step per function),
``await_updates`` waits durably until every moved version is ``Successful``, ``verify`` reads
the aliases back.

- **The fleet** is the functions whose tag ``ALFRED_LAMBDA_FLEET_TAG`` (default
  ``alfred:fleet``) equals ``target``; the environment is the alias of that name on each.
  Readiness failures (they free the lane): no function so tagged (``fleet_not_found``), a
  function without the alias (``alias_not_found``), the version not published for some
  function (``version_not_published``, naming each).
- **The plan freezes** each alias as read (version, RevisionId). Functions already at the
  version are left alone (``unchanged``); the others are updated in the plan's order (by
  function name), each update sending the planned RevisionId: an alias someone moved after
  the plan is refused by Lambda and the stage fails ``alias_changed``, naming it; it is never
  overwritten. The aliases updated before it keep their receipts, for a rollback.
- **Rollback** moves each updated alias back to its previous version, newest first, only
  where it is still as Alfred's update left it (version and RevisionId), else ``drifted``.

A dry run plans from the real fleet, simulates every update and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from typing_extensions import TypedDict

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.stage import StageContext
from workflows.steps import lambda_
from workflows.update_lambda_version.input import UpdateLambdaVersionInput
from workflows.watch import Finding, Recorded

# What each stage is given: ctx.input is the typed input.
Ctx = StageContext[UpdateLambdaVersionInput]


class PlannedAlias(TypedDict):
    """A function's alias as the plan read it (Lambda's RevisionId is the compare-and-swap
    token), and what the plan does to it."""

    function: str
    alias: str
    version: str
    revision_id: str
    arn: str
    action: Literal["none", "update"]


class Plan(TypedDict):
    target: str
    environment: str
    version: str
    tag_key: str
    functions: list[PlannedAlias]


class Updated(TypedDict):
    function: str
    from_version: str
    to_version: str
    revision_id: str | None
    handle: dict[str, Any]


class Updates(TypedDict):
    updated: list[Updated]
    unchanged: list[str]
    simulated: bool


class Settled(TypedDict):
    statuses: dict[str, str]  # each updated function's last update status (Successful)


class Verified(TypedDict):
    verified: bool | Literal["simulated"]
    version: str
    functions: list[str]


SETTLE_POLL_SECONDS = 1.0
SETTLE_TIMEOUT_SECONDS = 900.0


def plan(ctx: Ctx) -> Plan:
    target, environment = ctx.input.target, ctx.input.environment
    version = ctx.input.version
    fleet = ctx.step("read", lambda_.read_fleet, target, environment, version, dry_run=ctx.dry_run)
    functions = fleet["functions"]
    if not functions:
        raise ReadinessFailure(
            f"no Lambda function is tagged {fleet['tag_key']}={target}",
            code="fleet_not_found",
            checks=[{"name": f"functions tagged {fleet['tag_key']}={target}", "ok": False}],
        )
    unpublished = [f["function"] for f in functions if not f["published"]]
    if unpublished:
        raise ReadinessFailure(
            f"version {version} is not published for {', '.join(unpublished)}",
            code="version_not_published",
            checks=[
                {"name": f"version {version} of {f['function']}", "ok": f["published"]}
                for f in functions
            ],
        )
    return {
        "target": target,
        "environment": environment,
        "version": version,
        "tag_key": fleet["tag_key"],
        "functions": [_planned(f["alias"], version) for f in functions],
    }


def _planned(alias: Mapping[str, Any], version: str) -> PlannedAlias:
    return {
        "function": alias["function"],
        "alias": alias["alias"],
        "version": alias["version"],
        "revision_id": alias["revision_id"],
        "arn": alias["arn"],
        "action": "none" if alias["version"] == version else "update",
    }


def update_aliases(ctx: Ctx) -> Updates:
    planned = ctx.output_of(plan)
    update = lambda_.simulate_update if ctx.dry_run else lambda_.update_alias
    updated: list[Updated] = []
    for alias in planned["functions"]:
        if alias["action"] != "update":
            continue
        current = {k: alias[k] for k in ("function", "alias", "version", "revision_id", "arn")}
        receipt = ctx.step(
            f"alias:{alias['function']}",
            update,
            current=current,
            version=planned["version"],
            mutation=True,
        )
        updated.append(
            {
                "function": alias["function"],
                "from_version": receipt["before"]["version"],
                "to_version": receipt["after"]["version"],
                "revision_id": receipt["after"]["revision_id"],
                "handle": receipt["handle"],
            }
        )
    return {
        "updated": updated,
        "unchanged": [f["function"] for f in planned["functions"] if f["action"] != "update"],
        "simulated": ctx.dry_run,
    }


def await_updates(ctx: Ctx) -> Settled:
    handles = [u["handle"] for u in ctx.output_of(update_aliases)["updated"]]
    if not handles:
        return {"statuses": {}}
    settled = ctx.wait_until(
        "successful",
        lambda: lambda_.updates_settled(handles),
        every=SETTLE_POLL_SECONDS,
        timeout=SETTLE_TIMEOUT_SECONDS,
    )
    return {"statuses": settled["statuses"]}


def verify(ctx: Ctx) -> Verified:
    planned = ctx.output_of(plan)
    version = planned["version"]
    names = [f["function"] for f in planned["functions"]]
    if ctx.output_of(update_aliases)["simulated"]:
        return {"verified": "simulated", "version": version, "functions": names}
    found = ctx.step(
        "read", lambda_.read_aliases, names, planned["environment"], dry_run=ctx.dry_run
    )
    differences = [
        {"function": a["function"], "expected": version, "found": a["version"]}
        for a in found
        if a["version"] != version
    ]
    if differences:
        raise FatalError(
            f"{len(differences)} alias(es) of {planned['target']} are not at version {version}",
            code="verify_failed",
            differences=differences,
        )
    return {"verified": True, "version": version, "functions": names}


def drift(rec: Recorded[UpdateLambdaVersionInput]) -> list[Finding]:
    """The drift watch's check (``workflows.watch``): each alias the plan named, read again,
    at the version the execution set (an alias moved by hand, or by a deploy outside Alfred,
    is drift; one moved by a later execution on the lane supersedes this one instead)."""
    planned = rec.output_of(plan)
    version, alias = planned["version"], planned["environment"]
    names = [f["function"] for f in planned["functions"]]
    return [
        Finding(f"alias {alias} of {found['function']}", version, found["version"])
        for found in lambda_.read_aliases(names, alias, dry_run=True)
        if found["version"] != version
    ]
