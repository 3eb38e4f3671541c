"""The pure parts of update-lambda-version and its Lambda steps, with a recording ``ctx`` and a
fake adapter: the plan's readiness failures and no-ops, one mutation step per function in a
stable order, the dry run's simulator and read-only adapter, the durable wait's verdicts, and
the compensation's checks (drifted, already back, unproven ownership)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import pytest

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.registry import compensation_get
from workflows.steps import lambda_ as steps
from workflows.steps.compensations import Drifted
from workflows.update_lambda_version import stages
from workflows.update_lambda_version.input import UpdateLambdaVersionInput


class Ctx:
    """Records each primitive; a step runs its function (no receipts, no replay)."""

    def __init__(
        self, *, dry_run: bool = False, outputs: Mapping[str, Any] | None = None, **input: Any
    ) -> None:
        self.input = UpdateLambdaVersionInput.stored({"dry_run": dry_run, **input})
        self.dry_run = dry_run
        self.execution_id = "exec-1"
        self.run_id, self.workflow, self.stage = "run-1", "update-lambda-version", ""
        self.outputs = dict(outputs or {})
        self.steps: list[tuple[str, Any, dict[str, Any]]] = []
        self.hooks: list[dict[str, Any]] = []

    def step(self, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        mutation = kwargs.pop("mutation", False)
        self.steps.append((key, fn, {"mutation": mutation, **kwargs}))
        return fn(*args, **kwargs)

    def output_of(self, stage: str | Callable[..., Any]) -> Any:
        return self.outputs[stage if isinstance(stage, str) else stage.__name__]

    def wait_until(self, key: str, probe: Callable[[], Any], **_: Any) -> Any:
        return probe()

    def wait_for_hook(self, name: str, **kwargs: Any) -> dict[str, Any]:
        self.hooks.append({"name": name, **kwargs})
        return {}

    # The rest of a StageContext, which these stages do not use.
    def now(self) -> datetime:
        raise NotImplementedError

    def sleep(self, key: str, seconds: float) -> None:
        raise NotImplementedError

    def child(self, key: str, workflow: str, input: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def rollback_child(self, key: str, child_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def heartbeat(self) -> AbstractContextManager[None]:
        raise NotImplementedError


def alias(function: str, version: str, revision: str = "r0") -> dict[str, Any]:
    return {
        "function": function,
        "alias": "production",
        "version": version,
        "revision_id": revision,
        "arn": f"arn:aws:lambda:us-east-1:1:function:{function}:production",
    }


def fleet_read(*functions: tuple[str, str, bool]) -> dict[str, Any]:
    return {
        "tag_key": "alfred:fleet",
        "functions": [
            {
                "function": name,
                "arn": f"arn:{name}",
                "alias": alias(name, version),
                "published": published,
                "version_state": "Active" if published else None,
            }
            for name, version, published in functions
        ],
    }


INPUT: dict[str, Any] = {"target": "checkout-api", "environment": "production", "version": "3"}


def test_an_empty_fleet_is_fleet_not_found(monkeypatch):
    monkeypatch.setattr(steps, "read_fleet", lambda *a, **k: fleet_read())

    with pytest.raises(ReadinessFailure) as failure:
        stages.plan(Ctx(**INPUT))

    assert failure.value.code == "fleet_not_found"
    assert failure.value.checks == [
        {"name": "functions tagged alfred:fleet=checkout-api", "ok": False}
    ]


def test_an_unpublished_version_is_version_not_published_naming_each_function(monkeypatch):
    read = fleet_read(("a", "2", True), ("b", "2", False), ("c", "2", False))
    monkeypatch.setattr(steps, "read_fleet", lambda *a, **k: read)

    with pytest.raises(ReadinessFailure) as failure:
        stages.plan(Ctx(**INPUT))

    assert failure.value.code == "version_not_published"
    assert "b, c" in failure.value.message
    assert [c["ok"] for c in failure.value.checks] == [True, False, False]


def test_the_plan_freezes_each_alias_and_marks_those_at_the_version_as_no_ops(monkeypatch):
    read = fleet_read(("a", "2", True), ("b", "3", True))
    monkeypatch.setattr(steps, "read_fleet", lambda *a, **k: read)

    planned = stages.plan(Ctx(**INPUT))

    assert [(f["function"], f["revision_id"], f["action"]) for f in planned["functions"]] == [
        ("a", "r0", "update"),
        ("b", "r0", "none"),
    ]


def _planned(*functions: tuple[str, str]) -> dict[str, Any]:
    return {
        **INPUT,
        "tag_key": "alfred:fleet",
        "functions": [
            {**alias(name, version), "action": "none" if version == "3" else "update"}
            for name, version in functions
        ],
    }


def test_update_aliases_is_one_mutation_step_per_function_in_the_plan_order(monkeypatch):
    calls: list[tuple[str, str, str]] = []

    def update(*, current: Mapping[str, Any], version: str) -> dict[str, Any]:
        calls.append((current["function"], current["revision_id"], version))
        return steps.simulate_update(current=current, version=version)

    monkeypatch.setattr(steps, "update_alias", update)
    ctx = Ctx(outputs={"plan": _planned(("a", "1"), ("b", "3"), ("c", "2"))}, **INPUT)

    output = stages.update_aliases(ctx)

    assert calls == [("a", "r0", "3"), ("c", "r0", "3")]  # the planned RevisionId each
    assert [(key, opts["mutation"]) for key, _, opts in ctx.steps] == [
        ("alias:a", True),
        ("alias:c", True),
    ]
    assert output["unchanged"] == ["b"]
    assert [u["from_version"] for u in output["updated"]] == ["1", "2"]


def test_a_dry_run_simulates_every_update_and_reaches_no_adapter(monkeypatch):
    def nothing(**_: Any) -> Any:
        raise AssertionError("a dry run called the provider")

    monkeypatch.setattr(steps, "update_alias", nothing)
    monkeypatch.setattr(steps, "Providers", nothing)
    ctx = Ctx(dry_run=True, outputs={"plan": _planned(("a", "1"))}, **INPUT)

    output = stages.update_aliases(ctx)
    ctx.outputs["update_aliases"] = output

    assert output["simulated"] is True
    assert output["updated"][0]["handle"]["observations"]["simulated"] is True
    assert stages.await_updates(ctx) == {"statuses": {"a": "Successful"}}
    assert stages.verify(ctx)["verified"] == "simulated"


def test_the_simulated_receipt_records_before_after_and_the_undo():
    receipt = steps.simulate_update(current=alias("a", "1", "r1"), version="3")

    assert receipt["resource"] == steps.RESOURCE and receipt["action"] == "update"
    assert receipt["before"] == {"version": "1", "revision_id": "r1"}
    assert receipt["after"] == {"version": "3", "revision_id": None}
    assert receipt["undo"] == {"function": "a", "alias": "production", "restore_to": "1"}
    assert receipt["simulated"] is True


def test_the_read_only_adapter_has_no_mutating_call():
    class Adapter:
        tag_key = "alfred:fleet"

        def fleet(self, target: str) -> list[Any]:
            return []

    read_only = steps.ReadOnlyLambda(Adapter())  # type: ignore[arg-type]

    assert read_only.fleet("x") == [] and read_only.tag_key == "alfred:fleet"
    for name in ("update_alias", "restore", "stop"):
        with pytest.raises(AttributeError):
            getattr(read_only, name)


class FakeLambda:
    def __init__(self, *, status: str = "Successful", done: bool = True, ok: bool = True) -> None:
        self.result = {"status": status, "done": done, "ok": ok}

    def inspect(self, handle: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **handle,
            **self.result,
            "observations": {
                **handle["observations"],
                "alias_version": "2" if self.result["status"] == "DRIFTED" else "3",
                "alias_revision_id": "r9",
                "state": "Active",
                "last_update_status_reason": "it broke"
                if self.result["status"] == "Failed"
                else None,
            },
        }


def _providers(monkeypatch: pytest.MonkeyPatch, adapter: Any) -> None:
    class Providers:
        def __init__(self, _: Any) -> None:
            pass

        def lambda_(self) -> Any:
            return adapter

    monkeypatch.setattr(steps, "Providers", Providers)


HANDLE = {
    "provider": "aws.lambda",
    "kind": "alias_update",
    "id": "arn",
    "observations": {"function": "a", "alias": "production", "to_version": "3"},
}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"status": "Successful"}, {"statuses": {"a": "Successful"}}),
        ({"status": "InProgress", "done": False, "ok": False}, None),
    ],
)
def test_the_wait_ends_once_every_update_is_successful(monkeypatch, result, expected):
    _providers(monkeypatch, FakeLambda(**result))

    assert steps.updates_settled([HANDLE]) == expected


def test_a_failed_update_is_fatal_with_lambdas_reason(monkeypatch):
    _providers(monkeypatch, FakeLambda(status="Failed", ok=False))

    with pytest.raises(FatalError) as failure:
        steps.updates_settled([HANDLE])

    assert failure.value.code == "update_failed"
    assert failure.value.details["reason"] == "it broke"


def test_an_alias_moved_during_the_wait_is_alias_changed(monkeypatch):
    _providers(monkeypatch, FakeLambda(status="DRIFTED", ok=False))

    with pytest.raises(FatalError) as failure:
        steps.updates_settled([HANDLE])

    assert failure.value.code == "alias_changed"


def _receipt(ownership: str = "proven") -> dict[str, Any]:
    receipt = steps.simulate_update(current=alias("a", "1", "r1"), version="3")
    receipt.pop("simulated")
    receipt["after"]["revision_id"] = "r2"
    receipt["handle"]["observations"].update(ownership=ownership, revision_id="r2")
    return receipt


def _undo_with(monkeypatch: pytest.MonkeyPatch, current: dict[str, Any]) -> list[Any]:
    restored: list[Any] = []
    monkeypatch.setattr(steps, "read_aliases", lambda *a, **k: [current])

    def restore(*, receipt: Mapping[str, Any]) -> dict[str, Any]:
        restored.append(receipt)
        return {"handle": {"observations": {"simulated": True, "function": "a"}}}

    monkeypatch.setattr(steps, "restore_alias", restore)
    return restored


def test_the_compensation_is_registered_beside_the_update():
    assert compensation_get(steps.RESOURCE, "update") is steps.undo_update


def test_the_undo_moves_an_alias_still_as_alfred_left_it_back(monkeypatch):
    restored = _undo_with(monkeypatch, alias("a", "3", "r2"))
    ctx = Ctx()

    result = steps.undo_update(ctx, _receipt())

    assert result["restored"] == [{"function": "a", "alias": "production", "version": "1"}]
    assert len(restored) == 1 and ctx.hooks == []
    assert [(key, opts["mutation"]) for key, _, opts in ctx.steps] == [
        ("read", False),
        ("restore", True),
    ]


@pytest.mark.parametrize("current", [alias("a", "2", "r5"), alias("a", "3", "r5")])
def test_the_undo_leaves_an_alias_changed_since_and_fails_drifted(monkeypatch, current):
    restored = _undo_with(monkeypatch, current)

    with pytest.raises(Drifted) as failure:
        steps.undo_update(Ctx(), _receipt())

    assert failure.value.code == "drifted"
    assert failure.value.details["differences"][0]["found"]["revision_id"] == "r5"
    assert restored == []


def test_an_alias_already_back_needs_no_undo(monkeypatch):
    restored = _undo_with(monkeypatch, alias("a", "1", "r7"))

    assert steps.undo_update(Ctx(), _receipt())["restored"] == []
    assert restored == []


def test_an_unproven_update_is_moved_back_only_after_an_operator_confirms(monkeypatch):
    restored = _undo_with(monkeypatch, alias("a", "3", "r2"))
    ctx = Ctx()

    steps.undo_update(ctx, _receipt("unproven"))

    assert [h["name"] for h in ctx.hooks] == ["confirm"]
    assert ctx.hooks[0]["operator"] is True
    assert ctx.hooks[0]["payload"]["plan"]["after"] == {"version": "1"}
    assert len(restored) == 1
