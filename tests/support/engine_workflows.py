"""Workflows defined by the tests to prove the engine (it knows no provider). Registered
through ALFRED_EXTRA_WORKFLOWS in the test process and in the workers it starts.

Side effects are counted in Redis (the broker's server), outside PostgreSQL, as a provider's
would be: a step that ran twice shows as a count of 2.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.dispatch import receiver
from pydantic import ConfigDict

from executions.runtime.errors import FatalError, ReadinessFailure, RetryableError
from executions.runtime.signals import stage_claiming, stage_completed
from executions.runtime.stage import StageContext
from workflows.base import LaneClaim, Workflow, WorkflowInput


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


class LabelInput(WorkflowInput):
    """A test workflow's input: a label naming its counted effects, and what the workflow
    adds."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"label": "example"}]})

    label: str


class TestWorkflow(Workflow):
    title = description = "a workflow of the tests"
    lane_description = "none"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return None


class CounterInput(LabelInput):
    steps: int = 5


class Counter(TestWorkflow):
    """Five counted side effects in one stage. Between steps, a kill point listed in Redis
    (``alfred-test:kill:<label>``) SIGKILLs the worker process, once each."""

    name = "test-counter"
    stages = ("plan", "work", "verify")
    Input = CounterInput

    def stage_plan(self, ctx: StageContext) -> Any:
        return {"planned": ctx.input.steps}

    def stage_work(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        done = []
        for i in range(1, ctx.input.steps + 1):
            done.append(ctx.step(f"effect-{i}", effect, label, f"effect-{i}"))
            if counters().srem(f"alfred-test:kill:{label}", i):
                os.kill(os.getpid(), signal.SIGKILL)
        return {"counts": done}

    def stage_verify(self, ctx: StageContext) -> Any:
        return {"verified": True}


class WaitsInput(LabelInput):
    mode: Literal["sleep", "hook", "operator"] = "hook"
    seconds: float = 1


class Waits(TestWorkflow):
    """Waits without holding a worker: a sleep or a hook, per ``mode``."""

    name = "test-waits"
    stages = ("plan", "wait")
    Input = WaitsInput

    def stage_plan(self, ctx: StageContext) -> Any:
        return {}

    def stage_wait(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        if ctx.input.mode == "sleep":
            ctx.sleep("nap", ctx.input.seconds)
            return {"slept": True, "effect": ctx.step("after", effect, label, "after")}
        signal_payload = ctx.wait_for_hook(
            "go",
            token=f"go-{label}",
            payload={"label": label},
            operator=ctx.input.mode == "operator",
        )
        return {"signal": signal_payload, "effect": ctx.step("after", effect, label, "after")}


class FlakyInput(LabelInput):
    failures: int = 0
    fatal: bool = False
    retry_after: float | None = None


class Flaky(TestWorkflow):
    """A step that fails with RetryableError ``failures`` times, then succeeds."""

    name = "test-flaky"
    stages = ("plan",)
    Input = FlakyInput

    def stage_plan(self, ctx: StageContext) -> Any:
        from executions.runtime.stage import RetryPolicy

        label = ctx.input.label

        def attempt() -> int:
            calls = effect(label, "attempts")
            counters().rpush(f"alfred-test:times:{label}", repr(time.time()))
            if ctx.input.fatal:
                raise FatalError("refused for good", code="refused")
            if calls <= ctx.input.failures:
                raise RetryableError(f"not yet ({calls})", retry_after=ctx.input.retry_after)
            return calls

        return {"attempts": ctx.step("flaky", attempt, retry=RetryPolicy(base=0.2, cap=0.5))}


class SlowInput(LabelInput):
    steps: int = 10
    step_seconds: float = 0.5
    pause_seconds: float = 0


class Slow(TestWorkflow):
    """Steps of ``step_seconds`` each: a run that is running when canceled. ``pause_seconds``:
    stage code (outside any step) that takes that long between two steps."""

    name = "test-slow"
    stages = ("plan",)
    Input = SlowInput

    def stage_plan(self, ctx: StageContext) -> Any:
        label = ctx.input.label

        def slow(i: int) -> int:
            time.sleep(ctx.input.step_seconds)
            return effect(label, f"slow-{i}")

        done = []
        for i in range(ctx.input.steps):
            if i:
                time.sleep(ctx.input.pause_seconds)
            done.append(ctx.step(f"slow-{i}", slow, i))
        return done


class ReadsInput(LabelInput):
    pause_seconds: float = 0
    cut_at_end: bool = False


class Reads(TestWorkflow):
    """A stage that reads the database itself (an earlier stage's output) after
    ``pause_seconds`` of its own code: the read a database restart may cut."""

    name = "test-reads"
    stages = ("plan", "use")
    Input = ReadsInput
    MARK = "SELECT 'alfred-test: a stage pauses before it reads'"

    def stage_plan(self, ctx: StageContext) -> Any:
        return {"value": 1}

    def stage_use(self, ctx: StageContext) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(self.MARK)  # names this stage's backend for the test
        time.sleep(ctx.input.pause_seconds)
        planned = ctx.output_of("plan")
        after = ctx.step("after", effect, ctx.input.label, "after")
        if ctx.input.cut_at_end and effect(ctx.input.label, "cut") == 1:
            # once: the stage's connection dies as it returns, before its end is written
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return {"value": planned["value"], "after": after}


class ParentInput(LabelInput):
    slow_child: bool = False


class Parent(TestWorkflow):
    """Starts a child — test-waits on a hook, or test-slow with ``slow_child`` — and waits."""

    name = "test-parent"
    stages = ("plan", "children")
    Input = ParentInput

    def stage_plan(self, ctx: StageContext) -> Any:
        return {}

    def stage_children(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        if ctx.input.slow_child:
            child = {"label": f"{label}-child", "steps": 20, "step_seconds": 0.3}
            return ctx.child("child", "test-slow", child)
        return ctx.child("child", "test-waits", {"label": f"{label}-child", "mode": "hook"})


class NotReady(TestWorkflow):
    """The planning stage finds a precondition unmet."""

    name = "test-not-ready"
    stages = ("plan", "apply")
    Input = LabelInput

    def stage_plan(self, ctx: StageContext) -> Any:
        raise ReadinessFailure(
            "the zone is not delegated",
            code="zone_not_delegated",
            checks=[{"name": "ns-delegation", "ok": False, "detail": "no NS at parent"}],
        )


class Crashing(TestWorkflow):
    name = "test-crashing"
    stages = ("plan",)
    Input = LabelInput

    def stage_plan(self, ctx: StageContext) -> Any:
        secret = "s3cr3t-value"  # a local the failure projection must not show
        raise KeyError(f"missing {len(secret)}")


class Deadline(TestWorkflow):
    name = "test-deadline"
    stages = ("plan",)
    deadline_seconds = 1.0
    Input = LabelInput

    def stage_plan(self, ctx: StageContext) -> Any:
        ctx.sleep("forever", 3600)
        return {}


class ProbeInput(LabelInput):
    timeout: float = 30
    flaky: int = 0
    every: float = 0.3  # the wait's poll interval, as a workflow declares it (before the scale)


class Probe(TestWorkflow):
    """``ctx.wait_until`` on a Redis flag the test sets; ``ctx.now`` recorded around it."""

    name = "test-probe"
    stages = ("plan",)
    Input = ProbeInput

    def stage_plan(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        before = ctx.now()
        counters().rpush(f"alfred-test:now:{label}", before.isoformat())  # once per replay

        def ready() -> Any:
            # ``flaky``: the first that many polls fail as a provider's transient error would
            if effect(label, "polls") <= ctx.input.flaky:
                raise RetryableError("the provider blinked", code="provider_transient")
            value = counters().get(f"alfred-test:ready:{label}")
            return value.decode() if value else None

        value = ctx.wait_until("ready", ready, every=ctx.input.every, timeout=ctx.input.timeout)
        return {"value": value}


class Shifty(TestWorkflow):
    """A stage whose step keys change between replays: not deterministic."""

    name = "test-shifty"
    stages = ("plan",)
    Input = LabelInput

    def stage_plan(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        replay = effect(label, "replays")
        ctx.step(f"first-{replay}", effect, label, "first")
        ctx.sleep("pause", 0.2)
        return {}


class MutatingInput(LabelInput):
    bad: bool = False


class Mutating(TestWorkflow):
    """A mutation step: a valid receipt is stored; ``bad`` returns one without ``undo``."""

    name = "test-mutating"
    stages = ("plan",)
    Input = MutatingInput

    def stage_plan(self, ctx: StageContext) -> Any:
        receipt: dict[str, Any] = {"resource": "dns:api.example.com", "action": "upsert"}
        if not ctx.input.bad:
            receipt["undo"] = {"action": "delete", "values": ["1.2.3.4"]}
        return ctx.step("change", lambda: receipt, mutation=True)


class InfraInput(LabelInput):
    not_ready: bool = False
    seconds: float = 0
    with_child: bool = False


class Infra(TestWorkflow):
    """Work on the aws-infrastructure lane, standing in for onboard/add-domain/certificate."""

    name = "test-infra"
    stages = ("plan", "apply", "verify")
    Input = InfraInput
    lane_description = "aws-infrastructure"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim("aws-infrastructure")

    def stage_plan(self, ctx: StageContext) -> Any:
        if ctx.input.not_ready:
            raise ReadinessFailure(
                "the zone is not delegated",
                code="zone_not_delegated",
                checks=[{"name": "ns-delegation", "ok": False}],
            )
        return {}

    def stage_apply(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        counters().rpush("alfred-test:infra-order", label)
        time.sleep(ctx.input.seconds)
        return ctx.step("change", effect, label, "change")

    def stage_verify(self, ctx: StageContext) -> Any:
        if ctx.input.with_child:
            child = ctx.child("cert", "test-infra", {"label": f"{ctx.input.label}-cert"})
            return {"ok": True, "child": child["status"]}
        return {"ok": True}


# Raise the in-flight count and keep the highest seen, in one atomic step on the server.
_ENTER = """
local now = redis.call('INCR', KEYS[1])
if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end
return now
"""
INFLIGHT_MAX = "alfred-test:exclusive:inflight-max"
EXCLUSIVE_ORDER = "alfred-test:exclusive:order"


def exclusive_change(label: str, seconds: float) -> int:
    """A side effect that must never overlap another: counted in flight around itself (INCR
    before, DECR after, the highest count kept in ``INFLIGHT_MAX``), and appended, as it
    happens, to ``EXCLUSIVE_ORDER``: the order the provider saw, outside PostgreSQL."""
    r = counters()
    r.eval(_ENTER, 2, "alfred-test:exclusive:inflight", INFLIGHT_MAX)
    try:
        r.rpush(EXCLUSIVE_ORDER, label)
        time.sleep(seconds)
        return effect(label, "change")
    finally:
        r.decr("alfred-test:exclusive:inflight")


class InfraExclusive(Infra):
    """test-infra whose apply is one exclusive side effect (:func:`exclusive_change`) that
    takes ``seconds``."""

    name = "test-infra-exclusive"

    def stage_apply(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        return ctx.step("change", exclusive_change, label, ctx.input.seconds)


# Kill points of test-kill-points, armed by the tests as "<label>:<point>" members of this
# set. A point is ``step:<i>`` (after the i-th step of the work stage), ``before:<stage>``
# (the stage about to be claimed, the one before it committed: between stages) or
# ``after:<stage>`` (the stage committed, the next one not yet claimed, the run's message not
# yet acknowledged); a ``worker:`` prefix kills the whole worker (its process group: the main
# process, beat and the pool) instead of the pool process running the task, and a ``freeze:``
# prefix stops the whole worker (SIGSTOP) until the test sends it SIGCONT.
KILL_POINTS = "alfred-test:kill-points"


def kill_point(label: str, point: str) -> None:
    """SIGKILL (or SIGSTOP) here if the test armed ``point`` for ``label``, once."""
    r = counters()
    if r.srem(KILL_POINTS, f"{label}:{point}"):
        os.kill(os.getpid(), signal.SIGKILL)
    if r.srem(KILL_POINTS, f"{label}:worker:{point}"):
        os.killpg(os.getpgid(0), signal.SIGKILL)
    if r.srem(KILL_POINTS, f"{label}:freeze:{point}"):
        os.killpg(os.getpgid(0), signal.SIGSTOP)


def _kill_point_of_stage(run_id: str, stage: str, point: str) -> None:
    if not counters().scard(KILL_POINTS):
        return  # nothing armed: no database read for every other test's stages
    from executions.models import Run

    row = Run.objects.filter(pk=run_id).values_list("execution__workflow", "execution__input")
    workflow, data = row.first() or (None, None)
    if workflow == KillPoints.name:
        kill_point(data["label"], f"{point}:{stage}")


@receiver(stage_claiming)
def _kill_before_stage(sender: Any = None, run_id: str = "", stage: str = "", **_: Any) -> None:
    _kill_point_of_stage(run_id, stage, "before")


@receiver(stage_completed)
def _kill_after_stage(sender: Any = None, run_id: str = "", stage: str = "", **_: Any) -> None:
    _kill_point_of_stage(run_id, stage, "after")


class KillPoints(TestWorkflow):
    """Counter's five counted side effects in the work stage, with kill points
    (:data:`KILL_POINTS`) inside the stage, between stages, and of the whole worker."""

    name = "test-kill-points"
    stages = ("plan", "work", "verify")
    Input = LabelInput

    def stage_plan(self, ctx: StageContext) -> Any:
        return {"planned": 5}

    def stage_work(self, ctx: StageContext) -> Any:
        label = ctx.input.label
        done = []
        for i in range(1, 6):
            done.append(ctx.step(f"effect-{i}", effect, label, f"effect-{i}"))
            kill_point(label, f"step:{i}")
        return {"counts": done}

    def stage_verify(self, ctx: StageContext) -> Any:
        return {"verified": True}


WORKFLOWS = [
    Infra(),
    InfraExclusive(),
    Counter(),
    Waits(),
    Flaky(),
    Slow(),
    Reads(),
    Parent(),
    NotReady(),
    Crashing(),
    Deadline(),
    Probe(),
    Shifty(),
    Mutating(),
    KillPoints(),
]


class LanedInput(LabelInput):
    lane: str
    mode: Literal["ok", "not_ready", "crash"] = "ok"


class Laned(TestWorkflow):
    """On the lane its input names (the property test's lanes). ``mode``: ``ok``;
    ``not_ready`` (a readiness failure in planning); ``crash`` (fails in apply, after its
    counted change). The change is counted per run, so a step run twice in one run shows."""

    name = "test-laned"
    stages = ("plan", "apply", "verify")
    Input = LanedInput

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim(canonical["lane"])

    def stage_plan(self, ctx: StageContext) -> Any:
        if ctx.input.mode == "not_ready":
            raise ReadinessFailure(
                "not ready", code="not_ready", checks=[{"name": "ready", "ok": False}]
            )
        return {}

    def stage_apply(self, ctx: StageContext) -> Any:
        ctx.step("change", effect, ctx.input.label, f"change:{ctx.run_id}")
        ctx.sleep("settle", 0)
        if ctx.input.mode == "crash":
            raise FatalError("the change did not take", code="refused")
        return {}

    def stage_verify(self, ctx: StageContext) -> Any:
        return {"ok": True}


WORKFLOWS.append(Laned())


class Hopping(TestWorkflow):
    """Two stages on two queues: ``far`` runs only on a worker consuming the queue "far".
    Each stage says which worker ran it (``ALFRED_TEST_WORKER``, set by the test)."""

    name = "test-hopping"
    stages = ("near", "far")
    stage_queues: ClassVar[Mapping[str, str]] = {"far": "far"}
    Input = LabelInput

    def stage_near(self, ctx: StageContext) -> Any:
        return {"worker": os.environ.get("ALFRED_TEST_WORKER", "")}

    def stage_far(self, ctx: StageContext) -> Any:
        return {"worker": os.environ.get("ALFRED_TEST_WORKER", ""), "near": ctx.output_of("near")}


WORKFLOWS.append(Hopping())


class LimitedInput(LabelInput):
    sleep: float = 0


class Limited(TestWorkflow):
    """``slow`` is bounded to 1 s and sleeps ``sleep`` seconds (in the stage's code: a hung
    provider call would do the same); ``quick`` before it runs in a message of its own."""

    name = "test-limited"
    stages = ("quick", "slow")
    stage_time_limits: ClassVar[Mapping[str, float]] = {"slow": 1.0}
    Input = LimitedInput

    def stage_quick(self, ctx: StageContext) -> Any:
        return {"pid": os.getpid()}

    def stage_slow(self, ctx: StageContext) -> Any:
        effect(ctx.input.label, "slow")
        time.sleep(ctx.input.sleep)
        return {"slept": ctx.input.sleep}


WORKFLOWS.append(Limited())

# add-subdomain's kill points at the Route53 adapter's edge, installed only in the workers
# started to ask for them (tests/support/kill_points.py); imported last, as it uses kill_point
# above.
import tests.support.kill_points  # noqa: E402
import tests.support.kill_points_acm as _acm_kill_points  # noqa: E402, F401 - add-certificate's (same rule)
import tests.support.kill_points_platform  # noqa: E402, F401 - add-domain's, onboard-domain's (same rule)
from tests.support import kill_points_lambda  # noqa: E402, F401 - Lambda kill points (same rule)
