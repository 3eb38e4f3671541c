"""The public event catalogue is declared once (``executions.events``) and written down once
(docs/contract.md, "Events"): the two name the same types, so an integrator reading the
contract knows every type polling, the streams and webhooks carry."""

from __future__ import annotations

import re
from pathlib import Path

from executions.events import (
    EVENT_CATALOGUE,
    EVENTS,
    PUBLIC_EVENT_TYPES,
    TERMINAL_EVENT_TYPES,
    EventType,
    payload_fields,
    payload_problem,
)

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


def documented_types() -> list[str]:
    """The types in the first column of the contract's table of events."""
    text = CONTRACT.read_text()
    table = text[text.index("| type | when |") :].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]  # past the header and its rule
    return [name for row in rows for name in re.findall(r"`([a-z_.]+)`", row.split("|")[1])]


def test_the_contract_lists_exactly_the_public_catalogue():
    documented = documented_types()
    assert len(documented) == len(set(documented)), "a type documented twice"
    assert set(documented) == PUBLIC_EVENT_TYPES


def test_the_catalogue_has_each_terminal_transition_and_says_when_each_type_happens():
    assert TERMINAL_EVENT_TYPES <= PUBLIC_EVENT_TYPES
    assert all(when.strip() for when in EVENT_CATALOGUE.values())
    assert not {t for t in PUBLIC_EVENT_TYPES if t.startswith("run.")}  # diagnostics


def documented_payloads() -> dict[str, tuple[set[str], set[str]]]:
    """Each documented type's payload keys as the table's third column says: required, and
    optional (written `name`?)."""
    text = CONTRACT.read_text()
    table = text[text.index("| type | when |") :].split("\n\n", 1)[0]
    found = {}
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        payload = cells[3]
        required = set(re.findall(r"`([a-z_]+)`(?!\?)", payload))
        optional = set(re.findall(r"`([a-z_]+)`\?", payload))
        for name in re.findall(r"`([a-z_.]+)`", cells[1]):
            found[name] = (required, optional)
    return found


def test_the_contract_states_each_types_payload_as_declared():
    documented = documented_payloads()
    for type_ in EventType:
        required, optional = payload_fields(type_)
        assert documented[type_] == (set(required), set(optional)), type_


def test_an_event_of_no_public_type_or_with_an_undeclared_key_is_refused():
    assert payload_problem("test.tick", {}) is not None
    assert "missing ['by']" in str(payload_problem("hook.signalled", {"hook": "h", "name": "n"}))
    assert "undeclared ['extra']" in str(
        payload_problem("hook.signalled", {"hook": "h", "name": "n", "by": "p", "extra": 1})
    )
    assert payload_problem("hook.signalled", {"hook": "h", "name": "n", "by": "p"}) is None
    assert payload_problem("execution.assistance", {"kind": "k", "anything": 1}) is None  # open
    assert set(EVENTS) == set(EventType) and len(EventType) == len(PUBLIC_EVENT_TYPES)
