"""Concurrent duplicates serialize on unique constraints: exactly one execution, every caller
gets it. Threads use their own database connections (Django opens one per thread)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from executions.models import DeliveryKey, Execution, OutboxEvent, Run
from tests.conftest import subprocess_database_url
from tests.support.helpers import CERTIFICATE, LAMBDA, SUBDOMAIN, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "duplicate acceptances serialized by unique indexes on another major version"
    ),
]


def _concurrently(token: str, calls: list[tuple[str, dict, str]]) -> list:
    barrier = threading.Barrier(len(calls))
    backends: set[int] = set()

    def call(args: tuple[str, dict, str]):
        workflow, body, key = args
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            with connection.cursor() as cursor:  # open this thread's own connection first
                cursor.execute("SELECT pg_backend_pid()")
                backends.add(cursor.fetchone()[0])
            barrier.wait(timeout=30)
            return submit(client, workflow, body, key=key)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        responses = list(pool.map(call, calls))
    assert len(backends) == len(calls), "each caller must have its own connection"
    return responses


def test_fifty_concurrent_posts_of_one_key_make_one_execution(integration_token):
    # when
    responses = _concurrently(integration_token, [("add-subdomain", SUBDOMAIN, "same")] * 50)

    # then
    assert [r.status_code for r in responses] == [202] * 50
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert Execution.objects.count() == 1
    assert DeliveryKey.objects.count() == 1
    assert Run.objects.count() == 1
    assert OutboxEvent.objects.count() == 1
    assert sum(r.json()["acceptance"]["replayed"] is False for r in responses) == 1


def test_concurrent_keys_for_one_operation_make_one_execution(integration_token):
    calls = [("add-certificate", CERTIFICATE, f"key-{i}") for i in range(20)]

    responses = _concurrently(integration_token, calls)

    assert {r.status_code for r in responses} == {202}
    assert len({r.json()["id"] for r in responses}) == 1
    assert Execution.objects.count() == 1
    assert DeliveryKey.objects.count() == 20
    outcomes = sorted(r.json()["acceptance"]["outcome"] for r in responses)
    assert outcomes == ["created"] + ["reused"] * 19


def test_concurrent_conflicting_versions_let_exactly_one_fleet_version_in(integration_token):
    calls = [
        ("update-lambda-version", {**LAMBDA, "version": str(v)}, f"v-{v}") for v in range(40, 50)
    ]

    responses = _concurrently(integration_token, calls)

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] + [409] * 9
    assert Execution.objects.count() == 1
    losers = [r.json() for r in responses if r.status_code == 409]
    winner = Execution.objects.get()
    assert {p["code"] for p in losers} == {"lane_conflict"}
    assert {p["execution"] for p in losers} == {winner.id}


def test_a_replay_takes_no_lock_on_the_execution(integration_token):
    # given: an accepted execution, its row locked by another transaction (a stage's claim)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {integration_token}")
    execution_id = submit(client, "add-subdomain", SUBDOMAIN, key="k-1").json()["id"]
    holder = psycopg.connect(subprocess_database_url())
    try:
        holder.execute(
            f"SELECT 1 FROM {Execution._meta.db_table} WHERE id = %s FOR UPDATE",  # noqa: S608
            [execution_id],
        )
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a wait for that lock fails the request

        # when: the same key again
        response = submit(client, "add-subdomain", SUBDOMAIN, key="k-1")
    finally:
        holder.close()

    # then: answered from the key, without waiting for the row
    assert response.status_code == 202
    assert response["Idempotent-Replayed"] == "true"
    assert response.json()["id"] == execution_id
