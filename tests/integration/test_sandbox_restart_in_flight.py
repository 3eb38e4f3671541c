"""An add-domain in flight across a restart of `make run`: a real Celery worker, real
PostgreSQL and Redis, and the sandbox; while the execution waits on Route53, the worker and
the sandbox stop and start again in `make run`'s order (the sandbox first, on its directory
and ports, then the worker). It must find the zone and the change it recorded, and end as it
would have without the restart, leaving its lane free."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from executions.models import Execution
from lanes.models import Lane, LaneState
from providers.sandbox.stack import Ports, Sandbox
from tests.conftest import wait_for
from tests.integration.test_add_domain import terminal
from tests.support import platform_world as world
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]

# Long enough that the change is still PENDING when the sandbox comes back.
DELAYS = {**world.DELAYS, "route53_change_delay": 3.0}


def test_an_add_domain_in_flight_survives_a_restart_of_make_run(api, tmp_path: Path):
    # given: an add-domain whose alias batch Route53 has applied, not yet INSYNC
    root = tmp_path / "sandbox"
    sandbox = Sandbox(root=root, **DELAYS).start()
    ports = Ports(aws=sandbox.aws.port, github=sandbox.github.port, argocd=sandbox.argocd.port)
    try:
        with world.platform_worker(sandbox, "before-restart"):
            domain = f"r{uuid.uuid4().hex[:8]}.example.com"
            body = submit(api, "add-domain", {"domain": domain}).json()
            [batch] = wait_for(lambda: world.batches_of(sandbox, body["id"]), timeout=60)

        # when: `make run` stops and starts again: the sandbox on its directory and ports,
        # then a worker
        sandbox.stop()
        sandbox = Sandbox(root=root, ports=ports, **DELAYS).start()
        with world.platform_worker(sandbox, "after-restart"):
            execution = terminal(body["id"], timeout=120)
            # The lane is handed over after the terminal transition commits, by the worker
            # (beat is the guarantee): read it before this worker stops, not in between.
            lane_free = wait_for(
                lambda: Lane.objects.get(key="aws-infrastructure").state == LaneState.FREE,
                timeout=30,
            )
    finally:
        sandbox.stop()

    # then: it succeeded on the change it had made (one batch, no second one), and the lane
    # is free for the next
    assert execution.status == "succeeded", execution.error
    assert [b.change_id for b in world.batches_of(sandbox, body["id"])] == [batch.change_id]
    children = Execution.objects.filter(parent_id=execution.id)
    assert [c.status for c in children] == ["succeeded"]
    assert lane_free
