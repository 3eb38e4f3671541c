"""The deploy gate, ``manage.py alfred_deploy_check``, as the migration steps run it: a process
of its own on the new code (here: add-subdomain version 2 from tests/support/changed_workflows,
with or without version 1 kept), against the rows the old code wrote, judged by its exit status
and what it prints (docs/deploy.md, "The deploy gate")."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from alfred.principals import cli_caller
from executions.acceptance import execution_accept
from executions.controls import execution_cancel
from executions.models import Run
from tests.conftest import ROOT, subprocess_database_url
from tests.support.helpers import paused_on_a_plan

pytestmark = pytest.mark.django_db(transaction=True)

V2_ONLY = "tests.support.changed_workflows"
V2_KEEPING_V1 = "tests.support.changed_workflows_keeping_v1"


def deploy_check(deployed: str | None, *args: str, **environ: str) -> subprocess.CompletedProcess:
    """The gate as the new code runs it: ``deployed`` names the module whose add-subdomain
    replaces the one the rows were written under (None: the same code)."""
    extra = "tests.support.engine_workflows" + (f",{deployed}" if deployed else "")
    return subprocess.run(
        [sys.executable, "manage.py", "alfred_deploy_check", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "alfred.settings",
            "ALFRED_ENV": "test",
            "DATABASE_URL": subprocess_database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "ALFRED_EXTRA_WORKFLOWS": extra,
            **environ,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def paused_under_v1() -> Any:
    """An add-subdomain paused for an operator's approval, its run recorded under version 1."""
    name = f"gate-{uuid.uuid4().hex[:8]}.example.com"
    accepted = execution_accept(
        workflow_name="add-subdomain",
        body={"zone": "example.com", "subdomain": name},
        idempotency_key=f"key-{uuid.uuid4()}",
        caller=cli_caller("ops"),
    )
    execution = accepted.execution
    paused_on_a_plan(execution.id)
    run = Run.objects.get(execution_id=execution.id)
    assert run.definition == {"version": 1, "stages": ["plan", "apply", "verify"]}
    return execution


def test_a_deploy_dropping_the_version_a_paused_run_started_under_is_refused_naming_it():
    # given: an add-subdomain paused for approval under version 1
    execution = paused_under_v1()

    # when: the gate runs on code with add-subdomain version 2 only
    done = deploy_check(V2_ONLY)

    # then: refused (exit status 1), naming the execution, its run's version and the ways on
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{execution.id} add-subdomain paused: run 1 started under version 1" in done.stderr
    assert "this code: version 2, without version 1" in done.stderr
    for way in ("drain", "`previous`", "--allow-stranded REASON"):
        assert way in done.stderr
    assert "refused: 1 active execution(s) would be stranded" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_deploy_keeping_the_version_or_changing_nothing_goes_on():
    # given: an add-subdomain paused under version 1
    paused_under_v1()

    # when / then: version 2 keeping version 1 in previous, or the same code, pass
    for deployed in (V2_KEEPING_V1, None):
        done = deploy_check(deployed)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("deploy check: 1 active execution(s), every run served")
        assert "warning" not in done.stderr


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_the_override_goes_on_and_still_names_what_it_strands(how):
    # given: an add-subdomain paused under version 1
    execution = paused_under_v1()

    # when: the gate runs on version 2 only, overridden with a reason
    if how == "flag":
        done = deploy_check(V2_ONLY, "--allow-stranded", "INC-7: v1 is broken")
    else:
        done = deploy_check(V2_ONLY, ALFRED_DEPLOY_ALLOW_STRANDED="INC-7: v1 is broken")

    # then: it goes on (exit status 0), saying what it strands and why it went on
    assert done.returncode == 0, done.stderr
    assert execution.id in done.stderr
    assert "going on: --allow-stranded / ALFRED_DEPLOY_ALLOW_STRANDED given (INC-7" in done.stderr


def test_runs_that_ended_strand_nothing_but_the_dropped_version_is_warned_of():
    # given: the add-subdomain that was paused under version 1 is canceled (terminal)
    execution = paused_under_v1()
    execution_cancel(execution_id=execution.id, caller=cli_caller("ops"), reason="done with it")

    # when: the gate runs on version 2 only
    done = deploy_check(V2_ONLY)

    # then: nothing is stranded, it goes on; it warns that the old web's runs would fail
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deploy check: 0 active execution(s)")
    assert "warning: add-subdomain's newest run was recorded under version 1" in done.stderr


def test_an_empty_database_before_its_first_migration_passes():
    # given: a database with no table at all (a first install runs the gate before migrate)
    database = f"alfred_gate_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{database}"')
    try:
        head, sep, query = subprocess_database_url().partition("?")
        empty = f"{head[: head.rfind('/')]}/{database}{sep}{query}"
        # when
        done = deploy_check(V2_ONLY, DATABASE_URL=empty)
        # then
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("deploy check: 0 active execution(s)")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE "{database}"')
