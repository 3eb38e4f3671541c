"""factory_boy factories for the *given* part of tests. Executions that a test submits go
through the API or ``execution_accept``; these build surrounding state directly."""

from __future__ import annotations

import factory

from executions.catalog import workflow_get
from executions.identity import logical_identity
from executions.models import Execution, ExecutionStatus, Run, RunKind, Stage


class ExecutionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Execution

    workflow = "add-subdomain"
    input = factory.LazyAttribute(
        lambda o: workflow_get(o.workflow).canonicalize(
            {"zone": "example.com", "subdomain": f"svc{o.number}"}
        )
    )
    logical_identity = factory.LazyAttribute(lambda o: logical_identity(o.workflow, o.input))
    principal = "token:factory"
    status = ExecutionStatus.QUEUED

    class Params:
        # (not ``factory_parent``: factory_boy's own name, which made every input "svc")
        number = factory.Sequence(lambda n: n)


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    execution = factory.SubFactory(ExecutionFactory)
    number = 1
    kind = RunKind.INITIAL


class StageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Stage

    run = factory.SubFactory(RunFactory)
    name = "plan"
    position = 0
