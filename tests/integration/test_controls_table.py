"""One table of controls (``executions.controls.CONTROLS``): every face is made from it. Each
declared control has its API route and OpenAPI operation (with its summary and its body's
fields), its command subcommand (with the same flags), and its admin confirmation page (with
the same form fields); nothing any face offers is missing from the table."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from executions.admin.executions import CONTROL_PAGES
from executions.api.serializers import CONTROL_REQUESTS
from executions.controls import CONTROLS

pytestmark = pytest.mark.django_db


def _body_fields(control) -> set[str]:
    return (
        {"reason"}
        | ({"plan_hash"} if control.plan_hash else set())
        | ({"force"} if control.force else set())
    )


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.name)
def test_each_control_has_every_face_from_its_declaration(control, client, capsys):
    # the API: its route, and its operation in the served document, its body's fields
    path = reverse(f"execution-{control.name}", kwargs={"execution_id": "exe_x"})
    assert path == f"/api/v1/executions/exe_x/{control.name}"
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/executions/{execution_id}/" + control.name]["post"]
    assert operation["operationId"] == f"executions_{control.name}"
    assert operation["summary"] == control.summary
    assert set(CONTROL_REQUESTS[control.name]().fields) == _body_fields(control)
    # the command: its subcommand and flags
    with pytest.raises(SystemExit):
        call_command("alfred_executions", control.name, "--help")
    said = capsys.readouterr().out
    assert "--reason" in said and ("--plan-hash" in said) == bool(control.plan_hash)
    assert ("--force" in said) == control.force
    # the admin: its page's title and form
    page = CONTROL_PAGES[control.name]
    assert page.title == control.title
    assert set(page.form().fields) == _body_fields(control)


def test_no_face_offers_a_control_the_table_does_not_declare(client):
    declared = {c.name for c in CONTROLS}
    schema = client.get("/api/schema/?format=json").json()
    posted = {
        path.rsplit("/", 1)[1]
        for path, item in schema["paths"].items()
        if path.startswith("/api/v1/executions/{execution_id}/") and "post" in item
    }
    assert posted == declared
    assert set(CONTROL_PAGES) == declared
