"""Workflows defined by the tests to prove the engine (it knows no provider). Registered
through ALFRED_EXTRA_WORKFLOWS in the test process and in the workers it starts.

Side effects are counted in Redis (the broker's server), outside PostgreSQL, as a provider's
would be: a step that ran twice shows as a count of 2.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings

from executions.engine.errors import FatalError, ReadinessFailure, RetryableError
from executions.workflows.base import LaneClaim, Workflow


def counters() -> redis.Redis:
    """The broker's Redis server, another database: flushing the broker keeps the counts."""
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"), db=1)
    # (redis-py lets the URL's own database win over a db= argument: set it in the URL)
    parts = urlsplit(url)
    broker_db = int(parts.path.strip("/") or 0)
    return redis.Redis.from_url(urlunsplit(parts._replace(path=f"/{(broker_db + 1) % 16}")))


def effect(label: str, name: str) -> int:
    return int(counters().incr(f"alfred-test:effect:{label}:{name}"))


def effects(label: str, name: str) -> int:
    return int(counters().get(f"alfred-test:effect:{label}:{name}") or 0)


def _schema(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["label"],
        "properties": {"label": {"type": "string"}, **properties},
        "examples": [{"label": "example"}],
    }


class TestWorkflow(Workflow):
    title = description = "a workflow of the tests"
    lane_description = "none"

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return dict(data)

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return None


