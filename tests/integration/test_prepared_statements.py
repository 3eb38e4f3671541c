"""The stage path's statements as prepared statements (``alfred.db``): prepared on the
server when on, not at all when ``ALFRED_DB_PREPARED`` is off, and several sent together
answer in place or fail together as Django's errors."""

from __future__ import annotations

import pytest
from django.db import DataError, connection, transaction
from rest_framework.test import APIClient

from alfred.db import Statement, statements_run
from executions.engine.runner import Outcome, stage_execute
from executions.models import Execution
from tests.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _run_to_the_end(api: APIClient, label: str) -> str:
    body = submit(api, "test-counter", {"label": label, "steps": 1}).json()
    connection.close()  # a fresh session: only this run's statements can be prepared in it
    assert stage_execute(body["current_run"]["id"], "plan", "test@here:0:1") is Outcome.STOP
    return str(body["id"])


def test_a_stage_path_prepares_its_statements_on_the_server(api):
    # when: a run goes through its stages in this process
    execution_id = _run_to_the_end(api, "prepared")

    # then: it succeeded, and its locked read, rows, emission and terminal statement are
    # prepared statements of this session
    assert Execution.objects.get(pk=execution_id).status == "succeeded"
    prepared = _prepared()
    assert any("FOR UPDATE OF e, r" in sql for sql in prepared)  # the locked read
    assert any("INSERT INTO executions_outboxevent" in sql for sql in prepared)  # the emission
    assert any("fence = fence + 1" in sql for sql in prepared)  # the terminal transition


def test_with_prepared_statements_off_the_stage_path_prepares_nothing(api, settings):
    # given: prepared statements off (a transaction-mode pooler that cannot keep them)
    settings.ALFRED_DB_PREPARED = False

    # when: a run goes through its stages in this process
    execution_id = _run_to_the_end(api, "unprepared")

    # then: it succeeded all the same, and nothing was prepared in the session
    assert Execution.objects.get(pk=execution_id).status == "succeeded"
    assert _prepared() == []


def test_statements_sent_together_answer_each_in_its_place():
    # when: statements travel together, with gaps where a caller had nothing to send
    with transaction.atomic():
        answers = statements_run(
            [
                Statement("SELECT 1"),
                None,
                Statement("SELECT %s::int + 1", [1], lambda rows: rows[0][0]),
            ]
        )

    # then: each answer is its own statement's, read its own way; None stays None
    assert answers == [[(1,)], None, 2]


def test_statements_sent_together_fail_together_as_djangos_error():
    # when: the second of three statements sent together fails
    with pytest.raises(DataError), transaction.atomic():
        statements_run(
            [
                Statement("SELECT set_config('alfred.test', 'first', true)"),
                Statement("SELECT 1 / 0"),
                Statement("SELECT set_config('alfred.test', 'third', true)"),
            ]
        )

    # then: the error is Django's, the transaction rolled back whole (the setting was local
    # to it), and the connection serves the next statement
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('alfred.test', true)")
        assert cursor.fetchone()[0] in (None, "")
