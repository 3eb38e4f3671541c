"""File editors for the platform routing files: parse, list, add, remove, validate.

Four files, two formats (the demo seed in ``providers/sandbox/github_seed.py`` shows each):

- **Helm values (YAML)**, edited with ruamel.yaml in round-trip mode so comments, key order,
  quoting and indentation survive: the nginx hosts (``charts/nginx/values.yaml``, the list at
  ``server.hosts``) and the Mystique Kirby routing (``charts/mystique/values.yaml``, the list at
  ``mystique.kirby.hosts``). One hostname per list item.
- **nginx booking snippets**, edited line by line: the Calipso CORS map
  (``calipso/cors-origins.conf``: one ``map $http_origin $cors_allow_origin { ... }`` block,
  one ``"<origin pattern>" <value>;`` line per origin) and the next-deimos server names
  (``next-deimos/server-names.conf``: one ``server_name`` directive, one name per line, a
  lone ``;`` line ends it).

The entries for a domain D (:meth:`FileEditor.entries_for`), which an add commit owns:

- nginx hosts, Kirby routing, next-deimos server names: D and www.D (both names are served;
  when D itself starts with ``www.`` only D);
- Calipso CORS map: D alone, as one regex line ``"~^https://(www\\.)?D$" $http_origin;`` that
  admits the https origins of D and www.D (``"~^https://D$"`` when D starts with ``www.``).
  Other lines (literal origins, hand-written regexes) are kept as they are and are nobody's
  entries.

Rules shared by the four editors, which the tests check as properties:

- **Add is idempotent**: entries already present are left alone; only missing entries are
  written, so only those are owned by the commit that writes them.
- **New entries go at the end** of their list (after the last existing entry), in the order
  given, keeping the file's order; nothing else in the file changes. So adding entries and then
  removing the same entries gives back the original bytes.
- **Remove touches only the named entries**; entries that are absent are ignored.
- **Validation**: a malformed file or an invalid entry raises :class:`~providers.errors.Rejected`
  (``code`` ``malformed_file`` / ``invalid_entry``) with the line where it was found; the result
  of every edit is parsed again before it is returned. Entries are hostnames in the canonical
  form of :mod:`providers.hostnames` (lower-case, IDNA A-labels, no trailing dot) that pass its
  rules: normalizing is the caller's job, an editor refuses anything else rather than guess.
  An entry Alfred writes or removes is never a wildcard; a Helm hosts list may hold
  ``*.example.com`` written by hand (read with ``wildcard=True``, kept, owned by nobody); a
  ``server_name`` list may hold nginx's other forms (wildcards, regexes, ``_``, an IPv4
  address), kept as nobody's entries. A YAML file whose round trip through ruamel.yaml is not
  byte-identical is refused too: Alfred never commits a file it would reformat beyond the
  lines it means to change.
"""

from __future__ import annotations

import io
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken

from providers.errors import Rejected
from providers.hostnames import canonical_problem

PROVIDER = "gitops"


# -- entries -------------------------------------------------------------------------------


def check_entries(entries: Iterable[str]) -> list[str]:
    """``entries`` de-duplicated in order; Rejected for one that is not a hostname."""
    seen: dict[str, None] = {}
    for entry in entries:
        problem = canonical_problem(entry, wildcard=False)
        if problem:
            raise Rejected(
                f"invalid entry {entry!r}: {problem}",
                provider=PROVIDER,
                code="invalid_entry",
                details={"entry": entry},
            )
        seen.setdefault(entry, None)
    return list(seen)


def with_www(domain: str) -> list[str]:
    """D and www.D; D alone when its first label is already ``www``."""
    return [domain] if domain.startswith("www.") else [domain, f"www.{domain}"]


def _malformed(message: str, *, line: int | None = None) -> Rejected:
    where = f"line {line}: " if line is not None else ""
    return Rejected(
        where + message,
        provider=PROVIDER,
        code="malformed_file",
        details={"line": line} if line is not None else {},
    )


class FileEditor(Protocol):
    """One file format. Every method validates its input; add/remove return the new text."""

    label: str  # what the file is, for messages ("nginx hosts")

    def entries_for(self, domain: str) -> list[str]: ...

    def entries(self, text: str) -> list[str]: ...

    def add(self, text: str, entries: Iterable[str]) -> str: ...

    def remove(self, text: str, entries: Iterable[str]) -> str: ...


# -- Helm values (YAML) --------------------------------------------------------------------

