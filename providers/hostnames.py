"""The hostname rules: one copy, for the workflow inputs and the routing file editors alike.

Pure Python (``idna`` and ``unicodedata``): nothing here knows Django, executions or a
provider. A name is checked in two steps: :func:`normalize_hostname` turns what a client wrote
into the canonical form, and :func:`hostname_problem` says what is wrong with a canonical name
(or None). :func:`input_problem` does both for a client's raw string; :func:`canonical_problem`
checks a name that must already *be* canonical (an entry in a routing file: a caller that
should have normalized it is refused, not guessed at).

**The canonical form** is ASCII: lower-case, no surrounding whitespace, no trailing dot, every
internationalized label as its A-label (``xn--…``). A name with non-ASCII characters is first
mapped by UTS #46 (non-transitional: ``ß`` stays ``ß``; full-width letters and ideographic
dots are mapped), then each label is encoded under IDNA 2008 (RFC 5891; ``idna.alabel``),
which refuses disallowed code points, misplaced joiners and broken bidirectional labels.

**A valid hostname**, once canonical:

- at most 253 characters, and at least two labels (``example.com``; a bare ``com`` or
  ``localhost`` is not one);
- each label 1-63 characters of ``[a-z0-9-]``, not starting or ending with ``-``;
- an A-label must be one IDNA would produce: it decodes (punycode) to a valid U-label that
  encodes back to exactly the same A-label. ``xn--zz`` (no valid decoding) and ``xn--abc-``
  (a disguised ASCII label) are refused. Other labels with ``--`` in the third and fourth
  positions are reserved by RFC 5891 but plain LDH, and accepted;
- mixed scripts: the letters and marks of one label come from one script (Latin, Cyrillic,
  Greek, Arabic, ...), so ``pаypal.com`` with a Cyrillic ``а`` is refused, in either form.
  Following UTS #39's "highly restrictive" level, three combinations of the East Asian
  scripts are also allowed: Han with Hiragana and Katakana (Japanese), Han with Hangul
  (Korean) and Han with Bopomofo (Chinese). A character's script is the first word of its
  Unicode name (``CYRILLIC SMALL LETTER A``), so ``CJK`` and ``IDEOGRAPHIC`` are Han, and
  ``COMBINING`` marks take the script of the letter they sit on; digits and ``-`` belong to
  no script. Different labels may use different scripts (``пример.com``). A name entirely in
  one script that looks like a name in another (a whole-script confusable) passes: that needs
  a confusables table, not a script rule;
- the last label (the top-level domain) not all digits, so an IPv4 address such as
  ``1.2.3.4`` is not a hostname.

**Wildcards: only where the caller says so** (``wildcard``, keyword-only and required, so
every caller decides). With ``wildcard=True`` the first label may be exactly ``*`` — one
wildcard, leftmost, the whole label, as DNS (RFC 4592), ACM and nginx write it — and the rest
must be a valid hostname by every rule above (so ``*.com`` is refused: two labels after the
wildcard). ``*`` anywhere else, or inside a label (``*foo.example.com``), is never valid.
With ``wildcard=False`` a leading ``*`` label is refused as such ("a wildcard name is not
allowed here"). Who passes what:

- ``wildcard=True``: the add-certificate workflow's domain and alternative names (ACM issues
  ``*.example.com`` certificates); the names an editor *reads* from a Helm hosts list it
  edits (an operator may have listed ``*.example.com`` there; Alfred keeps it and never owns
  it).
- ``wildcard=False``: every other workflow input (zones, subdomains, the domain of
  add-domain and onboard-domain: Alfred creates records and routing for exactly that name),
  and every entry an editor *writes* or removes (Alfred's entries for a domain D are D and
  www.D, never a wildcard). nginx's own wildcard forms in a ``server_name`` list
  (``*.example.com``, ``.example.com``, ``example.*``) are kept by that editor as nobody's
  entries before these rules apply.

**Messages** say what is wrong in words a client can act on, and quote the offending label
with ``show``: by default :func:`quoted` (JSON-quoted with every non-ASCII and control
character escaped, so a homoglyph is visible, and cut after 40 escaped characters, so a message
stays bounded). A caller with its own
policy for showing client input passes its own function (the API passes
``alfred.problems.shown``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable

import idna

MAX_HOSTNAME_LENGTH = 253
WILDCARD = "*"
_LDH_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_ACE_PREFIX = "xn--"
# Unicode-name first words that are not the script's name, and marks that inherit a script.
_SCRIPT_ALIASES = {"CJK": "Han", "IDEOGRAPHIC": "Han", "KATAKANA-HIRAGANA": "Katakana"}
_INHERITED = frozenset({"COMBINING"})
# Beyond a single script, the combinations UTS #39 "highly restrictive" allows.
_SCRIPT_SETS = (
    frozenset({"Han", "Hiragana", "Katakana"}),
    frozenset({"Han", "Hangul"}),
    frozenset({"Han", "Bopomofo"}),
)

Show = Callable[[str], str]


def quoted(value: str, limit: int = 40) -> str:
    """``value`` JSON-quoted with every non-ASCII, control and surrogate character escaped,
    cut (``…``) after at most ``limit`` characters of the escaped text: the default way a
    message shows a label, bounded whatever the input."""
    pieces: list[str] = []
    used = 0
    for char in value:
        piece = json.dumps(char)[1:-1]
        if used + len(piece) > limit:
            return '"' + "".join(pieces) + '…"'
        pieces.append(piece)
        used += len(piece)
    return '"' + "".join(pieces) + '"'


# -- the canonical form ----------------------------------------------------------------------


def normalize_hostname(raw: str, *, show: Show = quoted) -> str:
    """The canonical form of ``raw``: strip, lower-case (UTS #46 mapping for a non-ASCII name),
    drop one trailing dot (the root's; a name that ends in two keeps both, so that
    normalizing again changes nothing: it is refused by the check), encode each non-ASCII
    label as its A-label. Raises ValueError (its
    message completes "not a valid hostname: ...") for a name IDNA rejects.

    Does not validate: see :func:`hostname_problem`."""
    name = raw.strip()
    if not name.isascii():
        try:
            name = idna.uts46_remap(name, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise ValueError(f"it {_idna_reason(exc)}") from None
    name = name.lower()
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    return ".".join(_ascii_label(label, show) for label in name.split("."))


def _idna_reason(exc: Exception) -> str:
    """Alfred's words for an ``idna`` refusal (its own messages quote the input)."""
    if isinstance(exc, idna.IDNABidiError):
        return "breaks the IDNA rules for right-to-left labels"
    if isinstance(exc, idna.InvalidCodepointContext):
        return "uses a joiner or a code point outside the context IDNA 2008 allows it in"
    if isinstance(exc, idna.InvalidCodepoint):
        return "holds a code point IDNA 2008 does not allow in a hostname"
    return "is not a valid internationalized label under IDNA 2008"


def _ascii_label(label: str, show: Show) -> str:
    if label.isascii():
        return label
    try:
        return idna.alabel(label).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(f"label {show(label)} {_idna_reason(exc)}") from None


# -- scripts ---------------------------------------------------------------------------------


def _script(char: str) -> str | None:
    """The script of a letter or mark by the first word of its Unicode name; None for what
    belongs to no script here (digits, '-', combining marks that inherit one)."""
    if unicodedata.category(char)[0] not in "LM":
        return None
    word = unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]
    if word in _INHERITED:
        return None
    return _SCRIPT_ALIASES.get(word, word.title())


