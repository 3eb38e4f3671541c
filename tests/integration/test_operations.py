"""What operators rely on: health endpoints, tokens, migrations, production settings."""

from __future__ import annotations

import getpass
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from alfred.models import ApiToken

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_healthz_and_readyz_answer(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_away(client, settings):
    from alfred.celery import app

    # broker_write_url: Celery lets a CELERY_BROKER_URL in the environment beat broker_url.
    app.conf.update(broker_write_url="redis://127.0.0.1:1/0")
    try:
        response = client.get("/readyz")
    finally:
        app.conf.update(broker_write_url=None)

    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["checks"]["broker"].startswith("error")
    assert response.json()["checks"]["database"] == "ok"


@pytest.mark.django_db(transaction=True)
def test_the_benchmarks_take_the_secret_the_token_command_prints():
    # (the benchmarks create their tokens with the command in a process of their own)
    from django.conf import settings

    from bench.stack import bench_token
    from tests.conftest import subprocess_database_url

    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "ALFRED_ENV": "test",
    }
    secret = bench_token(env, "integration")

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/executions").status_code == 200


@pytest.mark.django_db
def test_a_token_is_printed_once_stored_hashed_and_usable():
    out = io.StringIO()
    call_command(
        "alfred_token",
        "create",
        "--name",
        "ci",
        "--role",
        "operator",
        stdout=out,
        stderr=io.StringIO(),
    )
    sentence, raw = out.getvalue().splitlines()
    assert sentence.endswith("store it now, it is shown once:")

    token = ApiToken.objects.get(name="ci")
    assert raw.startswith("alf_") and raw not in (token.digest, token.prefix)
    assert token.role == "operator"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/audit").status_code == 200

    listing = io.StringIO()
    call_command("alfred_token", "list", stdout=listing)
    assert "ci\toperator" in listing.getvalue() and raw not in listing.getvalue()

    call_command("alfred_token", "revoke", "--name", "ci", stdout=io.StringIO())
    assert client.get("/api/v1/audit").status_code == 401


@pytest.mark.django_db
def test_there_are_no_missing_migrations():
    call_command("makemigrations", "--check", "--dry-run", stdout=io.StringIO())


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ALFRED_", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


PRODUCTION = {
    "ALFRED_ENV": "production",
    "ALFRED_SECRET_KEY": "k3Yq7-" + "x9Lp2Vb8Nw4Rt6Zc1Md5Hs0Jf3Gk7Qa" * 2,
    "ALFRED_PUBLIC_URL": "https://alfred.example.com",
    "DATABASE_URL": "postgresql://alfred:secret@db.internal:5432/alfred",
    "CELERY_BROKER_URL": "redis://broker.internal:6379/0",
}


@pytest.mark.slow  # manage.py in a process of its own
@pytest.mark.parametrize("trust_proxy", ["0", "1"])
def test_production_settings_pass_check_deploy(trust_proxy):
    env = {**PRODUCTION, "ALFRED_TRUST_PROXY_HEADERS": trust_proxy}
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **env)

    assert result.returncode == 0, result.stdout + result.stderr


def _setting(name: str, **env: str) -> str:
    code = f"from django.conf import settings; print(repr(settings.{name}))"
    result = _manage("shell", "--no-imports", "-c", code, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.slow  # manage.py in a process of its own
@pytest.mark.parametrize("environment", [PRODUCTION, {"ALFRED_ENV": "development"}])
def test_the_proxy_ssl_header_is_trusted_only_when_asked(environment):
    assert _setting("SECURE_PROXY_SSL_HEADER", **environment) == "None"
    assert _setting(
        "SECURE_PROXY_SSL_HEADER", **environment, ALFRED_TRUST_PROXY_HEADERS="1"
    ) == repr(("HTTP_X_FORWARDED_PROTO", "https"))


@pytest.mark.slow  # manage.py in a process of its own
@pytest.mark.parametrize("seconds", ["0.25", "1.5", "0"])
def test_a_beat_interval_django_celery_beat_cannot_keep_is_refused(seconds):
    # its schedule is kept in whole seconds: 0.25 would be stored as 0, a scan sent in a loop
    result = _manage("check", ALFRED_TIMER_SCAN_SECONDS=seconds)

    assert result.returncode != 0
    assert f"ALFRED_TIMER_SCAN_SECONDS: whole seconds, at least 1 (not {seconds})" in (
        result.stderr
    )


@pytest.mark.slow  # manage.py in a process of its own
def test_the_cache_is_the_brokers_redis():
    assert _setting("CACHES['default']['LOCATION']", **PRODUCTION) == repr(
        PRODUCTION["CELERY_BROKER_URL"]
    )


@pytest.mark.parametrize(
    ("broker", "cache"),
    [
        ("redis://redis:6379/0", "redis://redis:6379/0"),
        ("rediss://:pw@redis:6380/2", "rediss://:pw@redis:6380/2"),
        ("redis+socket:///run/alfred/redis.sock", "unix:///run/alfred/redis.sock?db=0"),
        ("redis+socket:///run/redis.sock?virtual_host=7", "unix:///run/redis.sock?db=7"),
    ],
)
def test_the_cache_url_is_the_brokers_in_redis_py_terms(broker, cache):
    from alfred.settings import _cache_url

    assert _cache_url(broker) == cache


@pytest.mark.slow  # manage.py in a process of its own
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ALFRED_SECRET_KEY": ""}, "ALFRED_SECRET_KEY"),
        ({"ALFRED_SECRET_KEY": "short"}, "ALFRED_SECRET_KEY"),
        ({"DATABASE_URL": ""}, "DATABASE_URL"),
        ({"CELERY_BROKER_URL": ""}, "CELERY_BROKER_URL"),
        ({"ALFRED_DEBUG": "1"}, "ALFRED_DEBUG"),
        ({"ALFRED_PUBLIC_URL": "http://alfred.example.com"}, "https://"),
        ({"ALFRED_PROVIDERS": "sandbox"}, "ALFRED_PROVIDERS=sandbox"),
        ({"ALFRED_ALLOWED_HOSTS": "*"}, "wildcard ALFRED_ALLOWED_HOSTS"),
        ({"ALFRED_ALLOWED_HOSTS": "alfred.example.com,*.example.com"}, "wildcard"),
        ({"ALFRED_ALLOWED_HOSTS": "."}, "wildcard ALFRED_ALLOWED_HOSTS"),
    ],
)
def test_production_refuses_insecure_defaults(change, message):
    result = _manage("check", **{**PRODUCTION, **change})

    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.slow  # manage.py in a process of its own