# (mapping, sequence, offset) styles tried in order; the first that reproduces the file wins.
_YAML_STYLES = ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (4, 4, 0), (4, 2, 0))


@dataclass
class _YamlDoc:
    """A loaded values file and its list, with the edits that keep comments in place.

    ruamel keeps the comment lines that follow a list item (after the end-of-line comment on
    the item's own line, if any) in one token attached to that item; the end-of-line comment of
    ``key: []`` (or of ``key:`` above a block list) sits on the parent mapping's slot for the
    key. Appending after the last item or deleting an item would leave those lines in the wrong
    place, so :meth:`append` and :meth:`delete` move them along: comment lines stay after the
    entries they followed, whatever entries come and go."""

    yaml: YAML
    data: Any
    hosts: CommentedSeq
    parent: CommentedMap  # the mapping holding the list under ``key``
    key: str

    def dump(self) -> str:
        out = io.StringIO()
        self.yaml.dump(self.data, out)
        return out.getvalue()

    def append(self, items: list[str]) -> None:
        seq = self.hosts
        rest = ""
        if seq:
            own, rest = _split(self._post(len(seq) - 1))
            if rest:
                self._set_post(len(seq) - 1, own)
        else:
            # ``key: []  # comment`` becomes ``key:  # comment`` above a block list.
            seq.fa.set_block_style()
            eol = self._key_eol()
            if eol is not None:
                own, rest = _split(eol)
                eol.value = own
                eol.column = max(0, eol.column - _FLOW_EMPTY)
        seq.extend(items)
        if rest:
            self._set_post(len(seq) - 1, "\n" + rest)

    def delete(self, index: int) -> str:
        """Delete item ``index``; returns the comment lines that followed it when no item is
        left for them to follow (:meth:`dump_emptied` places them)."""
        seq = self.hosts
        _, rest = _split(self._post(index))
        del seq[index]
        if not rest:
            return ""
        if index > 0:
            own, before = _split(self._post(index - 1))
            self._set_post(index - 1, own + before + rest)
            return ""
        if not seq:
            return rest
        # The lines followed the first item: they now precede the new first item.
        if seq.ca.comment is None:
            seq.ca.comment = [None, []]
        elif seq.ca.comment[1] is None:
            seq.ca.comment[1] = []
        for line in rest.splitlines(keepends=True):
            stripped = line.lstrip(" ")
            seq.ca.comment[1].append(
                CommentToken(stripped, CommentMark(len(line) - len(stripped)), None)
            )
        return ""

    def dump_emptied(self, orphans: str) -> str:
        """Dump after the list became empty: ``key: []`` (YAML has no empty block list), the
        key's end-of-line comment after it, then the comment lines that stood before the first
        item and after the last. ruamel has no slot for comment lines after an empty flow
        list, so they go there through a marker comment replaced in the output."""
        seq = self.hosts
        seq.fa.set_flow_style()
        following = ""
        if seq.ca.comment is not None and seq.ca.comment[1]:
            for token in seq.ca.comment[1]:
                value = token.value
                following += value if value.startswith("\n") else " " * token.column + value
        eol = self._key_eol()
        slot = self.parent.ca.items.get(self.key)
        if slot is not None:
            slot[2] = slot[3] = None
            if not any(slot):
                del self.parent.ca.items[self.key]
        seq.ca.comment = None
        if eol is not None:
            own, after = _split(eol)
            following = after + following
            eol.value = own
            eol.column = eol.column + _FLOW_EMPTY
            if own == "\n":
                eol = None
        following += orphans
        if not following:
            if eol is not None:
                self._set_key_eol(eol)
            return self.dump()
        if eol is not None:
            eol.value = eol.value.rstrip("\n") + f" {_ORPHANS}\n"
            marker = eol
        else:
            marker = CommentToken(f"# {_ORPHANS}\n", CommentMark(0), None)
        self._set_key_eol(marker)
        dumped = self.dump()
        pattern = re.compile(r"(?: +# | )" + _ORPHANS + "\n")
        if len(pattern.findall(dumped)) != 1:
            raise _malformed(f"could not keep the comments after the emptied {self.key} list")
        return pattern.sub(lambda _: "\n" + following, dumped)

    def _key_eol(self) -> CommentToken | None:
        slot = self.parent.ca.items.get(self.key)
        return slot[2] if slot is not None else None

    def _set_key_eol(self, token: CommentToken) -> None:
        # Where the loader puts it: the parent's slot for the key and the list's own comment.
        self.parent.ca.items.setdefault(self.key, [None, None, None, None])[2] = token
        self.hosts.ca.comment = [token, None]

    def _post(self, index: int) -> CommentToken | None:
        slot = self.hosts.ca.items.get(index)
        return slot[0] if slot else None

    def _set_post(self, index: int, value: str) -> None:
        items = self.hosts.ca.items
        slot = items.get(index)
        if value == "\n":
            if slot is not None:
                slot[0] = None
                if not any(slot):
                    del items[index]
            return
        if slot is not None and slot[0] is not None:
            slot[0].value = value
        elif slot is not None:
            slot[0] = CommentToken(value, CommentMark(0), None)
        else:
            items[index] = [CommentToken(value, CommentMark(0), None), None, None, None]


