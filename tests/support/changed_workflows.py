"""A deploy that changed add-subdomain, for the versioned-runs tests: a worker started with
``ALFRED_EXTRA_WORKFLOWS=tests.support.engine_workflows,tests.support.changed_workflows`` (or
``…,tests.support.changed_workflows_keeping_v1``) runs this add-subdomain instead of the one the
execution started under: version 2, with a stage more between apply and verify."""

from __future__ import annotations

from typing import Any

from executions.runtime.stage import StageContext
from workflows import add_subdomain
from workflows.add_subdomain.input import AddSubdomain

V1 = add_subdomain.workflow


class AddSubdomainV2(AddSubdomain):
    version = 2
    stages = (*AddSubdomain.stages[:-1], "announce", AddSubdomain.stages[-1])

    def stage_announce(self, ctx: StageContext) -> dict[str, Any]:
        return {"announced": True}


class AddSubdomainV2KeepingV1(AddSubdomainV2):
    previous = (V1,)


# Only version 2: a run started under version 1 has no definition to wake under.
WORKFLOWS = [AddSubdomainV2(V1.stage_code)]
