"""``manage.py alfred_executions list``: an operator on a shell finds the executions, newest
first, and what each waits for; the filters are the admin's (``--awaiting`` is its "waiting
for" filter, read by the same selector). Executions are accepted through the API, no worker
runs: the first add-domain owns the aws-infrastructure lane, the next waits on it; an
add-subdomain (no lane) is paused on an operator's plan."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests.support.helpers import paused_on_a_plan, submit

pytestmark = pytest.mark.django_db


def _list(*args: str) -> tuple[list[list[str]], str]:
    """The table's rows split on runs of spaces (the header first), and what went to stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command("alfred_executions", "list", *args, stdout=out, stderr=err)
    rows = [line.split() for line in out.getvalue().splitlines()]
    return rows, err.getvalue()


def _accepted(api, workflow: str, body: dict[str, str]) -> str:
    response = submit(api, workflow, body)
    assert response.status_code == 202, response.content
    return response.json()["id"]


@pytest.fixture
def three(api) -> dict[str, str]:
    """A lane's owner, the next on that lane, and one without a lane paused on a plan."""
    owner = _accepted(api, "add-domain", {"domain": "one.example"})
    waiting = _accepted(api, "add-domain", {"domain": "two.example"})
    paused = _accepted(api, "add-subdomain", {"zone": "example.com", "subdomain": "three"})
    paused_on_a_plan(paused)
    return {"owner": owner, "waiting": waiting, "paused": paused}


def test_every_execution_newest_first_with_what_it_waits_for(three):
    rows, said = _list()

    header = ["ID", "WORKFLOW", "SUBJECT", "STATUS", "LANE", "CREATED", "(UTC)", "WAITS", "FOR"]
    assert rows[0] == header
    assert [row[0] for row in rows[1:]] == [three["paused"], three["waiting"], three["owner"]]
    paused, waiting, owner = rows[1:]
    assert paused[1:5] == ["add-subdomain", "three.example.com", "paused", "-"]
    assert paused[-2:] == ["approval", "(operator)"]
    assert waiting[1:5] == ["add-domain", "two.example", "queued", "aws-infrastructure"]
    assert waiting[-4:] == ["lane", "(its", "owner", "first)"]
    assert owner[1:5] == ["add-domain", "one.example", "queued", "aws-infrastructure"]
    assert owner[-1] == "-"
    assert said.strip() == "3 shown, newest first"


def test_the_filters_are_the_admins(three):
    assert [r[0] for r in _list("--awaiting", "approval")[0][1:]] == [three["paused"]]
    assert [r[0] for r in _list("--awaiting", "lane")[0][1:]] == [three["waiting"]]
    assert [r[0] for r in _list("--status", "paused")[0][1:]] == [three["paused"]]
    assert [r[0] for r in _list("--status", "failed")[0][1:]] == []
    assert [r[0] for r in _list("--workflow", "add-domain")[0][1:]] == [
        three["waiting"],
        three["owner"],
    ]
    assert _list("--workflow", "add-certificate")[0][1:] == []


def test_a_limit_shows_the_newest_and_says_there_are_more(three):
    rows, said = _list("--limit", "2")

    assert [row[0] for row in rows[1:]] == [three["paused"], three["waiting"]]
    assert "2 shown, newest first; there are more" in said


@pytest.mark.parametrize(
    "args",
    [("--status", "sleeping"), ("--workflow", "nope"), ("--awaiting", "x"), ("--limit", "0")],
)
def test_a_bad_filter_is_refused_with_the_choices(args):
    with pytest.raises(CommandError, match=f"argument {args[0]}: (invalid choice|'0')"):
        call_command("alfred_executions", "list", *args, stdout=io.StringIO())
