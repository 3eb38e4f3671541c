"""add-subdomain version 2 (tests/support/changed_workflows.py) still serving version 1: a run
started under version 1 wakes under it."""

from tests.support.changed_workflows import V1, AddSubdomainV2KeepingV1

WORKFLOWS = [AddSubdomainV2KeepingV1(V1.stage_code)]
