"""The operator's admin in a real browser: Playwright drives Debian's chromium (installed by
``scripts/install-browser``; ``ALFRED_BROWSER`` names another) against a real uvicorn web
process, a real Celery worker and the AWS stand-in. Users log in through the login page.

Without a browser these tests skip and say how to get one; ``ALFRED_REQUIRE_BROWSER=1`` (CI)
makes that a failure. ``ALFRED_SCREENSHOTS=<dir>`` (``make screenshots``) also saves the
pages docs/ shows."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.urls import reverse
from django.utils import timezone

from alfred.tokens import token_create
from alfred.users import user_set
from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    OutboxEvent,
    WebhookDelivery,
    WebhookEndpoint,
)
from lanes.models import Lane, LaneState
from providers.sandbox.aws import AwsStandIn
from tests.authorization.test_admin_pages import PASSWORD, records  # noqa: F401 (a fixture)
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.support import aws_world
from tests.support.helpers import submit
from tests.support.live import WebServer

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

BROWSER = os.environ.get("ALFRED_BROWSER", "/usr/bin/chromium")
SHOTS = os.environ.get("ALFRED_SCREENSHOTS", "")
LIVE_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not Path(BROWSER).exists():
        reason = (
            f"no browser at {BROWSER}: `make browser` (scripts/install-browser) installs "
            "Debian's chromium, or set ALFRED_BROWSER"
        )
        if os.environ.get("ALFRED_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls
    # between browser steps are ordinary synchronous code.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=BROWSER, args=["--no-sandbox", "--disable-dev-shm-usage"]
            )
            yield browser
            browser.close()


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(standin, "browser") as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    yield aws_world.alive(module_worker)
    quiesce()


@pytest.fixture(scope="module")
def web(django_db_setup: None) -> Iterator[WebServer]:
    server = WebServer("browser-web").start()
    yield server
    server.stop()


@pytest.fixture
def users(db: None) -> None:
    user_set(username="operator", role="operator", password=PASSWORD)
    user_set(username="viewer", role="viewer", password=PASSWORD)


def _web_password(username: str) -> None:
    """The web process checks passwords with the production hashers, not the tests' fast MD5:
    store this login's password as PBKDF2 (few iterations; the login upgrades it)."""
    hashed = PBKDF2PasswordHasher().encode(PASSWORD, "browser-tests", iterations=1000)
    get_user_model().objects.filter(username=username).update(password=hashed)


