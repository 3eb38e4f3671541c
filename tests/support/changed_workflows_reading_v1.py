"""add-subdomain version 2 (tests/support/changed_workflows.py) declaring version 1's stage
outputs compatible (``outputs_compatible_with``) without keeping version 1 to run: a
continuation under it carries version 1's plan over."""

from tests.support.changed_workflows import V1, AddSubdomainV2


class AddSubdomainV2ReadingV1(AddSubdomainV2):
    outputs_compatible_with = (1,)


WORKFLOWS = [AddSubdomainV2ReadingV1(V1.stage_code)]
