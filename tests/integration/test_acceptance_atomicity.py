"""One transaction: a failure anywhere after the first insert leaves nothing behind, and an
acceptance costs a pinned number of SQL queries."""

from __future__ import annotations

import pytest
from django.db import connection

from executions.models import DeliveryKey, Execution, OutboxEvent, Run, Stage
from lanes.models import Lane, LaneWaiter
from tests.support.helpers import CERTIFICATE, SUBDOMAIN, assert_problem, libpq_trace, submit

pytestmark = pytest.mark.django_db(transaction=True)

_FAIL = """
CREATE FUNCTION alfred_test_fail() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'injected failure on %', TG_TABLE_NAME; END $$ LANGUAGE plpgsql;
"""


@pytest.fixture
def fail_on_insert():
    """Make the database refuse inserts into one table: a real failure mid-transaction."""
    tables: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(_FAIL)

    def arm(table: str) -> None:
        tables.append(table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TRIGGER alfred_test_fail BEFORE INSERT ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION alfred_test_fail()"
            )

    yield arm
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DROP TRIGGER IF EXISTS alfred_test_fail ON {table}")
        cursor.execute("DROP FUNCTION alfred_test_fail()")


def _nothing_left() -> None:
    for model in (Execution, Run, Stage, DeliveryKey, OutboxEvent, LaneWaiter):
        assert not model.objects.exists(), model.__name__
    assert not Lane.objects.exclude(state="free").exists()


@pytest.mark.parametrize(
    "table",
    [
        Run._meta.db_table,  # right after the execution row
        Stage._meta.db_table,
        DeliveryKey._meta.db_table,
        OutboxEvent._meta.db_table,  # the last insert
    ],
)
def test_a_failure_after_the_first_insert_leaves_no_row(api, fail_on_insert, table):
    fail_on_insert(table)
    api.raise_request_exception = False

    response = submit(api, "add-certificate", CERTIFICATE, key="k-1")

    assert_problem(response, 500, "internal_error")
    _nothing_left()


def test_after_a_failed_attempt_the_same_key_is_accepted(api, fail_on_insert):
    fail_on_insert(OutboxEvent._meta.db_table)
    api.raise_request_exception = False
    submit(api, "add-subdomain", SUBDOMAIN, key="k-1")
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER alfred_test_fail ON {OutboxEvent._meta.db_table}")

    response = submit(api, "add-subdomain", SUBDOMAIN, key="k-1")

    assert response.status_code == 202
    assert response.json()["acceptance"]["replayed"] is False


# The number of SQL queries one acceptance makes, authentication included. The transaction
# (BEGIN and COMMIT counted): the key lookup and the identity lookup (FOR UPDATE), lane
# create-or-lock, then either queue check + compare-and-swap (owner) or waiter insert + queue
# position (queued), the execution with its run, stages and delivery key (one statement), the
# accepted event, the lane event = 10; around it the token lookup = 11. The answer reads
# nothing back: the stages are the ones just inserted, and a new execution has no checkpoint
# and no child.
ACCEPTANCE_QUERIES = 11


@pytest.mark.parametrize("role", ["owner", "queued"])
def test_an_acceptance_makes_a_pinned_number_of_queries(api, django_assert_num_queries, role):
    if role == "queued":
        submit(api, "add-certificate", {"domain": "ahead.example"})

    with django_assert_num_queries(ACCEPTANCE_QUERIES):
        response = submit(api, "add-domain", {"domain": "pinned.example"})

    assert response.status_code == 202
    assert response.json()["lane"]["role"] == role


def test_a_replay_makes_fewer_round_trips(api, django_assert_num_queries):
    submit(api, "add-subdomain", SUBDOMAIN, key="k-1")

    # The key's read and the (then empty) read of the latest execution travel together, and
    # so do the answer's reads of the execution's stages, checkpoint, children and lane: the
    # token's, BEGIN, the two reads, COMMIT, the answer's four.
    with django_assert_num_queries(9), libpq_trace() as trace:
        response = submit(api, "add-subdomain", SUBDOMAIN, key="k-1")

    assert response["Idempotent-Replayed"] == "true"
    assert trace.round_trips == 5