_FLOW_EMPTY = len(" []")
_ORPHANS = "alfred-comment-lines-after-the-emptied-list"


def _split(token: CommentToken | None) -> tuple[str, str]:
    """(the end of the item's own line, the comment lines after it)."""
    if token is None:
        return "\n", ""
    own, newline, rest = token.value.partition("\n")
    return own + newline, rest


class YamlHostsEditor:
    """A list of hostnames at ``keys`` in a Helm values file.

    The list must exist (``hosts: []`` when empty): Alfred edits values files, it does not
    invent their structure."""

    def __init__(self, keys: Sequence[str], *, label: str, include_www: bool = True) -> None:
        self.keys = tuple(keys)
        self.label = label
        self.include_www = include_www

    @property
    def where(self) -> str:
        return ".".join(self.keys)

    def entries_for(self, domain: str) -> list[str]:
        check_entries([domain])
        return with_www(domain) if self.include_www else [domain]

    def entries(self, text: str) -> list[str]:
        return [str(item) for item in self._load(text).hosts]

    def add(self, text: str, entries: Iterable[str]) -> str:
        doc = self._load(text)
        present = {str(item) for item in doc.hosts}
        new = [entry for entry in check_entries(entries) if entry not in present]
        if not new:
            return text
        doc.append(new)
        return self._checked(doc.dump(), present=new)

    def remove(self, text: str, entries: Iterable[str]) -> str:
        doc = self._load(text)
        owned = set(check_entries(entries))
        doomed = [i for i, item in enumerate(doc.hosts) if str(item) in owned]
        if not doomed:
            return text
        orphans = ""
        for index in reversed(doomed):
            orphans = doc.delete(index)
        dumped = doc.dump_emptied(orphans) if not doc.hosts else doc.dump()
        return self._checked(dumped, absent=owned)

    def _checked(
        self, text: str, *, present: Iterable[str] = (), absent: Iterable[str] = ()
    ) -> str:
        after = set(self.entries(text))
        if not set(present) <= after or after & set(absent):
            raise _malformed(f"the edited {self.where} did not come out as intended")
        return text

    def _load(self, text: str) -> _YamlDoc:
        base = YAML(typ="rt")
        base.preserve_quotes = True
        try:
            data = base.load(text)
        except YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else None
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise _malformed(f"not valid YAML: {problem}", line=line) from exc
        node: Any = data
        parent: Any = None
        for depth, key in enumerate(self.keys):
            if not isinstance(node, CommentedMap) or key not in node:
                at = ".".join(self.keys[: depth + 1])
                raise _malformed(f"no {at} here; the values must declare {self.where} (a list)")
            parent, node = node, node[key]
        if not isinstance(node, CommentedSeq):
            raise _malformed(f"{self.where} must be a list of hostnames")
        seen: set[str] = set()
        for index, item in enumerate(node):
            line = node.lc.item(index)[0] + 1 if index in node.lc.data else None
            if not isinstance(item, str):
                raise _malformed(f"{self.where}[{index}] is not a hostname: {item!r}", line=line)
            problem = canonical_problem(str(item), wildcard=True)
            if problem:
                raise _malformed(f"{self.where}[{index}] {str(item)!r} {problem}", line=line)
            if item in seen:
                raise _malformed(f"{self.where} lists {str(item)!r} twice", line=line)
            seen.add(str(item))
        for mapping, sequence, offset in _YAML_STYLES:
            yaml = YAML(typ="rt")
            yaml.preserve_quotes = True
            yaml.width = 4096
            yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
            yaml.explicit_start = text.startswith("---")
            doc = _YamlDoc(yaml, data, node, parent, self.keys[-1])
            if doc.dump() == text:
                return doc
        raise _malformed(
            "the file does not survive a YAML round trip unchanged (unusual indentation, "
            "spacing or a multi-document file); normalize it before Alfred edits it"
        )


