"""The authorization matrix: who may do what, on every API endpoint, admin action and
management command. ``test_matrix.py`` asserts every cell against the running code;
``render()`` writes the same table into docs/contract.md (``python -m
tests.authorization.matrix`` prints it; a test fails when the page is stale).

Cells: an HTTP status (with the problem code for a 4xx/5xx), ``listed``/``hidden`` for whether
the owner's execution shows in a list, and for the admin ``login`` (sent to the login page:
tokens do not open the admin), ``refused`` (the action is not offered to that role; nothing
changes), ``asks`` (the action's confirmation page: nothing changes until it is confirmed with
a reason) and ``done`` (the action ran).
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLUMNS = {
    "anonymous": "anonymous",
    "revoked": "revoked token",
    "owner": "integration (owner)",
    "other": "other integration",
    "operator": "operator token",
    "viewer_session": "viewer session",
    "operator_session": "operator session",
    "read_only": "read-only instance",
}

ANON = ("401 not_authenticated", "401 authentication_failed")


@dataclass(frozen=True)
class ApiRow:
    label: str
    method: str
    path: str  # {queued}, {failed}, {paused}, {lane}, {freeze}, {drifted}: the world's objects
    cells: tuple[str, ...]  # in COLUMNS order
    body: dict[str, object] | None = None
    changes: str | None = None  # the name of the effect checked on a 2xx (and its absence)


@dataclass(frozen=True)
class AdminRow:
    label: str
    path: str
    data: dict[str, object]
    changes: str
    cells: tuple[str, ...]


@dataclass(frozen=True)
class CommandRow:
    label: str
    args: tuple[str, ...]
    normal: str  # ok
    read_only: str  # ok | refused
    stdin: str = ""
    extra: dict[str, str] = field(default_factory=dict)


_READ = (*ANON, "200", "200", "200", "200", "200", "200")
_MINE = (*ANON, "200", "404 not_found", "200", "200", "200", "200")
_CONTROL = (*ANON, "202", "404 not_found", "202", "403 permission_denied", "202")
_RO = "503 read_only_instance"
# An operator's control on the owner's execution: the owner is refused, another integration
# cannot even see it, a viewer reads but may not act.
_OPERATORS_ONLY = (
    *ANON,
    "403 permission_denied",
    "404 not_found",
    "202",
    "403 permission_denied",
    "202",
    _RO,
)

API: tuple[ApiRow, ...] = (
    ApiRow("GET /healthz", "GET", "/healthz", ("200",) * 8),
    ApiRow(
        "GET /api/schema/ (public)",
        "GET",
        "/api/schema/",
        ("200", "401 authentication_failed", *("200",) * 6),
    ),
    ApiRow("GET /workflows", "GET", "/api/v1/workflows", _READ),
    ApiRow(
        "POST /workflows/{w}/executions (a new operation)",
        "POST",
        "/api/v1/workflows/add-subdomain/executions",
        (*ANON, "202", "202", "202", "403 permission_denied", "202", _RO),
        body={"zone": "example.com", "subdomain": "fresh"},
    ),
    ApiRow(
        "POST /workflows/{w}/executions (the owner's active operation)",
        "POST",
        "/api/v1/workflows/add-subdomain/executions",
        (*ANON, "202", "409 identity_conflict", "202", "403 permission_denied", "202", _RO),
        body={"zone": "example.com", "subdomain": "queued"},
    ),
    ApiRow(
        "POST /workflows/{w}/executions (the owner's failed operation)",
        "POST",
        "/api/v1/workflows/add-subdomain/executions",
        (*ANON, "202", "409 identity_conflict", "202", "403 permission_denied", "202", _RO),
        body={"zone": "example.com", "subdomain": "failed"},
        changes="continued",
    ),
    ApiRow(
        "GET /executions",
        "GET",
        "/api/v1/executions",
        (*ANON, "200 listed", "200 hidden", "200 listed", "200 listed", "200 listed", "200 listed"),
    ),
    ApiRow("GET /executions/{id}", "GET", "/api/v1/executions/{queued}", _MINE),
    ApiRow("GET /executions/{id}/events", "GET", "/api/v1/executions/{queued}/events", _MINE),
    ApiRow(
        "POST /executions/{id}/cancel",
        "POST",
        "/api/v1/executions/{queued}/cancel",
        (*_CONTROL, _RO),
        changes="canceled",
    ),
    ApiRow(
        "POST /executions/{id}/retry",
        "POST",
        "/api/v1/executions/{failed}/retry",
        (*_CONTROL, _RO),
        changes="retried",
    ),
    ApiRow(
        "POST /executions/{id}/approve",
        "POST",
        "/api/v1/executions/{paused}/approve",
        _OPERATORS_ONLY,
        body={"plan_hash": "{plan_hash}", "reason": "matrix"},
        changes="approved",
    ),
    ApiRow(
        "POST /executions/{id}/reject",
        "POST",
        "/api/v1/executions/{paused}/reject",
        _OPERATORS_ONLY,
        body={"plan_hash": "{plan_hash}", "reason": "matrix"},
        changes="rejected",
    ),
    ApiRow(
        "POST /executions/{id}/rollback",
        "POST",
        "/api/v1/executions/{failed}/rollback",
        _OPERATORS_ONLY,
        body={"reason": "matrix"},
        changes="rolling_back",
    ),
    ApiRow(
        "GET /audit",
        "GET",
        "/api/v1/audit",
        (*ANON, "403 permission_denied", "403 permission_denied", "200", "200", "200", "200"),
    ),
    ApiRow(
        "GET /executions/{id}/events/stream (no new events: 204)",
        "GET",
        "/api/v1/executions/{failed}/events/stream?after=999",
        (*ANON, "204", "404 not_found", "204", "204", "204", "204"),
    ),
    ApiRow(
        "POST /executions/{id}/accept_drift",
        "POST",
        "/api/v1/executions/{drifted}/accept_drift",
        _OPERATORS_ONLY,
        body={"reason": "matrix"},
        changes="drift_accepted",
    ),
    ApiRow(
        "POST /executions/{id}/redo",
        "POST",
        "/api/v1/executions/{drifted}/redo",
        (*_CONTROL, _RO),
        changes="redone",
    ),
    ApiRow("GET /drifts", "GET", "/api/v1/drifts", _READ),
    ApiRow("GET /drifts/{id}", "GET", "/api/v1/drifts/{drift}", _MINE),
    ApiRow("GET /lanes", "GET", "/api/v1/lanes", _READ),
    ApiRow("GET /lanes/{key}", "GET", "/api/v1/lanes/{lane}", _READ),
    ApiRow(
        "POST /lanes/{key}/recover",
        "POST",
        "/api/v1/lanes/{lane}/recover",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "202",
            "403 permission_denied",
            "202",
            _RO,
        ),
        body={"expected_owner": "{lane_owner}", "reason": "matrix"},
        changes="recovered",
    ),
    ApiRow("GET /freezes", "GET", "/api/v1/freezes", _READ),
    ApiRow("GET /freezes/{id}", "GET", "/api/v1/freezes/{freeze}", _READ),
    ApiRow(
        "POST /freezes",
        "POST",
        "/api/v1/freezes",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "201",
            "403 permission_denied",
            "201",
            _RO,
        ),
        body={"reason": "matrix", "workflows": ["add-subdomain"]},
    ),
    ApiRow(
        "POST /freezes/{id}/exempt",
        "POST",
        "/api/v1/freezes/{freeze}/exempt",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "202",
            "403 permission_denied",
            "202",
            _RO,
        ),
        body={"execution": "{queued}", "reason": "matrix"},
        changes="let_through",
    ),
    ApiRow(
        "POST /freezes/{id}/end",
        "POST",
        "/api/v1/freezes/{freeze}/end",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "202",
            "403 permission_denied",
            "202",
            _RO,
        ),
        body={"reason": "matrix"},
        changes="freeze_ended",
    ),
    ApiRow("GET /webhooks/event-types", "GET", "/api/v1/webhooks/event-types", _READ),
    ApiRow(
        "GET /webhooks/endpoints",
        "GET",
        "/api/v1/webhooks/endpoints",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "200",
            "403 permission_denied",
            "200",
            "200",
        ),
    ),
    ApiRow(
        "POST /webhooks/endpoints",
        "POST",
        "/api/v1/webhooks/endpoints",
        (
            *ANON,
            "403 permission_denied",
            "403 permission_denied",
            "201",
            "403 permission_denied",
            "201",
            _RO,
        ),
        body={"url": "https://hooks.example.com/alfred"},
        changes="webhook_added",
    ),
    ApiRow(
        "POST /receivers/github (unsigned)",
        "POST",
        "/api/v1/receivers/github",
        ("401 authentication_failed",) * 7 + (_RO,),
        body={"repository": {"full_name": "platform/helm-values"}},
    ),
)

_LOGIN = ("login",) * 5
_ACTION = (*_LOGIN, "refused", "done", "503")
_ASKS = (*_LOGIN, "refused", "asks", "503")
_CONFIRMED = {"confirm": "yes", "reason": "the matrix"}
_FORBIDDEN = (*_LOGIN, "403", "403", "503")

ADMIN: tuple[AdminRow, ...] = (
    AdminRow(
        "executions: cancel action, asked",
        "/admin/executions/execution/",
        {"action": "cancel", "_selected_action": "{queued}"},
        "canceled",
        _ASKS,
    ),
    AdminRow(
        "executions: cancel action, confirmed",
        "/admin/executions/execution/",
        {"action": "cancel", "_selected_action": "{queued}", **_CONFIRMED},
        "canceled",
        _ACTION,
    ),
    AdminRow(
        "executions: retry action, confirmed",
        "/admin/executions/execution/",
        {"action": "retry", "_selected_action": "{failed}", **_CONFIRMED},
        "retried",
        _ACTION,
    ),
    AdminRow(
        "lanes: recover action, asked",
        "/admin/lanes/lane/",
        {"action": "recover", "_selected_action": "{lane}"},
        "recovered",
        _ASKS,
    ),
    AdminRow(
        "lanes: recover action, confirmed (naming the owner seen)",
        "/admin/lanes/lane/",
        {
            "action": "recover",
            "_selected_action": "{lane}",
            "seen_owner:{lane}": "{lane_owner}",
            **_CONFIRMED,
        },
        "recovered",
        _ACTION,
    ),
    AdminRow(
        "tokens: revoke action",
        "/admin/alfred/apitoken/",
        {"action": "revoke", "_selected_action": "{owner_token}"},
        "revoked",
        _ACTION,
    ),
    AdminRow(
        "webhook endpoints: add",
        "/admin/executions/webhookendpoint/add/",
        {"url": "https://hooks.example.com/alfred", "event_types": "", "active": "on"},
        "webhook_added",
        (*_LOGIN, "403", "done", "503"),
    ),
    AdminRow(
        "webhook endpoints: rotate secret action, asked",
        "/admin/executions/webhookendpoint/",
        {"action": "rotate_secret", "_selected_action": "{webhook}"},
        "secret_rotated",
        _ASKS,
    ),
    AdminRow(
        "webhook endpoints: rotate secret action, confirmed",
        "/admin/executions/webhookendpoint/",
        {"action": "rotate_secret", "_selected_action": "{webhook}", **_CONFIRMED},
        "secret_rotated",
        _ACTION,
    ),
    AdminRow(
        "lanes: save the change form",
        "/admin/lanes/lane/{lane}/change/",
        {"key": "{lane}", "state": "free", "version": "0", "reason": ""},
        "lane_rewritten",
        _FORBIDDEN,
    ),
    AdminRow(
        "tokens: save the change form",
        "/admin/alfred/apitoken/{owner_token}/change/",
        {"name": "renamed", "role": "operator"},
        "token_rewritten",
        _FORBIDDEN,
    ),
    AdminRow(
        "users: add a user",
        "/admin/auth/user/add/",
        {"username": "mallory", "password1": "Zq8!x7pLm2#v", "password2": "Zq8!x7pLm2#v"},
        "user_added",
        _FORBIDDEN,
    ),
    AdminRow(
        "beat schedule: switch a scan off",
        "/admin/django_celery_beat/periodictask/{beat}/change/",
        {"enabled": ""},
        "beat_changed",
        _FORBIDDEN,
    ),
)

COMMANDS: tuple[CommandRow, ...] = (
    CommandRow(
        "alfred_token create",
        ("alfred_token", "create", "--name", "cli-bot", "--role", "integration"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_token rotate", ("alfred_token", "rotate", "--name", "owner-bot"), "ok", "refused"
    ),
    CommandRow(
        "alfred_token revoke", ("alfred_token", "revoke", "--name", "owner-bot"), "ok", "refused"
    ),
    CommandRow("alfred_token list", ("alfred_token", "list"), "ok", "ok"),
    CommandRow("alfred_lanes list", ("alfred_lanes", "list"), "ok", "ok"),
    CommandRow("alfred_lanes show", ("alfred_lanes", "show", "{lane}"), "ok", "ok"),
    CommandRow(
        "alfred_lanes recover",
        ("alfred_lanes", "recover", "{lane}", "--owner", "{lane_owner}", "--reason", "matrix"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_user set",
        ("alfred_user", "set", "carol", "--role", "viewer", "--password-stdin"),
        "ok",
        "refused",
        stdin="Zq8!x7pLm2#v\n",
    ),
    CommandRow("alfred_user list", ("alfred_user", "list"), "ok", "ok"),
    CommandRow("alfred_user deactivate", ("alfred_user", "deactivate", "viewer"), "ok", "refused"),
    CommandRow("alfred_executions list", ("alfred_executions", "list"), "ok", "ok"),
    CommandRow("alfred_executions show", ("alfred_executions", "show", "{queued}"), "ok", "ok"),
    CommandRow(
        "alfred_executions approve",
        # --wait 0: no worker takes the approval here (who may approve is what is asked)
        (
            "alfred_executions",
            "approve",
            "{paused}",
            "--plan-hash",
            "{plan_hash}",
            "--reason",
            "m",
            "--wait",
            "0",
        ),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_executions reject",
        ("alfred_executions", "reject", "{paused}", "--plan-hash", "{plan_hash}"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_executions rollback",
        ("alfred_executions", "rollback", "{failed}", "--reason", "matrix"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_executions cancel", ("alfred_executions", "cancel", "{queued}"), "ok", "refused"
    ),
    CommandRow(
        "alfred_executions retry", ("alfred_executions", "retry", "{failed}"), "ok", "refused"
    ),
    CommandRow(
        "alfred_executions accept_drift",
        ("alfred_executions", "accept_drift", "{drifted}", "--reason", "matrix"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_executions redo", ("alfred_executions", "redo", "{drifted}"), "ok", "refused"
    ),
    CommandRow("alfred_drift list", ("alfred_drift", "list"), "ok", "ok"),
    CommandRow("alfred_drift show", ("alfred_drift", "show", "{drift}"), "ok", "ok"),
    CommandRow("alfred_drift check (queue a tick)", ("alfred_drift", "check"), "ok", "refused"),
    CommandRow("alfred_drift enrol", ("alfred_drift", "enrol"), "ok", "refused"),
    CommandRow("alfred_bootstrap", ("alfred_bootstrap",), "ok", "refused"),
    CommandRow("alfred_freezes list", ("alfred_freezes", "list"), "ok", "ok"),
    CommandRow(
        "alfred_freezes declare",
        ("alfred_freezes", "declare", "--reason", "matrix", "--workflow", "add-subdomain"),
        "ok",
        "refused",
    ),
    CommandRow(
        "alfred_freezes exempt",
        ("alfred_freezes", "exempt", "{freeze}", "{queued}", "--reason", "matrix"),
        "ok",
        "refused",
    ),
    CommandRow("alfred_freezes end", ("alfred_freezes", "end", "{freeze}"), "ok", "refused"),
    CommandRow("alfred_policy check", ("alfred_policy", "check"), "ok", "ok"),
    CommandRow(
        "alfred_policy explain", ("alfred_policy", "explain", "--execution", "{paused}"), "ok", "ok"
    ),
)


def render() -> str:
    head = list(COLUMNS.values())
    lines = [
        "| API | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
        *(f"| `{row.label}` | " + " | ".join(row.cells) + " |" for row in API),
        "",
        "| Admin | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
        *(f"| {row.label} | " + " | ".join(row.cells) + " |" for row in ADMIN),
        "",
        "| Command (`manage.py …`) | normal instance | read-only instance |",
        "|---|---|---|",
        *(f"| `{row.label}` | {row.normal} | {row.read_only} |" for row in COMMANDS),
    ]
    return "\n".join(lines) + "\n"


START = "<!-- authorization-matrix:start (generated: python -m tests.authorization.matrix) -->"
END = "<!-- authorization-matrix:end -->"

if __name__ == "__main__":
    print(render(), end="")