class Counter(TestWorkflow):
    """Five counted side effects in one stage. Between steps, a kill point listed in Redis
    (``alfred-test:kill:<label>``) SIGKILLs the worker process, once each."""

    name = "test-counter"
    stages = ("plan", "work", "verify")
    input_schema: ClassVar[dict[str, Any]] = _schema(steps={"type": "integer"})

    def stage_plan(self, ctx: Any) -> Any:
        return {"planned": ctx.input.get("steps", 5)}

    def stage_work(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        done = []
        for i in range(1, ctx.input.get("steps", 5) + 1):
            done.append(ctx.step(f"effect-{i}", effect, label, f"effect-{i}"))
            if counters().srem(f"alfred-test:kill:{label}", i):
                os.kill(os.getpid(), signal.SIGKILL)
        return {"counts": done}

    def stage_verify(self, ctx: Any) -> Any:
        return {"verified": True}


class Waits(TestWorkflow):
    """Waits without holding a worker: a sleep or a hook, per ``mode``."""

    name = "test-waits"
    stages = ("plan", "wait")
    input_schema: ClassVar[dict[str, Any]] = _schema(
        mode={"enum": ["sleep", "hook", "operator"]}, seconds={"type": "number"}
    )

    def stage_plan(self, ctx: Any) -> Any:
        return {}

    def stage_wait(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        if ctx.input["mode"] == "sleep":
            ctx.sleep("nap", ctx.input.get("seconds", 1))
            return {"slept": True, "effect": ctx.step("after", effect, label, "after")}
        signal_payload = ctx.wait_for_hook(
            "go",
            token=f"go-{label}",
            payload={"label": label},
            operator=ctx.input["mode"] == "operator",
        )
        return {"signal": signal_payload, "effect": ctx.step("after", effect, label, "after")}


class Flaky(TestWorkflow):
    """A step that fails with RetryableError ``failures`` times, then succeeds."""

    name = "test-flaky"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema(
        failures={"type": "integer"}, fatal={"type": "boolean"}, retry_after={"type": "number"}
    )

    def stage_plan(self, ctx: Any) -> Any:
        from executions.engine.context import RetryPolicy

        label = ctx.input["label"]

        def attempt() -> int:
            calls = effect(label, "attempts")
            counters().rpush(f"alfred-test:times:{label}", repr(time.time()))
            if ctx.input.get("fatal"):
                raise FatalError("refused for good", code="refused")
            if calls <= ctx.input.get("failures", 0):
                raise RetryableError(f"not yet ({calls})", retry_after=ctx.input.get("retry_after"))
            return calls

        return {"attempts": ctx.step("flaky", attempt, retry=RetryPolicy(base=0.2, cap=0.5))}


class Slow(TestWorkflow):
    """Steps of ``step_seconds`` each: a run that is running when canceled. ``pause_seconds``:
    stage code (outside any step) that takes that long between two steps."""

    name = "test-slow"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema(
        steps={"type": "integer"}, step_seconds={"type": "number"}, pause_seconds={"type": "number"}
    )

    def stage_plan(self, ctx: Any) -> Any:
        label = ctx.input["label"]

        def slow(i: int) -> int:
            time.sleep(ctx.input.get("step_seconds", 0.5))
            return effect(label, f"slow-{i}")

        done = []
        for i in range(ctx.input.get("steps", 10)):
            if i:
                time.sleep(ctx.input.get("pause_seconds", 0))
            done.append(ctx.step(f"slow-{i}", slow, i))
        return done


class Parent(TestWorkflow):
    """Starts a child — test-waits on a hook, or test-slow with ``slow_child`` — and waits."""

    name = "test-parent"
    stages = ("plan", "children")
    input_schema: ClassVar[dict[str, Any]] = _schema(slow_child={"type": "boolean"})

    def stage_plan(self, ctx: Any) -> Any:
        return {}

    def stage_children(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        if ctx.input.get("slow_child"):
            child = {"label": f"{label}-child", "steps": 20, "step_seconds": 0.3}
            return ctx.child("child", "test-slow", child)
        return ctx.child("child", "test-waits", {"label": f"{label}-child", "mode": "hook"})


class NotReady(TestWorkflow):
    """The planning stage finds a precondition unmet."""

    name = "test-not-ready"
    stages = ("plan", "apply")
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def stage_plan(self, ctx: Any) -> Any:
        raise ReadinessFailure(
            "the zone is not delegated",
            code="zone_not_delegated",
            checks=[{"name": "ns-delegation", "ok": False, "detail": "no NS at parent"}],
        )


class Crashing(TestWorkflow):
    name = "test-crashing"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def stage_plan(self, ctx: Any) -> Any:
        secret = "s3cr3t-value"  # a local the failure projection must not show
        raise KeyError(f"missing {len(secret)}")


class Deadline(TestWorkflow):
    name = "test-deadline"
    stages = ("plan",)
    deadline_seconds = 1.0
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def stage_plan(self, ctx: Any) -> Any:
        ctx.sleep("forever", 3600)
        return {}


class Probe(TestWorkflow):
    """``ctx.wait_until`` on a Redis flag the test sets; ``ctx.now`` recorded around it."""

    name = "test-probe"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema(timeout={"type": "number"})

    def stage_plan(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        before = ctx.now()
        counters().rpush(f"alfred-test:now:{label}", before.isoformat())  # once per replay

        def ready() -> Any:
            effect(label, "polls")
            value = counters().get(f"alfred-test:ready:{label}")
            return value.decode() if value else None

        value = ctx.wait_until("ready", ready, every=0.3, timeout=ctx.input.get("timeout", 30))
        return {"value": value}


class Shifty(TestWorkflow):
    """A stage whose step keys change between replays: not deterministic."""

    name = "test-shifty"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema()

    def stage_plan(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        replay = effect(label, "replays")
        ctx.step(f"first-{replay}", effect, label, "first")
        ctx.sleep("pause", 0.2)
        return {}


class Mutating(TestWorkflow):
    """A mutation step: a valid receipt is stored; ``bad`` returns one without ``undo``."""

    name = "test-mutating"
    stages = ("plan",)
    input_schema: ClassVar[dict[str, Any]] = _schema(bad={"type": "boolean"})

    def stage_plan(self, ctx: Any) -> Any:
        receipt: dict[str, Any] = {"resource": "dns:api.example.com", "action": "upsert"}
        if not ctx.input.get("bad"):
            receipt["undo"] = {"action": "delete", "values": ["1.2.3.4"]}
        return ctx.step("change", lambda: receipt, mutation=True)


class Infra(TestWorkflow):
    """Work on the aws-infrastructure lane, standing in for onboard/add-domain/certificate."""

    name = "test-infra"
    stages = ("plan", "apply", "verify")
    input_schema: ClassVar[dict[str, Any]] = _schema(
        not_ready={"type": "boolean"}, seconds={"type": "number"}, with_child={"type": "boolean"}
    )
    lane_description = "aws-infrastructure"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim("aws-infrastructure")

    def stage_plan(self, ctx: Any) -> Any:
        if ctx.input.get("not_ready"):
            raise ReadinessFailure(
                "the zone is not delegated",
                code="zone_not_delegated",
                checks=[{"name": "ns-delegation", "ok": False}],
            )
        return {}

    def stage_apply(self, ctx: Any) -> Any:
        label = ctx.input["label"]
        counters().rpush("alfred-test:infra-order", label)
        time.sleep(ctx.input.get("seconds", 0))
        return ctx.step("change", effect, label, "change")

    def stage_verify(self, ctx: Any) -> Any:
        if ctx.input.get("with_child"):
            child = ctx.child("cert", "test-infra", {"label": f"{ctx.input['label']}-cert"})
            return {"ok": True, "child": child["status"]}
        return {"ok": True}


WORKFLOWS = [
    Infra(),
    Counter(),
    Waits(),
    Flaky(),
    Slow(),
    Parent(),
    NotReady(),
    Crashing(),
    Deadline(),
    Probe(),
    Shifty(),
    Mutating(),
]
