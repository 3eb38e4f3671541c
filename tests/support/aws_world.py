"""What the workflow tests against the AWS stand-in share: the stand-in seeded like `make run`
(example.com with an apex A+AAAA alias, the Lambda fleets), a boto3 client on it, and a real
Celery worker whose providers are the stand-in's.

A worker takes seconds to start, longer than most runs: a test module starts one for all its
tests (:func:`aws_worker`), after the test database exists (``django_db_setup``), and starts
it again should a test have killed it."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3
import pytest

from providers.sandbox.aws import AwsStandIn, seed_aws
from providers.sandbox.server import Request, Response
from tests.conftest import WorkerProcess, wait_for

REGION = "us-east-1"
_ALIAS_PATH = re.compile(r"/functions/(?P<function>[^/]+)/aliases/(?P<alias>[^/]+)/?$")


class JournalledAws(AwsStandIn):
    """The AWS stand-in with a journal of the UpdateAlias requests that reached its Lambda
    backend: ``(function, alias, version asked for, HTTP status)``, a refused one included."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alias_updates: list[tuple[str, str, str, int]] = []

    def _moto(self, request: Request, service: str, region: str, operation: str) -> Response:
        response = super()._moto(request, service, region, operation)
        if operation == "UpdateAlias":
            where = _ALIAS_PATH.search(request.path)
            body = json.loads(request.body or b"{}")
            if where is not None:
                self.alias_updates.append(
                    (
                        where["function"],
                        where["alias"],
                        str(body.get("FunctionVersion")),
                        response.status,
                    )
                )
        return response

    def applied(self, since: int = 0) -> Counter[str]:
        """The alias updates Lambda applied, by function, since journal entry ``since``."""
        return Counter(f for f, _, _, status in self.alias_updates[since:] if status == 200)


@contextmanager
def standin_started(kind: type[AwsStandIn] = AwsStandIn, **options: Any) -> Iterator[AwsStandIn]:
    """The stand-in (``kind``: a subclass with journals of its own), started and seeded."""
    aws = kind(**{"route53_change_delay": 0.3, **options}).start()
    seed_aws(aws.url)
    try:
        yield aws
    finally:
        aws.stop()


def client(standin: AwsStandIn, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=standin.url,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def zone_id_of(route53: Any, zone: str = "example.com") -> str:
    zones = route53.list_hosted_zones_by_name(DNSName=zone)["HostedZones"]
    return str(zones[0]["Id"]).removeprefix("/hostedzone/")


def ready(worker: WorkerProcess) -> WorkerProcess:
    wait_for(lambda: "ready." in worker.output(), timeout=60, interval=0.1)
    return worker


def environ(standin: AwsStandIn) -> dict[str, str]:
    """The environment that points Alfred's providers at the stand-in (a worker's; in this
    process, ``ProviderConfig.from_env(environ(standin))`` as ``settings.ALFRED_PROVIDERS``)."""
    return {
        "ALFRED_PROVIDERS": "sandbox",
        "AWS_ENDPOINT_URL": standin.url,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }


@contextmanager
def aws_worker(standin: AwsStandIn, name: str, **env: str) -> Iterator[WorkerProcess]:
    """A started (and ready) worker on the stand-in's providers, with ``env`` on top."""
    with aws_worker_pool(standin, name, 1, env) as worker:
        yield worker


@contextmanager
def aws_worker_pool(
    standin: AwsStandIn, name: str, concurrency: int, env: Mapping[str, str]
) -> Iterator[WorkerProcess]:
    """As :func:`aws_worker`, with ``concurrency`` pool processes."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**environ(standin), **env}.items():
            patch.setenv(key, value)
        worker = WorkerProcess(name)
        try:
            yield ready(worker.start(concurrency=concurrency))
        finally:
            worker.stop()


def alive(worker: WorkerProcess) -> WorkerProcess:
    """``worker``, started again (same environment) if a test killed all of it."""
    assert worker.proc is not None
    if worker.proc.poll() is not None:
        ready(worker.start())
    return worker
