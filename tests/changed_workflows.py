"""A deploy that changed add-subdomain, for the versioned-runs tests: a worker started with
``ALFRED_EXTRA_WORKFLOWS=tests.engine_workflows,tests.changed_workflows`` (or
``…,tests.changed_workflows_keeping_v1``) runs this add-subdomain instead of the one the
execution started under: version 2, with a stage more between apply and verify."""

from __future__ import annotations

from typing import Any

from executions.workflows import add_subdomain
from executions.workflows.add_subdomain.input import AddSubdomain

V1 = add_subdomain.workflow


class AddSubdomainV2(AddSubdomain):
    version = 2
    stages = (*AddSubdomain.stages[:-1], "announce", AddSubdomain.stages[-1])

    def stage_announce(self, ctx: Any) -> dict[str, Any]:
        return {"announced": True}


class AddSubdomainV2KeepingV1(AddSubdomainV2):
    previous = (V1,)


# Only version 2: a run started under version 1 has no definition to wake under.
WORKFLOWS = [AddSubdomainV2(V1.stage_code)]
