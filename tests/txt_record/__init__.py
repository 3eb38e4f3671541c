"""set-txt-record: a sixth workflow, written as docs/writing-a-workflow.md tells a platform
team to write one, and kept under ``tests/`` to prove that guide: nothing outside this package
was edited to add it. Its test (``test_txt_record.py``) registers it — in its own process with
``executions.catalog.workflow_register`` and in the worker it starts through
``ALFRED_EXTRA_WORKFLOWS=tests.txt_record``, which reads :data:`WORKFLOWS` — and runs it
through the API, Server-Sent Events, the admin, the commands, an approval, a rollback and a
dry run against the AWS stand-in.

It sets one TXT record (a domain-verification token, say) at a name inside an existing hosted
zone: ``plan`` reads the name, ``apply`` writes it — after an operator approves the exact plan
when it would replace values someone else put there — and ``verify`` reads it back. The batch
is sent through the kit (``workflows.steps.route53.send_and_wait``), so its receipt and its
compensation (the batch's exact undo, refused as ``drifted`` if the record changed since) are
the kit's.
"""

from tests.txt_record import stages
from tests.txt_record.input import SetTxtRecord

workflow = SetTxtRecord(stages)

# What ALFRED_EXTRA_WORKFLOWS registers of this module.
WORKFLOWS = [workflow]
