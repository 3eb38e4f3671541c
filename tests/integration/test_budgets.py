"""Rate budgets (docs/providers.md, "Rate budgets"): every request to a provider draws from a
budget per provider and account that every process shares, on the real Redis. The AWS stand-in
meters requests as AWS does (Route53: five a second per account) and refuses the rest as AWS
refuses them; what it refused is counted in its own journal, not in Alfred's bookkeeping."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from django.conf import settings as django_settings
from django.db import connection

from alfred.budgets import RedisBudget
from executions import drift as watch
from executions.models import DriftWatch, Execution, Run, Stage
from providers.budgets import Rate, budget_install, budget_patient
from providers.config import ProviderConfig
from providers.errors import Throttled
from providers.sandbox.aws import RATES, AwsStandIn
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.support import aws_world
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Route53's at three a second against the stand-in's five: a request is drawn before it is
# sent, and on a loaded machine one process's send can come late, bunched with the next
# process's; make test once met one refusal at four a second.
BUDGETS = "aws.route53=3/s,aws.acm=8/s,aws.lambda=12/s"
ON_REDIS_7 = pytest.mark.server("the budgets' scripts on Redis 7's clock, over TCP")


def _redis_url() -> str:
    return str(django_settings.CACHES["default"]["LOCATION"])


def _draws(url: str, key: str, count: int, out: Any) -> None:
    budget = RedisBudget(url, {"test": Rate(10.0, 10)}, longest=30.0)
    for _ in range(count):
        budget.draw("test", key, "Op")
        out.put(time.time())


@ON_REDIS_7
def test_two_processes_draw_from_one_budget():
    key = uuid.uuid4().hex
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    start = time.time()
    drawers = [context.Process(target=_draws, args=(_redis_url(), key, 15, out)) for _ in range(2)]
    for drawer in drawers:
        drawer.start()
    for drawer in drawers:
        drawer.join(30)
    times = sorted(out.get(timeout=5) - start for _ in range(30))
    # ten at once (a second's worth), then one every 0.1 s across both processes: never more
    # than the burst and a second's rate in any second (a loaded machine only adds delay)
    assert times[-1] >= 1.9, times
    assert all(sum(1 for t in times if at <= t < at + 1.0) <= 10 + 10 + 1 for at in times), times


@ON_REDIS_7
def test_a_draw_that_would_wait_too_long_is_refused_and_reserves_nothing():
    key = uuid.uuid4().hex
    budget = RedisBudget(_redis_url(), {"test": Rate(1.0, 2)}, longest=0.2)
    assert budget.draw("test", key, "Op") == 0.0
    assert budget.draw("test", key, "Op") == 0.0
    with pytest.raises(Throttled) as refused:  # the third would wait about 1 s: past 0.2
        budget.draw("test", key, "Op")
    assert 0.2 < refused.value.details["retry_after_seconds"] <= 1.0
    time.sleep(1.0)
    assert budget.draw("test", key, "Op") == 0.0  # the refusal reserved no slot
    with budget_patient():  # a recovery read waits its turn rather than be refused
        assert 0.2 < budget.draw("test", key, "Op") <= 1.0


@ON_REDIS_7
def test_a_provider_s_own_wait_closes_the_budget_for_every_process():
    # GitHub said to wait a second (a secondary limit's Retry-After): another process's next
    # request waits it out rather than be refused too
    key = uuid.uuid4().hex
    closing = RedisBudget(_redis_url(), {"github": Rate(10.0, 10)}, longest=30.0)
    closing.close("github", key, 1.0)
    other = RedisBudget(_redis_url(), {"github": Rate(10.0, 10)}, longest=30.0)
    started = time.monotonic()
    waited = other.draw("github", key, "GET repos")
    assert 0.5 <= waited <= 1.1 and time.monotonic() - started >= 0.5


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started(rates=RATES) as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    """Three pool processes: together they would send faster than Route53's five a second,
    so the budget, not the worker, sets the pace."""
    env = {"ALFRED_PROVIDER_BUDGETS": BUDGETS}
    with aws_world.aws_worker_pool(standin, "budgets", 3, env) as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    yield aws_world.alive(module_worker)
    quiesce(120)


def test_twenty_executions_at_once_on_three_processes_are_never_throttled(api, aws_worker, standin):
    before = standin.journal()
    started = time.monotonic()
    answers = [
        submit(
            api,
            "add-subdomain",
            {"zone": "example.com", "subdomain": f"b{n}-{uuid.uuid4().hex[:6]}"},
        )
        for n in range(20)
    ]
    ids = [answer.json()["id"] for answer in answers]

    def ended() -> bool:
        return (
            Execution.objects.filter(pk__in=ids, status__in=("succeeded", "failed")).count() == 20
        )

    wait_for(ended, timeout=120, interval=0.5)
    took = time.monotonic() - started

    assert set(Execution.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        "succeeded"
    }
    after = standin.journal()
    sent = sum(after["calls"].values()) - sum(before["calls"].values())
    assert sent >= 20 * 3  # each read its zone, sent its batch, read it back
    # AWS refused none of them: the budget spaced them under Route53's five a second (the
    # stand-in's seeding, from the test's own unbudgeted client, may have been refused before)
    assert after["throttled"] == before["throttled"]
    assert took >= (sent - 3) / 3.0 * 0.9  # at the budget's three a second: it had to wait


def test_the_stand_in_refuses_what_goes_past_aws_s_rate(standin):
    # a client that draws from no budget and does not retry: AWS's own answer reaches it
    route53 = boto3.client(
        "route53",
        endpoint_url=standin.url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )
    refused = []
    for _ in range(20):
        try:
            route53.list_hosted_zones()
        except ClientError as exc:
            refused.append(exc.response["Error"]["Code"])
    assert refused and set(refused) == {"Throttling"}
    assert standin.journal()["throttled"]["route53"] >= len(refused)


def _cloned(execution: Execution, count: int) -> None:
    """``count`` succeeded executions like ``execution`` (its input, its runs' recorded
    outputs), each for a name of its own: load for the watch, not work anyone did."""
    stages = list(
        Stage.objects.filter(run__execution=execution).values("name", "output", "position")
    )
    for n in range(count):
        name = f"w{n}-{uuid.uuid4().hex[:6]}.example.com"
        clone = Execution.objects.create(
            workflow=execution.workflow,
            input={**execution.input, "subdomain": name},
            logical_identity=uuid.uuid4().hex,
            principal=execution.principal,
            status="succeeded",
            finished_at=execution.finished_at,
        )
        run = Run.objects.create(execution=clone, number=1, status="succeeded")
        Stage.objects.bulk_create(
            Stage(
                run=run,
                name=s["name"],
                position=s["position"],
                status="succeeded",
                output=s["output"],
            )
            for s in stages
        )


def test_two_drift_watches_over_sixty_executions_are_never_throttled(
    api, aws_worker, standin, settings
):
    # given: sixty succeeded executions to read again, Route53 metering six a second, and two
    # watches at once drawing from one budget of five a second (two watches unbudgeted read
    # about ten a second on this machine: without the budget the stand-in would refuse some)
    first = submit(
        api, "add-subdomain", {"zone": "example.com", "subdomain": f"w-{uuid.uuid4().hex[:6]}"}
    )
    execution = wait_for(
        lambda: (e := Execution.objects.get(pk=first.json()["id"])).status == "succeeded" and e,
        timeout=60,
        interval=0.5,
    )
    _cloned(execution, 59)
    standin.limit("route53", 6.0)
    settings.ALFRED_PROVIDERS = ProviderConfig.from_env(aws_world.environ(standin))
    settings.ALFRED_DRIFT_PERIOD_SECONDS = 3600.0
    budget_install(RedisBudget(_redis_url(), {"aws.route53": Rate(5.0, 5)}, longest=30.0))
    try:
        while watch.watch_enrol():
            pass
        DriftWatch.objects.update(due_at=watch.db_now())
        before = standin.journal()
        ticks: list[watch.Tick] = []

        errors: list[BaseException] = []

        def beat() -> None:
            try:
                ticks.append(watch.drift_watch_tick(budget=120))
            except BaseException as exc:  # the assertion below shows it
                errors.append(exc)
            finally:
                connection.close()

        beats = [threading.Thread(target=beat) for _ in range(2)]
        started = time.monotonic()
        for thread in beats:
            thread.start()
        for thread in beats:
            thread.join()
        took = time.monotonic() - started
    finally:
        budget_install(None)
        standin.limit("route53", RATES["route53"])

    # then: every one checked once (the worker's own beat may have taken a few: a third
    # watch, sharing the claims and the budget), none refused by AWS, at the budget's pace
    assert errors == []
    wait_for(lambda: not DriftWatch.objects.filter(checks=0).exists(), timeout=60, interval=0.5)
    assert sum(DriftWatch.objects.values_list("checks", flat=True)) == 60
    after = standin.journal()
    reads = after["calls"]["ListResourceRecordSets"] - before["calls"]["ListResourceRecordSets"]
    assert reads >= 60  # one each (a read botocore had to send again would be one more)
    assert after["throttled"] == before["throttled"]
    assert took >= (sum(t.checked for t in ticks) - 5) / 5 * 0.9
