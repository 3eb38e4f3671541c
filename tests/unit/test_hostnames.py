"""The workflows' side of the hostname rules: workflows.fields applies the one copy
in providers/hostnames.py (whose rules tests/unit/test_provider_hostnames.py covers) with
Alfred's own messages. Pure Python: no database."""

from __future__ import annotations

from typing import Annotated

import pytest

from alfred.problems import shown
from executions.catalog import InvalidInput
from workflows.fields import Hostname, hostname_problem, normalize_hostname
from workflows.inputs import WorkflowInput


class Named(WorkflowInput):
    domain: Annotated[str, Hostname("Domain", "A name.", ["example.com"])]


def problem(raw: str, *, allow_wildcard: bool = False) -> str | None:
    try:
        return hostname_problem(normalize_hostname(raw), allow_wildcard=allow_wildcard)
    except ValueError as exc:
        return str(exc)


# --- canonical form -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (" Example.COM. ", "example.com"),
        ("Bücher.example", "xn--bcher-kva.example"),
        ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
        ("пример.рф", "xn--e1afmkfd.xn--p1ai"),
        ("例え。ＪＰ", "xn--r8jz45g.jp"),  # UTS #46: ideographic full stop, full-width letters
        ("faß.de", "xn--fa-hia.de"),  # non-transitional: ß is kept, not mapped to "ss"
        ("*.Bücher.example", "*.xn--bcher-kva.example"),
    ],
)
def test_the_canonical_form_is_the_lower_case_a_label(raw: str, canonical: str) -> None:
    # when
    normalized = normalize_hostname(raw)

    # then
    assert normalized == canonical
    assert normalize_hostname(normalized) == normalized
    assert hostname_problem(normalized, allow_wildcard=True) is None


# --- bounded messages -----------------------------------------------------------------------


def test_messages_show_input_short_and_escaped() -> None:
    # given
    long = "a\x00" * 100 + ".com"

    # when
    with pytest.raises(InvalidInput) as caught:
        Named.parsed({"domain": long})

    # then
    errors = caught.value.errors
    assert len(errors) == 1 and errors[0].field == "/domain"
    message = errors[0].message
    assert len(message) < 200
    assert "\x00" not in message and "\\u0000" in message


def test_a_homoglyph_is_visible_in_the_message() -> None:
    assert "p\\u0430ypal" in (problem("p\u0430ypal.com") or "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("abc", '"abc"'), ("a" * 50, '"' + "a" * 40 + '…"'), ("\ud800", '"\\ud800"')],
)
def test_shown_quotes_escapes_and_cuts(value: str, expected: str) -> None:
    assert shown(value) == expected
