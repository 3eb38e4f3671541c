"""The routing file editors and the commit messages that record what a commit owns.

Properties (hypothesis): adding entries is idempotent, and adding then removing the entries an
add wrote gives back the original bytes, also when someone else added entries in between.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.errors import Rejected
from providers.gitops import editors
from providers.gitops.editors import CALIPSO_CORS, DEIMOS_SERVER_NAMES, KIRBY_ROUTING, NGINX_HOSTS
from providers.gitops.messages import (
    CommitMessage,
    MessageError,
    OwnedEntry,
    add_message,
    check_operation,
    parse_message,
    remove_message,
)
from providers.sandbox import github_seed

SEEDS = {
    "nginx-hosts": (NGINX_HOSTS, github_seed.NGINX_VALUES),
    "kirby-routing": (KIRBY_ROUTING, github_seed.MYSTIQUE_VALUES),
    "calipso": (CALIPSO_CORS, github_seed.CALIPSO_CORS),
    "deimos": (DEIMOS_SERVER_NAMES, github_seed.DEIMOS_SERVER_NAMES),
}
ALL = pytest.mark.parametrize(("editor", "seed"), SEEDS.values(), ids=SEEDS.keys())


# -- entries for a domain ------------------------------------------------------------------------


def test_the_entries_for_a_domain_are_the_domain_and_its_www_name() -> None:
    assert NGINX_HOSTS.entries_for("example.com") == ["example.com", "www.example.com"]
    assert KIRBY_ROUTING.entries_for("example.com") == ["example.com", "www.example.com"]
    assert DEIMOS_SERVER_NAMES.entries_for("example.com") == ["example.com", "www.example.com"]
    # one CORS line admits both origins
    assert CALIPSO_CORS.entries_for("example.com") == ["example.com"]
    # a www. domain has no www.www. name
    assert NGINX_HOSTS.entries_for("www.example.com") == ["www.example.com"]


@pytest.mark.parametrize(
    "entry",
    [
        "Example.com",
        "example",
        "-bad.example.com",
        "*.example.com",
        "exa mple.com",
        "bücher.de",
        "example.com.",
        " example.com",
        "a" * 64 + ".com",
        "",
    ],
)
@ALL
def test_an_invalid_entry_is_rejected(editor: editors.FileEditor, seed: str, entry: str) -> None:
    with pytest.raises(Rejected) as raised:
        editor.add(seed, [entry])

    assert raised.value.code == "invalid_entry"
    assert repr(entry) in raised.value.message


def test_punycode_entries_are_accepted() -> None:
    added = NGINX_HOSTS.add(github_seed.NGINX_VALUES, ["xn--bcher-kva.de"])

    assert "xn--bcher-kva.de" in NGINX_HOSTS.entries(added)


# -- add and remove on the seed files ------------------------------------------------------------


@ALL
def test_adding_appends_only_missing_entries_and_is_idempotent(
    editor: editors.FileEditor, seed: str
) -> None:
    # given
    before = editor.entries(seed)
    present = before[0]

    # when
    once = editor.add(seed, [present, "example.com", "www.example.com"])
    twice = editor.add(once, ["example.com", "www.example.com", present])

    # then
    assert editor.entries(once) == [*before, "example.com", "www.example.com"]
    assert twice == once
    assert editor.add(seed, [present]) == seed


@ALL
def test_removing_touches_only_the_named_entries(editor: editors.FileEditor, seed: str) -> None:
    # given example.com and www.example.com were added, and someone added blog.example.com
    added = editor.add(editor.add(seed, ["example.com", "www.example.com"]), ["blog.example.com"])

    # when only example.com is removed (the commit owned just that one)
    removed = editor.remove(added, ["example.com", "not-there.example.org"])

    # then
    assert editor.entries(removed) == [*editor.entries(seed), "www.example.com", "blog.example.com"]
    assert editor.remove(seed, ["not-there.example.org"]) == seed


def test_new_yaml_entries_keep_the_comments_around_the_list_in_place() -> None:
    text = (
        "server:\n"
        "  hosts:\n"
        "    - acme.com  # apex\n"
        "    # the shop\n"
        "    - shop.acme.com\n"
        "  # timeouts below\n"
        "  timeout: 60s\n"
    )

    added = NGINX_HOSTS.add(text, ["example.com"])

    assert added == (
        "server:\n"
        "  hosts:\n"
        "    - acme.com  # apex\n"
        "    # the shop\n"
        "    - shop.acme.com\n"
        "    - example.com\n"
        "  # timeouts below\n"
        "  timeout: 60s\n"
    )
    assert NGINX_HOSTS.remove(added, ["example.com"]) == text


def test_removing_a_yaml_entry_keeps_the_comment_lines_that_followed_it() -> None:
    text = (
        "server:\n"
        "  hosts:\n"
        "    - example.com\n"
        "    # legacy names\n"
        "    - old.acme.com\n"
        "    - www.example.com  # www\n"
        "    # end of list\n"
        "  timeout: 60s\n"
    )

    removed = NGINX_HOSTS.remove(text, ["example.com", "www.example.com"])

    assert removed == (
        "server:\n"
        "  hosts:\n"
        "    # legacy names\n"
        "    - old.acme.com\n"
        "    # end of list\n"
        "  timeout: 60s\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "server:\n  hosts: []\n\nresources:\n  limits: 1\n",
        "server:\n  hosts: []  # filled by Alfred\n  # keep sorted\n  timeout: 60s\n",
        "server:\n  hosts: []\n",
    ],
    ids=["blank-line", "comments", "last-line"],
)
def test_a_list_emptied_again_keeps_the_comments_around_it(text: str) -> None:
    # given the empty list received entries
    added = NGINX_HOSTS.add(text, ["example.com", "www.example.com"])
    assert "hosts:\n" in added or "hosts:  # filled by Alfred\n" in added

    # when they are removed again
    removed = NGINX_HOSTS.remove(added, ["example.com", "www.example.com"])

    # then
    assert removed == text


def test_removing_every_entry_keeps_hand_written_comments_after_the_empty_list() -> None:
    text = "server:\n  hosts:\n    # first\n    - a.com\n    # after\n  timeout: 1\n"

    removed = NGINX_HOSTS.remove(text, ["a.com"])

    assert removed == "server:\n  hosts: []\n    # first\n    # after\n  timeout: 1\n"


def test_yaml_in_another_indentation_style_is_edited_in_that_style() -> None:
    text = "mystique:\n  kirby:\n    hosts:\n    - blog.acme.com\n  replicaCount: 2\n"

    added = KIRBY_ROUTING.add(text, ["example.com"])

    assert added == (
        "mystique:\n  kirby:\n    hosts:\n    - blog.acme.com\n    - example.com\n"
        "  replicaCount: 2\n"
    )


def test_an_empty_yaml_list_grows_and_shrinks_back() -> None:
    text = "server:\n  hosts: []\n  timeout: 60s\n"

    added = NGINX_HOSTS.add(text, ["example.com", "www.example.com"])

    assert NGINX_HOSTS.entries(added) == ["example.com", "www.example.com"]
    assert NGINX_HOSTS.remove(added, ["example.com", "www.example.com"]) == text


def test_text_editors_keep_crlf_line_endings() -> None:
    text = github_seed.DEIMOS_SERVER_NAMES.replace("\n", "\r\n")

    added = DEIMOS_SERVER_NAMES.add(text, ["example.com"])

    assert "    example.com\r\n    ;\r\n" in added
    assert "\n" not in added.replace("\r\n", "")
    assert DEIMOS_SERVER_NAMES.remove(added, ["example.com"]) == text


def test_calipso_entries_are_regex_lines_that_admit_d_and_www_d() -> None:
    added = CALIPSO_CORS.add(github_seed.CALIPSO_CORS, ["example.com", "www.example.org"])

    line = next(line for line in added.splitlines() if "example\\.com" in line)
    pattern = re.search(r'"~(.*)"', line)
    assert pattern is not None
    assert line == '    "~^https://(www\\.)?example\\.com$" $http_origin;'
    assert re.fullmatch(pattern[1], "https://example.com")
    assert re.fullmatch(pattern[1], "https://www.example.com")
    assert not re.fullmatch(pattern[1], "https://evil-example.com")
    assert '    "~^https://www\\.example\\.org$" $http_origin;' in added.splitlines()
    # a literal origin is kept but is nobody's entry
    assert "portal.partner-travel.example" not in CALIPSO_CORS.entries(added)


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server:\n  hosts:\n    - a.com\n   - b.com\n", "not valid YAML"),
        ("server:\n  names:\n    - a.com\n", "no server.hosts here"),
        ("- a.com\n", "no server here"),
        ("server:\n  hosts: a.com\n", "must be a list"),
        ("server:\n  hosts:\n    - 8080\n", r"server.hosts\[0\] is not a hostname"),
        ("server:\n  hosts:\n    - a.com\n    - a.com\n", "lists 'a.com' twice"),
        ("server:\n  hosts:\n    - Not_A_Host\n", "must be normalized"),
        ("server:\n  hosts:\n    - a.com\n  timeout:    60s\n", "round trip"),
    ],
    ids=[
        "syntax",
        "no-list",
        "not-a-map",
        "scalar",
        "number",
        "duplicate",
        "bad-host",
        "odd-spacing",
    ],
)
def test_a_malformed_values_file_is_rejected(text: str, message: str) -> None:
    with pytest.raises(Rejected, match=message) as raised:
        NGINX_HOSTS.add(text, ["example.com"])

    assert raised.value.code == "malformed_file"


def test_a_yaml_syntax_error_names_its_line() -> None:
    with pytest.raises(Rejected) as raised:
        NGINX_HOSTS.entries("server:\n  hosts:\n    - a.com\n   - b.com\n")

    assert raised.value.details["line"] == 4


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("# nothing\n", "no map \\$http_origin", None),
        ('map $http_origin $cors_allow_origin {\n    default "";\n', "not closed", 1),
        (
            "map $http_origin $cors_allow_origin {\n}\nmap $http_origin $cors_allow_origin {\n}\n",
            "a second",
            3,
        ),
        ("map $http_origin $cors_allow_origin {\n    garbage\n}\n", "expected", 2),
        ("server_tokens off;\nmap $http_origin $cors_allow_origin {\n}\n", "only comments", 1),
        (
            'map $http_origin $cors_allow_origin {\n    "~^https://(www\\.)?a\\.com$" "";\n}\n',
            "maps to",
            2,
        ),
        ('map $http_origin $cors_allow_origin {\n    "~^https://(a.com$" 1;\n}\n', "regular", 2),
        ("map $http_origin $cors_allow_origin {\n    default 1;\n    default 2;\n}\n", "twice", 3),
    ],
    ids=["no-map", "unclosed", "two-maps", "garbage", "outside", "wrong-value", "bad-regex", "dup"],
)
def test_a_malformed_cors_map_is_rejected_with_its_line(
    text: str, message: str, line: int | None
) -> None:
    with pytest.raises(Rejected, match=message) as raised:
        CALIPSO_CORS.add(text, ["example.com"])

    assert raised.value.code == "malformed_file"
    assert raised.value.details.get("line") == line


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("# nothing\n", "no server_name", None),
        ("server_name\n    a.com\n", "not closed", 1),
        ("server_name\n    a.com b.com\n    ;\n", "one server name per line", 2),
        ("server_name\n    A.com\n    ;\n", "must be normalized", 2),
        ("server_name\n    a.com\n    a.com\n    ;\n", "twice", 3),
        ("server_name\n    a.com\n    ;\nlisten 80;\n", "only comments", 4),
    ],
    ids=["none", "unterminated", "two-per-line", "upper-case", "duplicate", "outside"],
)
def test_a_malformed_server_name_list_is_rejected_with_its_line(
    text: str, message: str, line: int | None
) -> None:
    with pytest.raises(Rejected, match=message) as raised:
        DEIMOS_SERVER_NAMES.add(text, ["example.com"])

    assert raised.value.code == "malformed_file"
    assert raised.value.details.get("line") == line


def test_server_names_that_are_not_hostnames_are_kept_and_owned_by_nobody() -> None:
    text = (
        "server_name\n    _\n    *.acme.com\n    ~^(?<sub>.+)\\.acme\\.com$\n    acme.com\n    ;\n"
    )

    added = DEIMOS_SERVER_NAMES.add(text, ["example.com"])

    assert DEIMOS_SERVER_NAMES.entries(added) == ["acme.com", "example.com"]
    assert DEIMOS_SERVER_NAMES.remove(added, ["example.com"]) == text


# -- properties ----------------------------------------------------------------------------------

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
HOSTNAME = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(LABEL, min_size=1, max_size=3),
    st.sampled_from(["com", "org", "io", "travel"]),
)
HOSTNAMES = st.lists(HOSTNAME, unique=True, max_size=6)
NEW = st.lists(HOSTNAME, min_size=1, max_size=4)
COMMENT = st.sampled_from(["# note", "# OPS-1841: partner", "#"])


@st.composite
def values_files(draw: st.DrawFn) -> str:
    hosts = draw(HOSTNAMES)
    lines = []
    if draw(st.booleans()):
        lines += ["# Helm values", ""]
    lines += ["replicaCount: 3", "server:"]
    if draw(st.booleans()):
        lines.append("  # the hosts")
    key_eol = draw(st.sampled_from(["", "  # managed by Alfred"]))
    if not hosts:
        lines.append(f"  hosts: []{key_eol}")
    else:
        lines.append(f"  hosts:{key_eol}")
        for host in hosts:
            lines += draw(st.sampled_from([[], [f"    {draw(COMMENT)}"], [""]]))
            quote = draw(st.sampled_from(["", '"']))
            eol = draw(st.sampled_from(["", "  # eol"]))
            lines.append(f"    - {quote}{host}{quote}{eol}")
    lines += draw(st.sampled_from([[], ["    # trailing"], ["  # next key"], [""]]))
    if draw(st.booleans()):
        lines.append("  timeout: 60s")
    if draw(st.booleans()):
        lines += ["", "resources:", "  limits:", "    memory: 512Mi"]
    return "\n".join(lines) + "\n"


def _origin(host: str) -> str:
    return f'    "~^https://(www\\.)?{host.replace(".", chr(92) + ".")}$" $http_origin;'


@st.composite
def cors_maps(draw: st.DrawFn) -> str:
    body = ['    default "";'] if draw(st.booleans()) else []
    for host in draw(HOSTNAMES):
        if draw(st.booleans()):
            body.append(f"    {draw(COMMENT)}")
        body.append(_origin(host) + draw(st.sampled_from(["", "  # booked"])))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(body)))
        body.insert(at, '    "https://portal.partner.example" $http_origin;')
    head = ["# Calipso CORS", ""] if draw(st.booleans()) else []
    tail = ["", "# end"] if draw(st.booleans()) else []
    lines = [*head, "map $http_origin $cors_allow_origin {", *body, "}", *tail]
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


@st.composite
def server_name_lists(draw: st.DrawFn) -> str:
    body = []
    for host in draw(HOSTNAMES):
        if draw(st.booleans()):
            body.append(f"    {draw(COMMENT)}")
        body.append(f"    {host}" + draw(st.sampled_from(["", "  # booked"])))
    if draw(st.booleans()):
        body.insert(draw(st.integers(0, len(body))), "    *.acme.com")
    head = ["# next-deimos", ""] if draw(st.booleans()) else []
    return "\n".join([*head, "server_name", *body, "    ;"]) + "\n"


FILES: dict[str, tuple[editors.FileEditor, st.SearchStrategy[str]]] = {
    "nginx-hosts": (NGINX_HOSTS, values_files()),
    "calipso": (CALIPSO_CORS, cors_maps()),
    "deimos": (DEIMOS_SERVER_NAMES, server_name_lists()),
}


@pytest.mark.parametrize("name", FILES)
@settings(max_examples=100, deadline=None)
@given(data=st.data(), new=NEW, later=NEW)
def test_adding_then_removing_the_owned_entries_gives_back_the_original_bytes(
    name: str, data: st.DataObject, new: list[str], later: list[str]
) -> None:
    editor, files = FILES[name]
    # given any well-formed file
    text = data.draw(files)
    before = editor.entries(text)

    # when entries are added, and someone else adds more afterwards
    added = editor.add(text, new)
    owned = [host for host in dict.fromkeys(new) if host not in before]
    theirs = editor.add(added, later)
    their_own = [host for host in dict.fromkeys(later) if host not in before + owned]

    # then only the missing entries were written, at the end, and adding is idempotent
    assert editor.entries(added) == before + owned
    assert editor.add(added, new) == added
    # and removing what the add owned gives back the original bytes...
    assert editor.remove(added, owned) == text
    # ...also after the other additions, which stay as if the add had never happened
    assert editor.remove(theirs, owned) == editor.add(text, their_own)


# -- commit messages ---------------------------------------------------------------------------


def test_a_commit_message_renders_and_parses_back() -> None:
    # given
    entries = [
        OwnedEntry("calipso/cors-origins.conf", "example.com"),
        OwnedEntry("next-deimos/server-names.conf", "example.com"),
        OwnedEntry("next-deimos/server-names.conf", "www.example.com"),
    ]
    message = add_message("nginx-booking", "example.com", entries, operation="exec-1:booking")

    # when
    text = message.render()
    parsed = parse_message(text)

    # then
    assert text.startswith("feat(nginx-booking): add example.com\n\n")
    assert "\nAlfred-Operation: exec-1:booking\n" in text
    assert "\nAlfred-Entry: next-deimos/server-names.conf: www.example.com\n" in text
    assert parsed == message
    assert parsed is not None and parsed.action == "add"


def test_a_removal_names_the_commit_it_reverts() -> None:
    sha = "a" * 40
    removal = remove_message(
        "nginx-hosts",
        "example.com",
        [OwnedEntry("charts/nginx/values.yaml", "example.com")],
        operation="exec-1:rollback",
        reverts=sha,
    )
    cleanup = remove_message("nginx-hosts", "example.com", [], operation="x", reverts=None)

    parsed = parse_message(removal.render())

    assert removal.subject == "revert(nginx-hosts): remove example.com"
    assert cleanup.subject == "chore(nginx-hosts): remove example.com"
    assert parsed is not None and parsed.reverts == sha and parsed.action == "remove"


def test_only_alfred_commits_parse_and_trailers_come_from_the_last_paragraph() -> None:
    quoted = (
        "feat(nginx-hosts): add example.com\n\n"
        "Someone pasted\nAlfred-Operation: not-this-one\n\n"
        "Alfred-Operation: op-1\nCo-authored-by: A <a@example.com>\n"
    )

    parsed = parse_message(quoted)

    assert parsed is not None and parsed.operation == "op-1"
    assert parse_message("docs: notes\n") is None
    assert parse_message("feat(nginx-hosts): add example.com\n\nNo trailers.\n") is None
    assert parse_message("Merge branch 'main'\n\nAlfred-Operation: op-1\n") is None


def test_an_operation_identity_matches_itself_only() -> None:
    message = add_message("nginx-hosts", "example.com", [], operation="op-10")

    parsed = parse_message(message.render())

    assert parsed is not None
    assert parsed.operation == "op-10"
    assert parsed.operation != "op-1"


@pytest.mark.parametrize("identity", ["", " op", "op\nAlfred-Operation: other", "x" * 201])
def test_an_identity_that_does_not_fit_one_trailer_line_is_refused(identity: str) -> None:
    with pytest.raises(MessageError):
        check_operation(identity)
    with pytest.raises(MessageError):
        CommitMessage("feat", "nginx-hosts", "add example.com", identity).render()
