"""The public event catalogue is declared once (``executions.events``) and written down once
(docs/contract.md, "Events"): the two name the same types, so an integrator reading the
contract knows every type polling, the streams and webhooks carry."""

from __future__ import annotations

import re
from pathlib import Path

from executions.events import EVENT_CATALOGUE, PUBLIC_EVENT_TYPES, TERMINAL_EVENT_TYPES

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
