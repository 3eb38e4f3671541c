"""The stage path's statements as prepared statements (``alfred.db``): prepared on the
server when on, not at all when ``ALFRED_DB_PREPARED`` is off, and several sent together
answer in place or fail together as Django's errors."""

from __future__ import annotations

import logging

import pytest
from django.db import DataError, ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from alfred.db import (
    Statement,
    columns,
    insert_statement,
    instances,
    prepared_cursor,
    row_fetched,
    statements_run,
)
from executions.models import DeliveryKey, Execution, Run, Stage
from executions.runtime.runner import Outcome, stage_execute
from tests.support.helpers import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "the prepared cursor's PREPARE/EXECUTE and generic plans on another major version"
    ),
]


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

    # then: it succeeded, and its first claim, hand-offs and last stage's end (each one
    # statement, with its rows and emission) are prepared statements of this session
    assert Execution.objects.get(pk=execution_id).status == "succeeded"
    prepared = _prepared()
    assert any("SET fence = 1," in sql for sql in prepared)  # the first claim
    assert any("WITH handing AS" in sql and "fence + 1" in sql for sql in prepared)  # hand-off
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


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT %s, %s", [1]),  # too few
        ("SELECT %(a)s", [1]),  # a sequence for named placeholders
        ("SELECT %s", {"a": 1}),  # a mapping for positional ones
        ("SELECT %(a)s, %(b)s", {"a": 1}),  # a name with no value
    ],
)
def test_a_prepared_statement_given_the_wrong_parameters_is_refused_before_it_is_sent(sql, params):
    # as psycopg refuses them: a programming error, not the database "away" the runner
    # would wait out, and nothing reaches the server
    with prepared_cursor() as cursor, pytest.raises(ProgrammingError):
        cursor.execute(sql, params)
    assert row_fetched("SELECT %s::int + %s::int", [2, 2]) == (4,)  # the connection still serves


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


def test_an_error_met_while_the_rest_are_sent_is_raised_alone_with_no_warning_of_psycopgs(
    caplog,
):
    # given: a failing statement with many behind it, so that its error comes back while
    # the rest are still being sent (psycopg then failed the pipeline's end too, and logged
    # "error ignored terminating ...: pipeline aborted" as a WARNING beside the error: the
    # web log of an acceptance that lost a race on a unique index)
    caplog.set_level(logging.WARNING)
    behind = [Statement("SELECT pg_sleep(0)") for _ in range(500)]

    for _ in range(3):
        # when
        with pytest.raises(DataError), transaction.atomic():
            statements_run([Statement("SELECT 1 / 0"), *behind])

    # then: the caller got the error; nothing else was said of it
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_new_rows_written_together_get_their_keys_and_times_as_the_orms_would(api):
    # given: two idempotency keys of an execution, not saved (an automatic key, a creation time)
    execution_id = submit(api, "test-counter", {"label": "rows"}).json()["id"]
    keys = [
        DeliveryKey(principal="p", key=f"k{i}", fingerprint="f", execution_id=execution_id)
        for i in range(2)
    ]

    # when: written by one statement
    with transaction.atomic():
        statements_run([insert_statement(keys)])

    # then: each instance holds the key and the time its row was given
    stored = {k.pk: k.created_at for k in DeliveryKey.objects.filter(principal="p")}
    assert stored == {k.pk: k.created_at for k in keys} and None not in stored
    assert not any(k._state.adding for k in keys)


def test_a_row_read_by_hand_gives_none_for_a_model_an_outer_join_did_not_find(api):
    # given: an execution, read with a run joined on nothing
    execution_id = submit(api, "test-counter", {"label": "alone"}).json()["id"]
    sql = (
        f"SELECT {columns(Execution, 'e')}, {columns(Run, 'r')}, 7 "  # noqa: S608 - our names
        "FROM executions_execution e LEFT JOIN executions_run r ON false WHERE e.id = %s"
    )

    # when
    row = row_fetched(sql, [execution_id])
    assert row is not None
    (execution, run), rest = instances(row, Execution, Run)

    # then: the execution as the ORM reads it, no run, and what follows the models
    assert execution == Execution.objects.get(pk=execution_id)
    assert execution.input == {"label": "alone", "steps": 5}  # canonical: defaults filled in
    assert run is None
    assert list(rest) == [7]


def test_rows_of_several_models_go_in_one_statement_and_each_gets_its_key():
    # given: an execution, its run, two stages and a key of it: new, naming one another
    execution = Execution(
        workflow="test-counter", input={}, logical_identity="one-statement", principal="p"
    )
    run = Run(execution=execution, number=1, kind="initial")
    execution.current_run_id = run.id
    stages = [Stage(run=run, name=name, position=i) for i, name in enumerate(["a", "b"])]
    key = DeliveryKey(principal="p", key="k", fingerprint="f", execution_id=execution.id)

    # when: written by one statement
    with transaction.atomic(), CaptureQueriesContext(connection) as written:
        statements_run([insert_statement([execution, run, *stages, key])])

    # then: each row is stored, each instance holds its key (the automatic ones as given)
    assert len(written.captured_queries) == 1
    assert Stage.objects.get(run=run, name="b").pk == stages[1].pk
    assert [s.position for s in Stage.objects.filter(pk__in=[s.pk for s in stages])] == [0, 1]
    assert isinstance(key.pk, int) and DeliveryKey.objects.get(pk=key.pk).key == "k"
    assert Execution.objects.get(pk=execution.pk).current_run_id == run.id
    assert not any(o._state.adding for o in [execution, run, *stages, key])