# -- nginx snippets (line-wise) ------------------------------------------------------------

_BLANK_OR_COMMENT = re.compile(r"\s*(?:#.*)?")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")


@dataclass(frozen=True)
class _Item:
    index: int  # into the line list
    indent: str
    key: str  # the map key / the server name, as written
    entry: str | None  # the hostname it is Alfred's entry for, if it is one


@dataclass(frozen=True)
class _Block:
    lines: list[str]
    opener: int
    closer: int
    items: list[_Item]
    newline: str


class _BlockEditor:
    """A file holding one block (opener line, item lines, closer line) and comments around it.
    Subclasses say what the opener, an item and the closer look like."""

    label = ""
    opener_re: re.Pattern[str]
    closer_re: re.Pattern[str]
    block_name = ""

    def _item(self, number: int, body: str) -> tuple[str, str, str | None]:
        """(indent, key, entry) for an item line, or raise malformed."""
        raise NotImplementedError

    def _render(self, indent: str, entry: str) -> str:
        raise NotImplementedError

    def entries_for(self, domain: str) -> list[str]:
        raise NotImplementedError

    def entries(self, text: str) -> list[str]:
        return [item.entry for item in self._parse(text).items if item.entry]

    def add(self, text: str, entries: Iterable[str]) -> str:
        block = self._parse(text)
        present = {item.entry for item in block.items}
        new = [entry for entry in check_entries(entries) if entry not in present]
        if not new:
            return text
        after = block.items[-1] if block.items else None
        indent = after.indent if after else "    "
        at = (after.index if after else block.opener) + 1
        lines = list(block.lines)
        lines[at:at] = [self._render(indent, entry) + block.newline for entry in new]
        result = "".join(lines)
        if not set(new) <= set(self.entries(result)):
            raise _malformed(f"the edited {self.label} did not come out as intended")
        return result

    def remove(self, text: str, entries: Iterable[str]) -> str:
        block = self._parse(text)
        owned = set(check_entries(entries))
        doomed = {item.index for item in block.items if item.entry in owned}
        if not doomed:
            return text
        result = "".join(line for i, line in enumerate(block.lines) if i not in doomed)
        if set(self.entries(result)) & owned:
            raise _malformed(f"the edited {self.label} did not come out as intended")
        return result

    def _parse(self, text: str) -> _Block:
        lines = _LINE.findall(text)
        opener = closer = None
        items: list[_Item] = []
        keys: dict[str, int] = {}
        for index, line in enumerate(lines):
            number = index + 1
            body = line.rstrip("\r\n")
            inside = opener is not None and closer is None
            if not inside:
                if self.opener_re.fullmatch(body):
                    if opener is not None:
                        raise _malformed(f"a second {self.block_name} block", line=number)
                    opener = index
                    continue
                if _BLANK_OR_COMMENT.fullmatch(body):
                    continue
                raise _malformed(
                    f"only comments may stand outside the {self.block_name} block, "
                    f"found {body.strip()!r}",
                    line=number,
                )
            if self.closer_re.fullmatch(body):
                closer = index
                continue
            if _BLANK_OR_COMMENT.fullmatch(body):
                continue
            indent, key, entry = self._item(number, body)
            if key in keys:
                raise _malformed(f"{key} appears twice (also on line {keys[key]})", line=number)
            if entry is not None and any(item.entry == entry for item in items):
                raise _malformed(f"a second entry for {entry}", line=number)
            keys[key] = number
            items.append(_Item(index, indent, key, entry))
        if opener is None:
            raise _malformed(f"no {self.block_name} block")
        if closer is None:
            raise _malformed(f"the {self.block_name} block is not closed", line=opener + 1)
        newline = "\r\n" if lines[opener].endswith("\r\n") else "\n"
        return _Block(lines, opener, closer, items, newline)