def test_the_demo_bootstrap_refuses_to_run_in_production():
    result = _manage("alfred_bootstrap", **PRODUCTION)

    assert result.returncode != 0
    assert "development demo" in result.stderr


def _token_command(*args: str) -> None:
    call_command("alfred_token", *args, stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db
def test_creating_a_second_active_token_of_one_name_is_a_clear_error():
    from django.core.management.base import CommandError

    _token_command("create", "--name", "dup", "--role", "integration")

    with pytest.raises(CommandError, match="rotate or revoke it"):
        _token_command("create", "--name", "dup", "--role", "operator")


def test_the_development_secret_key_is_random_per_state_directory(tmp_path):
    from alfred.embedded import development_secret_key

    first = development_secret_key(tmp_path / "a")
    again = development_secret_key(tmp_path / "a")
    other = development_secret_key(tmp_path / "b")

    assert first == again != other
    assert len(first) >= 50
    assert (tmp_path / "a" / "secret-key").stat().st_mode & 0o777 == 0o600


@pytest.mark.django_db
def test_the_admin_cancels_with_an_audit_entry(admin_client, api):
    from executions.models import AuditEntry, Execution
    from tests.support.helpers import SUBDOMAIN, submit

    body = submit(api, "add-subdomain", SUBDOMAIN).json()

    selected = {"action": "cancel", "_selected_action": [body["id"]]}
    asked = admin_client.post("/admin/executions/execution/", selected)
    assert asked.status_code == 200 and b'name="confirm"' in asked.content
    assert Execution.objects.get(pk=body["id"]).status == "queued"  # nothing until confirmed

    response = admin_client.post(
        "/admin/executions/execution/",
        {**selected, "confirm": "yes", "reason": "not needed"},
        follow=True,
    )

    assert response.status_code == 200
    assert Execution.objects.get(pk=body["id"]).status == "canceled"
    entry = AuditEntry.objects.get(target_id=body["id"])
    assert entry.action == "execution.cancel" and entry.actor.startswith("user:")
    assert entry.reason == "not needed"


@pytest.mark.django_db(transaction=True)  # the scheduler closes the connection it used
def test_beat_installs_the_scans_as_periodic_tasks_shown_read_only_in_the_admin(admin_client):
    from django_celery_beat.models import PeriodicTask

    from alfred.beat import LeaderScheduler
    from alfred.celery import app

    LeaderScheduler(app=app)  # what `celery beat` does when it starts

    tasks = dict(PeriodicTask.objects.values_list("name", "task"))
    assert tasks["lanes-reconcile"] == "lanes.tasks.reconcile"
    assert tasks["timers-scan"] == "executions.tasks.timers_scan"
    assert tasks["runs-recover"] == "executions.tasks.runs_recover"
    reconcile = PeriodicTask.objects.get(name="lanes-reconcile")
    page = admin_client.get(f"/admin/django_celery_beat/periodictask/{reconcile.pk}/change/")
    assert page.status_code == 200 and b"lanes.tasks.reconcile" in page.content
    assert b'name="_save"' not in page.content  # not even a superuser switches a scan off
    refused = admin_client.post(
        f"/admin/django_celery_beat/periodictask/{reconcile.pk}/change/", {"enabled": ""}
    )
    assert refused.status_code == 403 and PeriodicTask.objects.get(pk=reconcile.pk).enabled


@pytest.mark.django_db
def test_a_command_is_audited_as_the_os_user_or_the_named_actor():
    from executions.models import AuditEntry

    mine, theirs = (accepted(name) for name in ("mine", "theirs"))

    call_command("alfred_executions", "cancel", mine.id, stdout=io.StringIO())
    call_command("alfred_executions", "cancel", theirs.id, "--actor", "alice", stdout=io.StringIO())

    actors = dict(
        AuditEntry.objects.filter(action="execution.cancel").values_list("target_id", "actor")
    )
    assert actors == {mine.id: f"cli:{getpass.getuser()}", theirs.id: "cli:alice"}


@pytest.mark.django_db
def test_a_command_with_no_os_user_and_no_actor_is_refused(monkeypatch):
    from django.core.management.base import CommandError

    def nobody() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nobody)
    execution = accepted("nobody")

    with pytest.raises(CommandError, match="--actor"):
        call_command("alfred_executions", "cancel", execution.id, stdout=io.StringIO())
    execution.refresh_from_db()
    assert execution.status == "queued"


def accepted(subdomain: str) -> Any:
    from alfred.principals import cli_caller
    from executions.acceptance import execution_accept

    return execution_accept(
        workflow_name="add-subdomain",
        body={"zone": "example.com", "subdomain": subdomain, "ticket_ids": ["OPS-1"]},
        idempotency_key=subdomain,
        caller=cli_caller("integration"),
    ).execution