def label_scripts(ulabel: str) -> frozenset[str]:
    """The scripts of the letters of one U-label (or ASCII label)."""
    return frozenset(script for char in ulabel if (script := _script(char)) is not None)


def script_problem(ulabel: str, *, show: Show = quoted) -> str | None:
    """What is wrong with the scripts of one U-label, or None (the module's policy)."""
    scripts = label_scripts(ulabel)
    if len(scripts) <= 1 or any(scripts <= allowed for allowed in _SCRIPT_SETS):
        return None
    return (
        f"label {show(ulabel)} mixes the scripts {', '.join(sorted(scripts))}; "
        "the letters of one label must come from one script"
    )


# -- validity --------------------------------------------------------------------------------


def _label_problem(label: str, show: Show) -> str | None:
    if not _LDH_LABEL.fullmatch(label):
        return (
            f"label {show(label)} must be 1-63 characters of a-z, 0-9 and '-', "
            "not starting or ending with '-'"
        )
    if not label.startswith(_ACE_PREFIX):
        return None
    try:
        ulabel = idna.ulabel(label)
        valid = idna.alabel(ulabel).decode("ascii") == label
    except (idna.IDNAError, UnicodeError, ValueError):
        valid = False
    if not valid:
        return (
            f"label {show(label)} is not a valid A-label: its punycode must decode to an "
            "internationalized label that encodes back to it"
        )
    return script_problem(ulabel, show=show)


def hostname_problem(name: str, *, wildcard: bool, show: Show = quoted) -> str | None:
    """What is wrong with the canonical ``name`` (see :func:`normalize_hostname`) as a
    hostname, or None; a ``*`` first label only where ``wildcard`` (the module docstring)."""
    if len(name) > MAX_HOSTNAME_LENGTH:
        return f"must be at most {MAX_HOSTNAME_LENGTH} characters once normalized"
    labels = name.split(".")
    if labels[0] == WILDCARD:
        if not wildcard:
            return "a wildcard name is not allowed here"
        labels = labels[1:]
    if len(labels) < 2:
        return "must have at least two labels, e.g. example.com"
    for label in labels:
        problem = _label_problem(label, show)
        if problem is not None:
            return problem
    if labels[-1].isdigit():
        return "the top-level label must not be all digits (an IP address is not a hostname)"
    return None


def input_problem(raw: str, *, wildcard: bool, show: Show = quoted) -> str | None:
    """What is wrong with ``raw``, as a client wrote it, as a hostname once normalized, or
    None: :func:`normalize_hostname`'s refusal or :func:`hostname_problem`'s."""
    try:
        return hostname_problem(normalize_hostname(raw, show=show), wildcard=wildcard, show=show)
    except ValueError as exc:
        return str(exc)


def canonical_problem(name: object, *, wildcard: bool, show: Show = quoted) -> str | None:
    """What is wrong with ``name`` as a hostname that must already be in the canonical form,
    or None. A name that is not canonical (upper case, surrounding whitespace, a trailing
    dot, a U-label) is refused rather than normalized: whoever wrote it should have."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if not name.isascii() or normalize_hostname(name, show=show) != name:
        return (
            "must be normalized (lower-case, IDNA-encoded, no surrounding whitespace, "
            "no trailing dot)"
        )
    return hostname_problem(name, wildcard=wildcard, show=show)