_MAP_OPENER = re.compile(r"\s*map\s+\$http_origin\s+\$cors_allow_origin\s*\{\s*(?:#.*)?")
_MAP_CLOSER = re.compile(r"\s*\}\s*(?:#.*)?")
_MAP_ITEM = re.compile(
    r'(?P<indent>\s*)(?P<key>"(?:[^"\\]|\\.)*"|[^\s"#;{}]+)\s+'
    r'(?P<value>"[^"]*"|[^\s"#;{}]+)\s*;\s*(?:#.*)?'
)
_HOST_PATTERN = r"(?P<host>[a-z0-9-]+(?:\\\.[a-z0-9-]+)+)"
_MANAGED_ORIGIN = re.compile(rf'"~\^https://(?P<www>\(www\\\.\)\?)?{_HOST_PATTERN}\$"')
ALLOW_ORIGIN = "$http_origin"


class CorsMapEditor(_BlockEditor):
    """Calipso's CORS map: which browser origins may call the API with credentials.

    ``default "";`` denies; each allowed origin is a line mapping an origin pattern to
    ``$http_origin`` (echo it back). Alfred's entry for D is the regex line admitting
    ``https://D`` and ``https://www.D``."""

    label = "Calipso CORS map"
    block_name = "map $http_origin $cors_allow_origin"
    opener_re = _MAP_OPENER
    closer_re = _MAP_CLOSER

    def entries_for(self, domain: str) -> list[str]:
        return check_entries([domain])

    def _item(self, number: int, body: str) -> tuple[str, str, str | None]:
        match = _MAP_ITEM.fullmatch(body)
        if match is None:
            raise _malformed(
                f"expected '\"<origin>\" <value>;' inside the map, found {body.strip()!r}",
                line=number,
            )
        key, value = match["key"], match["value"]
        pattern = key.strip('"')
        if pattern.startswith("~"):
            try:
                re.compile(pattern.removeprefix("~*").removeprefix("~"))
            except re.error as exc:
                raise _malformed(
                    f"{key} is not a valid regular expression: {exc}", line=number
                ) from exc
        managed = _MANAGED_ORIGIN.fullmatch(key)
        if managed is None:
            return match["indent"], key, None
        host = managed["host"].replace("\\.", ".")
        if value != ALLOW_ORIGIN:
            raise _malformed(
                f"the origin entry for {host} maps to {value} instead of {ALLOW_ORIGIN}",
                line=number,
            )
        return match["indent"], key, host

    def _render(self, indent: str, entry: str) -> str:
        escaped = entry.replace(".", "\\.")
        www = "" if entry.startswith("www.") else "(www\\.)?"
        return f'{indent}"~^https://{www}{escaped}$" {ALLOW_ORIGIN};'


_SERVER_NAME_OPENER = re.compile(r"\s*server_name\s*(?:#.*)?")
_SERVER_NAME_CLOSER = re.compile(r"\s*;\s*(?:#.*)?")
_SERVER_NAME_ITEM = re.compile(r"(?P<indent>\s*)(?P<name>[^\s;#]+)\s*(?:#.*)?")


class ServerNamesEditor(_BlockEditor):
    """next-deimos's ``server_name`` list: one name per line, a lone ``;`` ends it.

    Plain hostnames are entries; other names nginx accepts (``*.example.com``,
    ``~^regex$``, ``_``, an IPv4 address) are kept and are nobody's entries."""

    label = "next-deimos server names"
    block_name = "server_name"
    opener_re = _SERVER_NAME_OPENER
    closer_re = _SERVER_NAME_CLOSER

    def entries_for(self, domain: str) -> list[str]:
        check_entries([domain])
        return with_www(domain)

    def _item(self, number: int, body: str) -> tuple[str, str, str | None]:
        match = _SERVER_NAME_ITEM.fullmatch(body)
        if match is None:
            raise _malformed(
                f"expected one server name per line, found {body.strip()!r}", line=number
            )
        name = match["name"]
        if name.startswith(("~", "*.", ".")) or name == "_" or name.endswith(".*"):
            return match["indent"], name, None
        if _is_ipv4(name):  # nginx matches an IP address as a name; not a hostname entry
            return match["indent"], name, None
        problem = canonical_problem(name, wildcard=False)
        if problem:
            raise _malformed(f"server name {name!r} {problem}", line=number)
        return match["indent"], name, name

    def _render(self, indent: str, entry: str) -> str:
        return f"{indent}{entry}"


def _is_ipv4(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


NGINX_HOSTS = YamlHostsEditor(("server", "hosts"), label="nginx hosts")
KIRBY_ROUTING = YamlHostsEditor(("mystique", "kirby", "hosts"), label="Mystique Kirby routing")
CALIPSO_CORS = CorsMapEditor()
DEIMOS_SERVER_NAMES = ServerNamesEditor()
