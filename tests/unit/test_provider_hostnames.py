"""The hostname rules of providers.hostnames: the canonical form, IDNA 2008 labels, A-label
round trips, one script per label, domain names not IP addresses, wildcards only where the
caller allows them; and the routing file editors applying them. Pure Python: no database."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from providers.errors import Rejected
from providers.gitops.editors import DEIMOS_SERVER_NAMES, NGINX_HOSTS
from providers.hostnames import (
    MAX_HOSTNAME_LENGTH,
    canonical_problem,
    hostname_problem,
    input_problem,
    label_scripts,
    normalize_hostname,
    quoted,
    script_problem,
)


def problem(raw: str, *, wildcard: bool = False) -> str | None:
    return input_problem(raw, wildcard=wildcard)


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
    assert hostname_problem(normalized, wildcard=True) is None
    assert canonical_problem(normalized, wildcard=True) is None


@given(st.text(max_size=40))
@example("..")  # found by this test: one trailing dot dropped twice over two normalizations
@example("a.。")
def test_normalizing_is_idempotent_or_refuses(raw: str) -> None:
    try:
        normalized = normalize_hostname(raw)
    except ValueError:
        return
    assert normalize_hostname(normalized) == normalized


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
    with pytest.raises(ValueError, match="IDNA"):
        normalize_hostname(name)
    assert problem(name) is not None


@pytest.mark.parametrize(
    "name",
    ["-bad.example.com", "bad-.example.com", "exa mple.com", "a_b.example.com", "a..b.com"],
)
def test_a_label_is_ldh(name: str) -> None:
    assert "must be 1-63 characters of a-z, 0-9 and '-'" in (problem(name) or "")


def test_a_label_is_at_most_63_characters() -> None:
    assert problem("a" * 63 + ".com") is None
    assert problem("a" * 64 + ".com") is not None


def test_a_name_is_at_most_253_characters_once_normalized() -> None:
    # given four 62-character labels: 4 * 62 + 3 dots + ".com" = 255
    long = ".".join(["a" * 62] * 4) + ".com"

    # then
    assert len(long) > MAX_HOSTNAME_LENGTH
    assert problem(long) == "must be at most 253 characters once normalized"
    assert problem(long[len(long) - MAX_HOSTNAME_LENGTH :].lstrip(".")) is None


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


@pytest.mark.parametrize("name", ["com", "localhost", "*.com", "xn--p1ai", "*"])
def test_a_hostname_has_at_least_two_labels(name: str) -> None:
    assert problem(name, wildcard=True) == "must have at least two labels, e.g. example.com"


# --- wildcards ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["*.example.com", "*.xn--bcher-kva.example", "*.a.b.example"])
def test_a_leading_wildcard_label_passes_only_where_the_caller_allows_it(name: str) -> None:
    assert hostname_problem(name, wildcard=True) is None
    assert hostname_problem(name, wildcard=False) == "a wildcard name is not allowed here"


@pytest.mark.parametrize(
    "name",
    [
        "a.*.example.com",
        "*.*.example.com",
        "*foo.example.com",
        "foo*.example.com",
        "**.example.com",
    ],
)
def test_a_wildcard_is_only_the_whole_first_label(name: str) -> None:
    # then refused even where wildcards are allowed: the '*' is an invalid label
    found = hostname_problem(name, wildcard=True) or ""
    assert "must be 1-63 characters of a-z, 0-9 and '-'" in found


def test_the_rest_of_a_wildcard_name_follows_every_rule() -> None:
    assert "top-level" in (hostname_problem("*.1.2.3", wildcard=True) or "")
    assert "mixes the scripts" in (hostname_problem("*.xn--pypal-4ve.com", wildcard=True) or "")


# --- names that must already be canonical (routing file entries) ----------------------------


@pytest.mark.parametrize(
    "name", ["Example.com", "example.com.", " example.com", "example.com\n", "bücher.de"]
)
def test_a_canonical_name_is_not_normalized_for_the_caller(name: str) -> None:
    assert "must be normalized" in (canonical_problem(name, wildcard=False) or "")


@pytest.mark.parametrize("name", ["", None, 42])
def test_a_canonical_name_is_a_non_empty_string(name: object) -> None:
    assert canonical_problem(name, wildcard=False) == "must be a non-empty string"


def test_a_canonical_name_follows_the_hostname_rules() -> None:
    assert canonical_problem("xn--bcher-kva.de", wildcard=False) is None
    assert "A-label" in (canonical_problem("xn--zz.com", wildcard=False) or "")
    assert "top-level" in (canonical_problem("10.0.0.1", wildcard=False) or "")
    assert canonical_problem("*.example.com", wildcard=True) is None
    assert canonical_problem("*.example.com", wildcard=False) == (
        "a wildcard name is not allowed here"
    )


# --- messages -------------------------------------------------------------------------------


def test_messages_show_a_label_quoted_escaped_and_cut() -> None:
    # given a label with control characters, far longer than a message shows
    found = problem("a\x00" * 100 + ".com") or ""

    # then
    assert "\x00" not in found and "\\u0000" in found
    assert len(found) < 200


def test_a_homoglyph_is_visible_in_the_message() -> None:
    assert "p\\u0430ypal" in (problem("p\u0430ypal.com") or "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("abc", '"abc"'), ("a" * 50, '"' + "a" * 40 + '…"'), ("\ud800", '"\\ud800"')],
)
def test_quoted_quotes_escapes_and_cuts(value: str, expected: str) -> None:
    assert quoted(value) == expected


def test_the_caller_chooses_how_a_label_is_shown() -> None:
    # given
    def show(value: str) -> str:
        return f"<{value}>"

    # then every message quoting a label uses it
    assert "label <-bad>" in (input_problem("-bad.com", wildcard=False, show=show) or "")
    assert "label <xn--zz>" in (hostname_problem("xn--zz.com", wildcard=False, show=show) or "")
    assert "label <p\u0430ypal>" in (script_problem("p\u0430ypal", show=show) or "")
    with pytest.raises(ValueError, match="label <\U0001f600>"):
        normalize_hostname("\U0001f600.com", show=show)


# --- the editors apply the rules ------------------------------------------------------------


@pytest.mark.parametrize("entry", ["xn--zz.com", "xn--pypal-4ve.com", "1.2.3.4", "*.acme.com"])
def test_an_editor_refuses_an_entry_the_rules_refuse(entry: str) -> None:
    with pytest.raises(Rejected) as raised:
        NGINX_HOSTS.add("server:\n  hosts: []\n", [entry])

    assert raised.value.code == "invalid_entry"


def test_a_hand_written_wildcard_in_a_helm_hosts_list_is_kept() -> None:
    # given
    text = "server:\n  hosts:\n    - '*.acme.com'\n    - acme.com\n"

    # when
    added = NGINX_HOSTS.add(text, ["example.com"])

    # then
    assert NGINX_HOSTS.entries(added) == ["*.acme.com", "acme.com", "example.com"]
    assert NGINX_HOSTS.remove(added, ["example.com"]) == text


def test_a_helm_hosts_list_with_an_invalid_a_label_is_malformed() -> None:
    with pytest.raises(Rejected) as raised:
        NGINX_HOSTS.entries("server:\n  hosts:\n    - xn--zz.com\n")

    assert raised.value.code == "malformed_file"


def test_an_ip_address_in_a_server_name_list_is_kept_and_owned_by_nobody() -> None:
    # given
    text = "server_name\n    10.0.0.1\n    acme.com\n    ;\n"

    # when
    added = DEIMOS_SERVER_NAMES.add(text, ["example.com"])

    # then
    assert DEIMOS_SERVER_NAMES.entries(added) == ["acme.com", "example.com"]
    assert DEIMOS_SERVER_NAMES.remove(added, ["example.com"]) == text