class Admin:
    """One logged-in browser session."""

    def __init__(self, chromium: Any, web: WebServer, username: str, **options: Any) -> None:
        _web_password(username)
        self.base = web.base
        self.context = chromium.new_context(
            **{"viewport": {"width": 1440, "height": 1000}, **options}
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.page.goto(f"{self.base}/admin/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("input[type=submit]")
        self.page.wait_for_url(f"{self.base}/admin/")

    def open(self, path: str) -> Any:
        response = self.page.goto(f"{self.base}{path}")
        assert response is not None and response.status == 200, (path, response)
        return self.page

    def execution(self, execution_id: str) -> Any:
        return self.open(reverse("admin:executions_execution_change", args=[execution_id]))

    def shot(self, name: str) -> None:
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)

    def mark(self) -> None:
        """Something a reload would wipe: the page's own window keeps it."""
        self.page.evaluate("window.alfredSamePage = true")

    def same_page(self) -> bool:
        return bool(self.page.evaluate("window.alfredSamePage === true"))

    def status_becomes(self, status: str) -> None:
        self.page.wait_for_selector(
            f'#alfred-header[data-status="{status}"]', timeout=LIVE_TIMEOUT_MS
        )

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def admin_as(chromium: Any, web: WebServer) -> Iterator[Any]:
    sessions: list[Admin] = []

    def login(username: str, **options: Any) -> Admin:
        """``options``: the browser context's (a viewport, a colour scheme)."""
        sessions.append(Admin(chromium, web, username, **options))
        return sessions[-1]

    yield login
    for session in sessions:
        session.close()


def test_every_status_opens_and_a_viewer_gets_no_button(records, admin_as):  # noqa: F811
    executions = list(Execution.objects.order_by("created_at"))
    assert {e.status for e in executions} == set(ExecutionStatus)
    paused = next(e for e in executions if e.status == ExecutionStatus.PAUSED)
    operator, viewer = admin_as("operator"), admin_as("viewer")

    for execution in executions:
        page = operator.execution(execution.pk)
        assert page.get_attribute("#alfred-header", "data-status") == execution.status
        assert "Run #3" in page.inner_text("#timeline")  # every kind of run, newest first
        assert page.locator(".errornote").count() == 0
    assert operator.execution(paused.pk).locator("a.alfred-control").count() > 0

    # a viewer: the same pages, no control anywhere
    page = viewer.execution(paused.pk)
    assert page.locator("#pending-approval code.plan-hash").count() == 1
    assert page.locator("a.alfred-control").count() == 0
    assert page.locator("#controls").count() == 0
    changelist = viewer.open(reverse("admin:executions_execution_changelist"))
    assert changelist.locator("select[name=action]").count() == 0
    lane = viewer.open(reverse("admin:lanes_lane_change", args=["lambda:a:b"]))
    assert lane.locator("a.alfred-control").count() == 0

    # from the index, the pending approval is two clicks away
    page = operator.open(reverse("admin:index"))
    page.click("#attention .alfred-approvals a")
    page.click("#pending-approval a.button.default")
    assert page.inner_text("h1").startswith("Approve the plan")
    assert (
        page.locator("code.plan-hash").inner_text()
        == paused.hooks.get(operator=True).payload["plan_hash"]
    )


def _paused_over_a_cname(api: Any, standin: AwsStandIn) -> tuple[str, str, str]:
    route53 = aws_world.client(standin, "route53")
    zone = aws_world.zone_id_of(route53)
    name = f"shop-{uuid.uuid4().hex[:8]}.example.com"
    route53.change_resource_record_sets(
        HostedZoneId=zone,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {
                        "Name": name,
                        "Type": "CNAME",
                        "TTL": 300,
                        "ResourceRecords": [{"Value": "legacy.example.net"}],
                    },
                }
            ]
        },
    )
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    paused = wait_for(
        lambda: (e := Execution.objects.get(pk=body["id"])).status == "paused" and e,
        timeout=30,
        interval=0.2,
    )
    return paused.pk, name, zone


def _served(standin: AwsStandIn, zone: str, name: str) -> set[str]:
    found = aws_world.client(standin, "route53").list_resource_record_sets(
        HostedZoneId=zone, StartRecordName=name, MaxItems="10"
    )["ResourceRecordSets"]
    return {r["Type"] for r in found if r["Name"].rstrip(".") == name}


