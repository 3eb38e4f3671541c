"""Chaos across the five workflows (issue 16): a mix of executions on the sandbox, sent to a
real web process over HTTP and run by two real Celery workers and a beat, while faults land at
random moments: pool processes and whole workers SIGKILLed (mid-step as often as not), the
database restarted as a crash would (``immediate``: every connection cut), the broker flushed,
beat and the web process SIGKILLed. Each fault is restarted the way a supervisor would.

What must hold, counted on the stand-ins' side wherever a mutation lands:

- every execution reaches the terminal state it reaches without faults (each kind of input is
  one that the workflow's own tests run to that state);
- no mutation twice: one change batch per record change, one certificate per request, one
  commit per Alfred-Operation, one alias move per function, one hosted zone per onboarding;
- every execution's events are gapless, no event key twice, what happens once happened once;
- an Idempotency-Key sent again after the chaos names the execution it made.

The seed is printed (and taken from ``ALFRED_CHAOS_SEED``), so a red run can be replayed in its
order of faults and inputs; what each fault did, and when, is in the assertion message.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from celery import current_app
from django.db import DatabaseError, InterfaceError, close_old_connections, connection

from executions.models import TERMINAL_STATUSES, Execution, OutboxEvent
from providers.gitops import parse_message
from providers.sandbox.github_seed import BOOKING_REPO, BRANCH, HELM_REPO
from providers.sandbox.stack import Sandbox
from tests import conftest
from tests.conftest import BeatProcess, WorkerProcess, wait_for
from tests.integration.test_add_certificate import certificates_of
from tests.support import platform_world as world
from tests.support.aws_world import JournalledAws
from tests.support.kill_points import ENABLE as ROUTE53_HOOKS
from tests.support.kill_points import SETTLE
from tests.support.live import WebServer

# The seeded fleets' aliases are moved away from the seed (staging -> 3, production -> 2).
LAMBDA_LANES = (
    ("checkout-api", "production", "3"),
    ("search-api", "staging", "1"),
    ("checkout-api", "staging", "1"),
    ("search-api", "production", "3"),
)
FLEETS = {
    "checkout-api": ("checkout-api-cart", "checkout-api-orders", "checkout-api-payments"),
    "search-api": ("search-api-query", "search-api-indexer"),
}
# In the order a mix cycles through them; every tenth execution is one that fails in plan.
ROTATION = (
    "add-subdomain",
    "add-certificate",
    "update-lambda-version",
    "add-domain",
    "onboard-domain",
)


@dataclass
class Planned:
    workflow: str
    body: dict[str, Any]
    expect: str
    key: str = field(default_factory=lambda: f"chaos-{uuid.uuid4()}")
    id: str | None = None
    answers: list[int] = field(default_factory=list)  # HTTP statuses, retries included


def mix(size: int, rng: random.Random) -> list[Planned]:
    """``size`` executions over the five workflows, shuffled."""
    planned = []
    lambdas = 0
    for i in range(size):
        label = f"c{i}-{uuid.uuid4().hex[:6]}"
        if i % 10 == 9:
            # a name in no hosted zone: add-certificate fails in plan, changing nothing
            planned.append(Planned("add-certificate", {"domain": f"{label}.nozone.test"}, "failed"))
            continue
        workflow = ROTATION[i % len(ROTATION)]
        if workflow == "add-subdomain":
            body: dict[str, Any] = {"zone": "example.com", "subdomain": label}
        elif workflow == "add-certificate":
            domain = f"{label}.example.com"
            body = {"domain": domain, "alternative_names": [f"www.{domain}"]}
        elif workflow == "add-domain":
            body = {"domain": f"{label}.example.com", "kirby_mode": "enabled"}
        elif workflow == "onboard-domain":
            body = {"domain": f"{label}.org"}
        else:
            target, environment, version = LAMBDA_LANES[lambdas % len(LAMBDA_LANES)]
            lambdas += 1
            body = {
                "target": target,
                "environment": environment,
                "version": version,
                "ticket_ids": [f"CHAOS-{i}"],
            }
        planned.append(Planned(workflow, body, "succeeded"))
    rng.shuffle(planned)
    return planned


@dataclass
class Fault:
    at: float
    kind: str
    detail: str


class Chaos:
    """The processes under test, and the faults that break them."""

    def __init__(self, sandbox: Sandbox, rng: random.Random, token: str) -> None:
        self.sandbox = sandbox
        self.rng = rng  # the faults' draws; the submissions' pace draws from its own, so that
        self.pace = random.Random(rng.random())  # the two threads never share one sequence
        self.token = token
        self.started = time.monotonic()
        self.faults: list[Fault] = []
        environ = {**sandbox.environ(), ROUTE53_HOOKS: "1", SETTLE: "1"}
        self.workers = [WorkerProcess(f"chaos{n}") for n in (1, 2)]
        self.worker_environ = environ
        self.beat = BeatProcess("chaos-beat")
        self.web = WebServer("chaos-web", **sandbox.environ())
        self.sent = 0  # executions accepted so far
        self.lost = 0  # requests whose answer never came (the web process died under them)

    @contextmanager
    def running(self) -> Iterator[Chaos]:
        with ExitStack() as stack:
            for worker in self.workers:
                worker.start(beat=False, concurrency=2, environ=self.worker_environ)
                stack.callback(worker.stop)
            self.beat.start(environ=self.worker_environ)
            stack.callback(self.beat.stop)
            self.web.start()
            stack.callback(self.web.stop)
            yield self

    def note(self, kind: str, detail: str = "") -> None:
        self.faults.append(Fault(round(time.monotonic() - self.started, 2), kind, detail))

    # -- the faults ---------------------------------------------------------------------------

    def kill_pool_process(self) -> None:
        worker = self.rng.choice(self.workers)
        pool = worker.pool()
        if not pool:
            self.note("pool", f"{worker.name}: no pool process to kill")
            return
        victim = self.rng.choice(pool)
        try:
            os.kill(victim, 9)
        except ProcessLookupError:
            return
        self.note("pool", f"{worker.name} pool process {victim}")

    def kill_worker(self) -> None:
        worker = self.rng.choice(self.workers)
        worker.kill()
        self.note("worker", f"{worker.name} (whole process group)")
        time.sleep(self.rng.uniform(0.5, 3.0))
        worker.start(beat=False, concurrency=2, environ=self.worker_environ)
        self.note("worker", f"{worker.name} restarted")

    def restart_database(self) -> None:
        stack = conftest._stack
        if stack is None:  # the machine's own PostgreSQL (.ci/run's services pass)
            self.note("database", "skipped: not the embedded PostgreSQL")
            return
        self.note("database", "restart (immediate)")
        stack.restart_database()
        self.note("database", "accepting connections")

    def flush_broker(self) -> None:
        """FLUSHDB on the broker, at a moment it holds stage messages (queued, or delivered
        and unacknowledged) if one comes within 10 s: they are lost, as in a broker failover
        without persistence."""
        with current_app.connection_for_write() as conn:
            client = conn.default_channel.client  # type: ignore[attr-defined]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                client.llen("stages") or client.hlen("unacked")
            ):
                time.sleep(0.01)
            with client.pipeline(transaction=True) as flush:  # one MULTI: what it dropped
                queued, unacked, _ = flush.llen("stages").hlen("unacked").flushdb().execute()
        self.note("broker", f"flushed: {queued} queued, {unacked} unacknowledged messages lost")

    def kill_beat(self) -> None:
        self.beat.kill()
        self.note("beat", "SIGKILL")
        time.sleep(self.rng.uniform(1.0, 3.0))
        self.beat.start(environ=self.worker_environ)
        self.note("beat", "restarted")

    def kill_web(self, halfway: int) -> None:
        """SIGKILL the web process once half the executions are in (while requests are)."""
        wait_for(lambda: self.sent >= halfway, timeout=120, interval=0.01)
        self.web.kill()
        self.note("web", "SIGKILL")
        time.sleep(self.rng.uniform(0.2, 1.0))
        self.web.start()
        self.note("web", "restarted")

    def strike(self, schedule: list[str], gap: tuple[float, float], size: int) -> None:
        """The faults in ``schedule``, in turn, ``gap`` seconds apart (uniformly at random);
        the web process's death waits for half of ``size`` executions to be in."""
        faults: dict[str, Callable[[], None]] = {
            "pool": self.kill_pool_process,
            "worker": self.kill_worker,
            "database": self.restart_database,
            "broker": self.flush_broker,
            "beat": self.kill_beat,
            "web": lambda: self.kill_web(size // 2),
        }
        for kind in schedule:
            time.sleep(self.rng.uniform(*gap))
            faults[kind]()

    # -- the integration's side ---------------------------------------------------------------

    def submit(self, planned: list[Planned], gap: tuple[float, float]) -> None:
        """POST each execution with its own key, retrying a lost answer with the same key (what
        an integration does when the web process dies under it)."""
        with httpx.Client(headers={"Authorization": f"Bearer {self.token}"}, timeout=10) as http:
            for item in planned:
                self.accept(http, item)
                self.sent += 1
                time.sleep(self.pace.uniform(*gap))

    def accept(self, http: httpx.Client, item: Planned, deadline: float = 60.0) -> dict[str, Any]:
        give_up = time.monotonic() + deadline
        while True:
            try:
                answer = http.post(
                    f"{self.web.base}/api/v1/workflows/{item.workflow}/executions",
                    json=item.body,
                    headers={"Idempotency-Key": item.key},
                )
            except httpx.HTTPError:
                answer = None
                self.lost += 1
            if answer is not None:
                item.answers.append(answer.status_code)
                if answer.status_code in (200, 202):
                    body: dict[str, Any] = answer.json()
                    if item.id is None:
                        item.id = body["id"]
                    return body
                if answer.status_code < 500:
                    raise AssertionError(f"{item.workflow} {item.body}: {answer.text}")
            if time.monotonic() > give_up:
                raise AssertionError(f"{item.workflow} {item.body}: no answer, {item.answers}")
            time.sleep(0.2)

    def logs(self) -> str:
        parts = [f"faults: {self.faults}"]
        for proc in (*self.workers, self.beat):
            parts.append(f"--- {proc.name}\n{proc.output()[-3000:]}")
        parts.append(f"--- web\n{self.web.output()[-2000:]}")
        return "\n".join(parts)


def _database(read: Callable[[], Any]) -> Any:
    """``read``, again after the database came back (a restart cuts this process's connection
    too)."""
    for _ in range(100):
        try:
            return read()
        except (DatabaseError, InterfaceError):
            connection.close()
            close_old_connections()
            time.sleep(0.2)
    return read()


def run(
    size: int,
    schedule: list[str],
    *,
    fault_gap: tuple[float, float],
    submit_gap: tuple[float, float] = (0.05, 0.4),
    timeout: float = 300.0,
) -> None:
    """The whole test: ``size`` executions under the faults of ``schedule``, then the checks."""
    from alfred.tokens import token_create

    seed = int(os.environ.get("ALFRED_CHAOS_SEED") or random.SystemRandom().randrange(10**9))
    print(f"chaos seed {seed}: ALFRED_CHAOS_SEED={seed} replays it")
    rng = random.Random(seed)
    planned = mix(size, rng)
    token = token_create(name=f"chaos-{seed}", role="integration")[1]
    with (
        world.sandbox_started(aws_kind=JournalledAws) as sandbox,
        Chaos(sandbox, rng, token).running() as chaos,
    ):
        for worker in chaos.workers:
            world.ready(worker)
        submitter = threading.Thread(target=chaos.submit, args=(planned, submit_gap))
        submitter.start()
        time.sleep(1.0)  # work in flight before the first fault
        chaos.strike(schedule, fault_gap, size)
        submitter.join()
        chaos.note("faults", "over")
        struck = Counter(f.kind for f in chaos.faults if "no pool process" not in f.detail)
        assert all(struck[kind] for kind in schedule), chaos.logs()  # each fault happened

        ids = [item.id for item in planned]
        assert all(ids), chaos.logs()

        def settled() -> bool:
            done = Execution.objects.filter(pk__in=ids, status__in=TERMINAL_STATUSES).count()
            return done == len(ids)

        try:
            wait_for(lambda: _database(settled), timeout=timeout, interval=0.5)
        except AssertionError:
            stuck = _database(
                lambda: list(
                    Execution.objects.filter(pk__in=ids)
                    .exclude(status__in=TERMINAL_STATUSES)
                    .values_list("id", "workflow", "status")
                )
            )
            raise AssertionError(f"not terminal: {stuck}\n{chaos.logs()}") from None
        chaos.note("executions", "all terminal")

        # the same keys again: each names its execution, none makes another
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
            for item in planned:
                again = chaos.accept(http, Planned(item.workflow, item.body, "", key=item.key))
                assert again["id"] == item.id

        try:
            check(sandbox, planned)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{chaos.logs()}") from failure
        for fault in chaos.faults:
            print(f"{fault.at:7.2f}s {fault.kind}: {fault.detail}")
        print(f"{chaos.lost} requests got no answer (the web process was down) and were sent again")


# -- the checks -----------------------------------------------------------------------------


def check(sandbox: Sandbox, planned: list[Planned]) -> None:
    executions = {
        e.id: e
        for e in Execution.objects.filter(pk__in=[p.id for p in planned]).select_related(
            "current_run"
        )
    }
    outcomes = {p.id: (p.workflow, p.expect, executions[p.id].status) for p in planned}
    wrong = {k: v for k, v in outcomes.items() if v[1] != v[2]}
    assert not wrong, f"terminal states: {wrong}; errors: " + str(
        {k: executions[k].error for k in wrong}
    )
    for item in planned:
        execution = executions[item.id]
        MUTATIONS[item.workflow](sandbox, item, execution)
        events_once(execution)
    no_mutation_twice(sandbox)
    lambda_aliases_moved_once(sandbox, planned)


def _batches(sandbox: Sandbox, execution_id: str) -> list[Any]:
    return world.batches_of(sandbox, execution_id)


def _subdomain(sandbox: Sandbox, item: Planned, execution: Execution) -> None:
    assert len(_batches(sandbox, execution.id)) == 1, item.body


def _certificate(sandbox: Sandbox, item: Planned, execution: Execution) -> None:
    made = 0 if item.expect == "failed" else 1
    assert len(certificates_of(sandbox.aws, execution.id)) == made, item.body
    assert len(_batches(sandbox, execution.id)) == made, item.body


def _added(sandbox: Sandbox, execution: Execution, concerns: int) -> None:
    [child] = Execution.objects.filter(parent_id=execution.id)
    assert child.status == "succeeded", child.error
    assert len(certificates_of(sandbox.aws, child.id)) == 1
    assert len(_batches(sandbox, child.id)) == 1
    assert len(_batches(sandbox, execution.id)) == 1
    helm = world.helm_commits(sandbox, execution.id)
    assert len(helm) == concerns == len({c["parsed"].scope for c in helm})
    assert len(world.booking_commits(sandbox, execution.id)) == 1
    events_once(child)


def _domain(sandbox: Sandbox, item: Planned, execution: Execution) -> None:
    _added(sandbox, execution, concerns=2)  # Kirby mode enabled: nginx hosts and Kirby


def _onboard(sandbox: Sandbox, item: Planned, execution: Execution) -> None:
    domain = item.body["domain"]
    zones = [z for z in sandbox.aws.route53._zones.values() if z.name.rstrip(".") == domain]
    assert len(zones) == 1, domain
    _added(sandbox, execution, concerns=1)


def _lambda(sandbox: Sandbox, item: Planned, execution: Execution) -> None:
    """Counted for all executions of a lane together (:func:`lambda_aliases_moved_once`)."""


MUTATIONS: dict[str, Callable[[Sandbox, Planned, Execution], None]] = {
    "add-subdomain": _subdomain,
    "add-certificate": _certificate,
    "add-domain": _domain,
    "onboard-domain": _onboard,
    "update-lambda-version": _lambda,
}


def events_once(execution: Execution) -> None:
    """Gapless, no key twice, and what happens once happened once."""
    events = list(OutboxEvent.objects.filter(execution_id=execution.id).order_by("sequence"))
    where = f"{execution.workflow} {execution.id}"
    assert [e.sequence for e in events] == list(range(1, len(events) + 1)), where
    assert len({e.key for e in events}) == len(events), where
    types = Counter(e.type for e in events)
    assert types["execution.accepted"] == 1, where
    assert types[f"execution.{execution.status}"] == 1, (where, types)
    succeeded = Counter(e.payload["stage"] for e in events if e.type == "stage.succeeded")
    assert set(succeeded.values()) <= {1}, (where, succeeded)


def no_mutation_twice(sandbox: Sandbox) -> None:
    """Across everything the stand-ins hold: no batch, commit or alias move twice."""
    batches = Counter(
        (b.zone_id, b.comment, repr(b.changes)) for b in sandbox.aws.route53.change_batches
    )
    assert not [b for b, n in batches.items() if n > 1], "a change batch applied twice"
    for repo in (HELM_REPO, BOOKING_REPO):
        operations = Counter(
            parsed.operation
            for commit in sandbox.github.log(repo, BRANCH)
            if (parsed := parse_message(commit["message"])) is not None
        )
        assert not [op for op, n in operations.items() if n > 1], f"a commit twice in {repo}"
    aws = sandbox.aws
    assert isinstance(aws, JournalledAws)
    moves = Counter(entry for entry in aws.alias_updates if entry[3] == 200)
    assert not [m for m, n in moves.items() if n > 1], f"an alias moved twice: {moves}"


def lambda_aliases_moved_once(sandbox: Sandbox, planned: list[Planned]) -> None:
    """Each lane's executions share one version: the first moves every function's alias once,
    the rest find it there and move nothing."""
    aws = sandbox.aws
    assert isinstance(aws, JournalledAws)
    lanes = {
        (p.body["target"], p.body["environment"], p.body["version"])
        for p in planned
        if p.workflow == "update-lambda-version"
    }
    applied = Counter((f, alias, v) for f, alias, v, status in aws.alias_updates if status == 200)
    expected = Counter(
        {
            (function, env, version): 1
            for target, env, version in lanes
            for function in FLEETS[target]
        }
    )
    assert applied == expected, f"alias moves {applied}, expected {expected}"
