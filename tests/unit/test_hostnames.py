"""The hostname rules of executions.workflows.fields: IDNA 2008 labels, A-label round trips,
one script per label, domain names not IP addresses. Pure Python: no database."""

from __future__ import annotations

import pytest

from alfred.problems import shown
from executions.workflows.fields import (
    hostname_errors,
    hostname_problem,
    label_scripts,
    normalize_hostname,
    script_problem,
)


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


# --- A-labels -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "xn--zz.com",  # no valid punycode decoding
        "xn--abc-ab.com",  # decodes, but not to what encodes back to it
        "xn--a-ecp.com",  # punycode that decodes, but to an uppercase (disallowed) U-label
        "xn--ls8h.com",  # an emoji: a code point IDNA 2008 disallows
    ],
)
def test_an_a_label_must_decode_to_a_valid_u_label(name: str) -> None:
    assert "A-label" in (problem(name) or "")


@pytest.mark.parametrize("name", ["xn--.com", "xn--abc-.com"])
def test_an_a_label_ending_in_a_hyphen_is_refused(name: str) -> None:
    # "xn--abc-" would decode to the ASCII "abc": a disguised LDH label
    assert problem(name) is not None


def test_a_valid_a_label_is_accepted() -> None:
    assert problem("xn--bcher-kva.example") is None


def test_other_reserved_hyphen_labels_are_plain_ldh() -> None:
    assert problem("ab--cd.example.com") is None


@pytest.mark.parametrize(
    "name",
    [
        "\U0001f600.com",  # emoji
        "a\u200db.com",  # a zero width joiner outside its context
        "a\u0661b.com",  # an Arabic-Indic digit among Latin letters: bidi rules
    ],
)
def test_a_u_label_idna_refuses_is_refused(name: str) -> None:
    assert problem(name) is not None


# --- scripts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "scripts"),
    [
        ("paypal", {"Latin"}),
        ("p\u0430ypal", {"Latin", "Cyrillic"}),
        ("例え", {"Han", "Hiragana"}),
        ("テスト", {"Katakana"}),
        ("ラーメン", {"Katakana"}),  # the prolonged sound mark counts as kana
        ("한국어", {"Hangul"}),
        ("café", {"Latin"}),
        ("cafe\u0301", {"Latin"}),  # a combining mark inherits the letter's script
        ("abc123", {"Latin"}),
        ("123", set()),
    ],
)
def test_the_script_of_a_letter_is_the_first_word_of_its_name(label: str, scripts: set) -> None:
    assert label_scripts(label) == scripts


@pytest.mark.parametrize(
    "label",
    ["bücher", "пример", "παράδειγμα", "例え", "東京タワー", "漢字한글", "ㄅ漢", "abc-123"],
)
def test_one_script_or_an_allowed_east_asian_set_passes(label: str) -> None:
    assert script_problem(label) is None


@pytest.mark.parametrize(
    "label",
    ["p\u0430ypal", "g\u03bfogle", "ab\u0441d", "한글かな", "latin例"],
)
def test_a_label_mixing_scripts_is_refused(label: str) -> None:
    assert "mixes the scripts" in (script_problem(label) or "")


@pytest.mark.parametrize("name", ["p\u0430ypal.com", "xn--pypal-4ve.com", "www.p\u0430ypal.com"])
def test_a_mixed_script_hostname_is_refused_in_either_form(name: str) -> None:
    assert "mixes the scripts" in (problem(name) or "")


def test_labels_may_differ_in_script() -> None:
    assert problem("пример.com") is None
    assert problem("shop.例え.jp") is None


# --- domain names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["1.2.3.4", "10.0.0.1.", "example.123", "a.b.c.0"])
def test_an_all_digit_top_level_label_is_refused(name: str) -> None:
    assert "top-level" in (problem(name) or "")


@pytest.mark.parametrize("name", ["123.example.com", "1.2.3.example", "0x1.com"])
def test_digits_in_other_labels_are_fine(name: str) -> None:
    assert problem(name) is None


@pytest.mark.parametrize("name", ["com", "localhost", "*.com", "xn--p1ai"])
def test_a_hostname_has_at_least_two_labels(name: str) -> None:
    assert problem(name, allow_wildcard=True) is not None


# --- bounded messages -----------------------------------------------------------------------


def test_messages_show_input_short_and_escaped() -> None:
    # given
    long = "a\x00" * 100 + ".com"

    # when
    errors = hostname_errors("/domain", long)

    # then
    assert len(errors) == 1
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