def test_approve_then_roll_back_while_the_timeline_follows_live(
    api, users, aws_worker, standin, admin_as
):
    execution_id, name, zone = _paused_over_a_cname(api, standin)
    operator = admin_as("operator")

    # the paused execution: its plan as a table, reached through the approve control
    page = operator.execution(execution_id)
    assert page.get_attribute("#alfred-header", "data-status") == "paused"
    operator.shot("execution-paused")
    plan_hash = page.locator("#pending-approval code.plan-hash").inner_text()
    page.click("#pending-approval a.button.default")
    assert page.locator("code.plan-hash").inner_text() == plan_hash  # the hash, repeated
    assert "legacy.example.net" in page.inner_text(".alfred-plan")
    operator.shot("approval")
    page.fill("#id_reason", "checked the plan with the shop team")
    page.click("input[type=submit][value='Approve the plan']")

    # back on the execution: it goes on to succeeded without a reload
    page.wait_for_selector("#alfred-follow[data-state=following]")
    operator.mark()
    operator.status_becomes("succeeded")
    assert operator.same_page()
    assert "Run #1 · initial · succeeded (current)" in page.inner_text("#timeline")
    assert _served(standin, zone, name) == {"A", "AAAA"}
    operator.shot("execution-succeeded")

    # rollback: its page lists the compensation, then the timeline shows the restored record
    page.click("a.alfred-control:has-text('Roll back')")
    assert "aws.route53.record_sets" in page.inner_text("#content-main")
    page.fill("#id_reason", "the shop moves later")
    page.click("input[type=submit][value='Roll back']")
    page.wait_for_selector("#alfred-follow[data-state=following]")
    operator.mark()
    operator.status_becomes("rolled_back")
    assert operator.same_page()
    rollback_run = page.locator("#run-2")
    assert "rollback · succeeded (current)" in rollback_run.inner_text()
    assert "legacy.example.net" in (rollback_run.text_content() or "")
    assert _served(standin, zone, name) == {"CNAME"}
    reasons = set(
        AuditEntry.objects.filter(target_id=execution_id).values_list("reason", flat=True)
    )
    assert {"checked the plan with the shop team", "the shop moves later"} <= reasons


def test_an_operator_recovers_a_lane_from_the_owner_the_page_named(users, admin_as):
    owner = Execution.objects.create(
        workflow="add-subdomain",
        principal="prn_x",
        input={"zone": "example.com", "subdomain": "stuck"},
        logical_identity="li-stuck",
        status=ExecutionStatus.FAILED,
        finished_at=timezone.now(),
        lane_key="aws-infrastructure",
    )
    Lane.objects.create(
        key="aws-infrastructure",
        state=LaneState.RECOVERY_REQUIRED,
        owner=owner,
        reason="the owner failed mid-change",
    )
    operator = admin_as("operator")

    page = operator.open(reverse("admin:lanes_lane_changelist"))
    operator.shot("lanes")
    page.click("a:has-text('aws-infrastructure')")
    page.click("a.alfred-control:has-text('Recover')")
    described = page.inner_text(".alfred-items")
    assert owner.pk in described and "failed" in described and "nobody" in described
    page.fill("#id_reason", "the DNS was checked by hand")
    page.click("input[type=submit][value='Recover']")

    assert "released to nobody" in page.inner_text(".messagelist")
    lane = Lane.objects.get(key="aws-infrastructure")
    assert lane.state == LaneState.FREE and lane.owner_id is None
    entry = AuditEntry.objects.get(action="lane.recover", target_id="aws-infrastructure")
    assert entry.reason == "the DNS was checked by hand" and entry.actor.startswith("user:")


# The contrast of every status badge as the browser draws it: its text colour against the
# first opaque background behind it, by WCAG 2's relative luminance (AA: at least 4.5:1).
CONTRASTS = """
() => {
  const rgba = (css) => css.match(/[\\d.]+/g).map(Number).concat([1]).slice(0, 4);
  const background = (element) => {
    for (let e = element; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) { return c; }
    }
    return rgba(getComputedStyle(document.body).backgroundColor);
  };
  const over = (fg, bg) => fg.slice(0, 3).map((v, i) => v * fg[3] + bg[i] * (1 - fg[3]));
  const luminance = (c) => {
    const [r, g, b] = c.map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  return Array.from(document.querySelectorAll(".alfred-status")).map((badge) => {
    const bg = background(badge);
    const fg = over(rgba(getComputedStyle(badge).color), bg);
    const [a, b] = [luminance(fg), luminance(bg.slice(0, 3))].sort((x, y) => y - x);
    return {status: badge.textContent.trim(), ratio: (a + 0.05) / (b + 0.05)};
  });
}
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_status_badge_is_readable(records, admin_as, scheme):  # noqa: F811
    # given: an execution in every status, in the browser's light and dark colour scheme
    operator = admin_as("operator", color_scheme=scheme)

    for execution in Execution.objects.order_by("created_at"):
        # when
        badges = operator.execution(execution.pk).evaluate(CONTRASTS)

        # then
        assert [b["status"] for b in badges][:1] == [execution.status]
        for badge in badges:
            assert badge["ratio"] >= 4.5, (scheme, badge)


@pytest.fixture
def long_rows(records: None) -> None:  # noqa: F811
    """Rows as long as real ones get: long names, ids, URLs and reasons."""
    owner = Execution.objects.order_by("created_at").first()
    assert owner is not None
    deployer = token_create(name="deploy-pipeline", role="operator")[0]
    event = OutboxEvent.objects.order_by("id").first()
    assert event is not None
    for number in range(3):
        Execution.objects.create(
            workflow="update-lambda-version",
            principal="prn_x",
            input={
                "target": f"checkout-payments-settlement-api-{number}",
                "environment": "production-eu-west-1",
                "version": 1234567,
                "ticket_ids": ["PLATFORM-123456"],
            },
            logical_identity=f"li-long-{number}",
            lane_key=f"lambda:checkout-payments-settlement-api-{number}:production-eu-west-1",
        )
        Lane.objects.create(
            key=f"lambda:checkout-payments-settlement-api-{number}:production-eu-west-1",
            state=LaneState.RECOVERY_REQUIRED,
            owner=owner,
            reason="the owner failed with provider_outcome_unknown in update_aliases: "
            "the outcome of UpdateAlias on arn:aws:lambda:eu-west-1:123456789012:function:"
            "checkout-payments-settlement-api-handler:production could not be proven",
        )
        AuditEntry.objects.create(
            actor=deployer.principal_id,
            action="execution.rollback",
            target_type="execution",
            target_id=owner.pk,
            reason="the certificate for checkout-payments-settlement-api.example.com was "
            "requested for the wrong account; rolling back before the DNS validation "
            "records propagate (see PLATFORM-123456 and the incident channel)",
        )
        endpoint = WebhookEndpoint.objects.create(
            url=f"https://deployments-{number}.integrations.example.com/alfred/v1/webhooks"
            "/receivers/execution-events?team=platform-infrastructure",
            secret="whsec_x",
        )
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            event=event,
            status="failed",
            attempts=8,
            last_status_code=503,
            next_attempt_at=timezone.now(),
        )


# What an operator reads in each list, to be seen without scrolling sideways.
NEEDED = {
    "executions_execution": [
        "id",
        "workflow",
        "status_shown",
        "subject",
        "waits_for",
        "created_at",
    ],
    "executions_webhookdelivery": ["id", "endpoint_url", "event_type", "status", "attempts"],
    "executions_auditentry": ["created_at", "who", "action", "target", "reason_summary"],
    "lanes_lane": ["key", "state", "owner_link", "owner_status", "queued", "reason_summary"],
}
# Where each column's cells end, against the viewport and the list's scrolling box.
OVERFLOW = """
(columns) => {
  const viewport = document.documentElement.clientWidth;
  const box = document.querySelector("#changelist .results").getBoundingClientRect();
  const right = Math.min(viewport, box.right);
  const cut = columns.filter((column) => {
    const cells = document.querySelectorAll(
      `#result_list .field-${column}, #result_list .column-${column}`);
    return cells.length < 2 || Array.from(cells).some((cell) => {
      const r = cell.getBoundingClientRect();
      return r.width === 0 || r.left < box.left - 0.5 || r.right > right + 0.5;
    });
  });
  const results = document.querySelector("#changelist .results");
  return {
    cut: cut,
    page: document.documentElement.scrollWidth - viewport,
    list: results.scrollWidth - results.clientWidth,
  };
}
"""


def test_the_lists_show_what_an_operator_needs_at_1280_px(long_rows, admin_as):
    operator = admin_as("operator", viewport={"width": 1280, "height": 900})

    seen = {}
    for changelist, columns in NEEDED.items():
        # when
        page = operator.open(reverse(f"admin:{changelist}_changelist"))
        seen[changelist] = page.evaluate(OVERFLOW, columns)

    # then: every needed column is on screen, and nothing needs a sideways scroll
    assert seen == {list_: {"cut": [], "page": 0, "list": 0} for list_ in NEEDED}


# What stands wider than the window (the page must not scroll sideways; a table may scroll in
# a box of its own), and the attention box's lines.
PHONE_OVERFLOW = """
() => {
  const viewport = document.documentElement.clientWidth;
  const inside = (box) => box.getBoundingClientRect().right <= viewport + 0.5;
  const scrolls = (box) => ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
  const named = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (typeof el.className === "string" && el.className.trim()
       ? "." + el.className.trim().split(/\\s+/).join(".") : "");
  const wide = Array.from(document.querySelectorAll("body *")).filter((el) => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= viewport + 0.5) return false;
    // inside a box that scrolls sideways on its own and fits: that box is what counts
    for (let up = el.parentElement; up; up = up.parentElement) {
      if (scrolls(up) && inside(up)) return false;
    }
    return true;
  }).map(named);
  return {page: document.documentElement.scrollWidth - viewport, wide: wide.slice(0, 8)};
}
"""


PHONE = {"width": 390, "height": 844}


def _lines(page: Any, selector: str) -> int:
    """How many lines the text of ``selector`` takes."""
    return int(
        page.evaluate(
            """(selector) => {
              const range = document.createRange();
              range.selectNodeContents(document.querySelector(selector));
              return new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top))).size;
            }""",
            selector,
        )
    )


def test_every_page_fits_a_phone(records, long_rows, admin_as):  # noqa: F811
    # given an operator on a phone (390 x 844, where an on-call operator approves)
    operator = admin_as("operator", viewport=PHONE, is_mobile=True, has_touch=True)
    paused = Execution.objects.get(status=ExecutionStatus.PAUSED)
    pages = [
        reverse("admin:index"),
        *(reverse(f"admin:{changelist}_changelist") for changelist in NEEDED),
        *(
            reverse("admin:executions_execution_change", args=[pk])
            for pk in Execution.objects.order_by("created_at").values_list("pk", flat=True)
        ),
        reverse("admin:lanes_lane_change", args=["lambda:a:b"]),
        reverse("admin:alfred_apitoken_changelist"),
        reverse("admin:executions_webhookendpoint_changelist"),
    ]
    seen = {}
    for path in pages:
        page = operator.open(path)
        seen[path] = page.evaluate(PHONE_OVERFLOW)
    # and the approval page, reached from the paused execution
    page = operator.execution(paused.pk)
    operator.shot("phone-paused")
    with page.expect_navigation():
        page.click("#pending-approval a.button.default")  # on top, reachable by a tap
    seen["approve"] = page.evaluate(PHONE_OVERFLOW)
    operator.shot("phone-approve")

    # then no page scrolls sideways (a wide table scrolls in its own box)
    assert {path: found for path, found in seen.items() if found["page"] or found["wide"]} == {}
    # and the index's waiting box reads on one line
    page = operator.open(reverse("admin:index"))
    operator.shot("phone-index")
    assert _lines(page, "#attention .alfred-approvals a") == 1
    # and the executions list shows each execution's id, workflow and status on screen
    page = operator.open(reverse("admin:executions_execution_changelist"))
    operator.shot("phone-executions")
    assert page.evaluate(ON_SCREEN, ["id", "workflow", "status_shown", "subject"]) == []


# The columns some row of the list does not show within the window.
ON_SCREEN = """
(columns) => {
  const viewport = document.documentElement.clientWidth;
  return columns.filter((column) => {
    const cells = document.querySelectorAll(`#result_list tbody .field-${column}`);
    return cells.length < 2 || Array.from(cells).some((cell) => {
      const r = cell.getBoundingClientRect();
      return r.width === 0 || r.left < -0.5 || r.right > viewport + 0.5;
    });
  });
}
"""
