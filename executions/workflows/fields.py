"""Field schemas and normalizers shared by the workflow definitions.

Two layers per field. The JSON Schema checks the raw *shape* of what a client may send
(type, length, a loose pattern that admits case and surrounding whitespace); the strict checks
that need normalization first (hostnames) run in ``check_semantics`` through the ``*_errors``
helpers here; the ``canonical_*`` helpers turn schema- and semantics-valid values into the one
normal form that the logical identity hashes.

Every string pattern admits surrounding whitespace and every canonical form strips it. That is
a contract choice, and also a guard: the jsonschema library matches ``pattern`` with Python's
``re.search``, where ``$`` also matches before a final newline, so ``"checkout-api\\n"`` passes
``^[a-z-]+$``. Stripping makes such input mean exactly what it would mean without the newline
instead of yielding a second lane key or identity.

Hostnames (domains, alternative names, zones, subdomains) are checked label by label:

- The canonical form is ASCII: lower-case, no trailing dot, every internationalized label as
  its A-label (``xn--…``). A name with non-ASCII characters is first mapped by UTS #46
  (non-transitional: ``ß`` stays ``ß``; full-width letters and ideographic dots are mapped),
  then each label is encoded under IDNA 2008 (RFC 5891; ``idna.alabel``), which refuses
  disallowed code points, misplaced joiners and broken bidirectional labels.
- An A-label sent as such must be one IDNA would produce: it decodes (punycode) to a valid
  U-label that encodes back to exactly the same A-label. ``xn--zz`` (no valid decoding) and
  ``xn--abc-`` (a disguised ASCII label) are refused. Other labels with ``--`` in the third
  and fourth positions are reserved by RFC 5891 but plain LDH, and accepted.
- Mixed scripts: the letters and marks of one label come from one script (Latin, Cyrillic,
  Greek, Arabic, ...), so ``pаypal.com`` with a Cyrillic ``а`` is refused, in either form.
  Following UTS #39's "highly restrictive" level, three combinations of the East Asian
  scripts are also allowed: Han with Hiragana and Katakana (Japanese), Han with Hangul
  (Korean) and Han with Bopomofo (Chinese). A character's script is the first word of its
  Unicode name (``CYRILLIC SMALL LETTER A``), so ``CJK`` and ``IDEOGRAPHIC`` are Han, and
  ``COMBINING`` marks take the script of the letter they sit on; digits and ``-`` belong to
  no script. Different labels may use different scripts (``пример.com``). A name entirely in
  one script that looks like a name in another (a whole-script confusable) passes: that needs
  a confusables table, not a script rule.
- At least two labels, at most 253 characters; each label 1-63 characters of ``[a-z0-9-]``
  not starting or ending with ``-``; the last label (the top-level domain) not all digits, so
  an IPv4 address such as ``1.2.3.4`` is not a hostname nor a zone.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import idna

from alfred.problems import shown
from executions.workflows.base import FieldError

MAX_HOSTNAME_LENGTH = 253
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
_LOOSE_NAME = r"^\s*\S+\s*$"


def hostname_property(title: str, description: str, examples: list[str]) -> dict[str, Any]:
    return {
        "title": title,
        "description": description
        + " Surrounding whitespace, letter case and one trailing dot are ignored;"
        " non-ASCII labels are IDNA-encoded (punycode).",
        "type": "string",
        "minLength": 1,
        # Raw shape only: the strict hostname rules apply after normalization.
        "maxLength": 300,
        "pattern": _LOOSE_NAME,
        "examples": examples,
    }


TICKET_IDS: dict[str, Any] = {
    "title": "Ticket IDs",
    "description": "Tickets this change is done for, e.g. OPS-123 (project key, '-', number). "
    "Case and surrounding whitespace are ignored; duplicates collapse. Part of the identity.",
    "type": "array",
    "items": {
        "type": "string",
        "maxLength": 64,
        "pattern": r"^\s*[A-Za-z][A-Za-z0-9]*-[1-9][0-9]*\s*$",
    },
    "maxItems": 50,
    "default": [],
    "examples": [["OPS-123"], ["OPS-123", "NET-7"]],
}

DRY_RUN: dict[str, Any] = {
    "title": "Dry run",
    "description": "Plan and simulate against the frozen plan; no provider is mutated. "
    "Part of the identity: a dry run is a different operation from the real one.",
    "type": "boolean",
    "default": False,
    "examples": [False, True],
}

KIRBY_MODES = ("disabled", "enabled")

KIRBY_MODE: dict[str, Any] = {
    "title": "Kirby mode",
    "description": "Mystique Kirby routing for the domain. 'disabled': no Kirby routing entry "
    "is written; the domain is served by the nginx hosts entry alone. 'enabled': the routing "
    "stage also adds the domain to the Mystique Kirby routing values "
    "(a feat(kirby-routing) commit). Part of the identity.",
    "type": "string",
    "enum": list(KIRBY_MODES),
    "default": "disabled",
    "examples": ["disabled", "enabled"],
}

_ARN = (
    r"arn:aws:acm:[a-z]{2}(?:-[a-z]+)+-[0-9]+:[0-9]{12}:"
    r"certificate/[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}"
)

CERTIFICATE_ARN: dict[str, Any] = {
    "title": "Certificate ARN",
    "description": "An existing ACM certificate to use instead of requesting one "
    "(arn:aws:acm:<region>:<12-digit account>:certificate/<uuid>). null requests a new "
    "certificate. Part of the identity.",
    "type": ["string", "null"],
    "pattern": rf"^\s*{_ARN}\s*$",
    "default": None,
    "examples": [
        None,
        "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f",
    ],
}


def object_schema(
    *,
    title: str,
    description: str,
    properties: dict[str, dict[str, Any]],
    required: list[str],
    examples: list[dict[str, Any]],
) -> dict[str, Any]:
    """A closed draft 2020-12 object schema. Property schemas are copied so no two workflow
    schemas share a mutable dict."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "description": description,
        "type": "object",
        "properties": copy.deepcopy(properties),
        "required": required,
        "additionalProperties": False,
        "examples": examples,
    }


def with_defaults(schema: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with every property the schema declares a default for filled in, so the
    defaults live in one place: the schema integrators read."""
    return {
        key: data[key] if key in data else copy.deepcopy(prop["default"])
        for key, prop in schema["properties"].items()
        if key in data or "default" in prop
    }


def normalize_hostname(raw: str) -> str:
    """Strip, lower-case (UTS #46 mapping for a non-ASCII name), drop one trailing dot,
    encode each non-ASCII label as its A-label. Raises ValueError for a name IDNA rejects.

    Does not validate: see :func:`hostname_problem`."""
    name = raw.strip()
    if not name.isascii():
        try:
            name = idna.uts46_remap(name, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise ValueError(f"it {_idna_reason(exc)}") from None
    name = name.lower()
    if name.endswith("."):
        name = name[:-1]
    return ".".join(_ascii_label(label) for label in name.split("."))


def _idna_reason(exc: Exception) -> str:
    """Alfred's words for an ``idna`` refusal (its own messages quote the input)."""
    if isinstance(exc, idna.IDNABidiError):
        return "breaks the IDNA rules for right-to-left labels"
    if isinstance(exc, idna.InvalidCodepointContext):
        return "uses a joiner or a code point outside the context IDNA 2008 allows it in"
    if isinstance(exc, idna.InvalidCodepoint):
        return "holds a code point IDNA 2008 does not allow in a hostname"
    return "is not a valid internationalized label under IDNA 2008"


def _ascii_label(label: str) -> str:
    if label.isascii():
        return label
    try:
        return idna.alabel(label).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(f"label {shown(label)} {_idna_reason(exc)}") from None


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


def script_problem(ulabel: str) -> str | None:
    """What is wrong with the scripts of one U-label, or None (the module's policy)."""
    scripts = label_scripts(ulabel)
    if len(scripts) <= 1 or any(scripts <= allowed for allowed in _SCRIPT_SETS):
        return None
    return (
        f"label {shown(ulabel)} mixes the scripts {', '.join(sorted(scripts))}; "
        "the letters of one label must come from one script"
    )


def _label_problem(label: str) -> str | None:
    if not _LDH_LABEL.fullmatch(label):
        return (
            f"label {shown(label)} must be 1-63 characters of a-z, 0-9 and '-', "
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
            f"label {shown(label)} is not a valid A-label: its punycode must decode to an "
            "internationalized label that encodes back to it"
        )
    return script_problem(ulabel)


def hostname_problem(name: str, *, allow_wildcard: bool) -> str | None:
    """What is wrong with the normalized ``name`` as a hostname, or None (the rules of the
    module docstring); a '*' first label only where ``allow_wildcard``."""
    if len(name) > MAX_HOSTNAME_LENGTH:
        return f"must be at most {MAX_HOSTNAME_LENGTH} characters once normalized"
    labels = name.split(".")
    if labels[0] == "*":
        if not allow_wildcard:
            return "a wildcard name is not allowed here"
        labels = labels[1:]
    if len(labels) < 2:
        return "must have at least two labels, e.g. example.com"
    for label in labels:
        problem = _label_problem(label)
        if problem is not None:
            return problem
    if labels[-1].isdigit():
        return "the top-level label must not be all digits (an IP address is not a hostname)"
    return None


def hostname_errors(pointer: str, raw: str, *, allow_wildcard: bool = False) -> list[FieldError]:
    try:
        problem = hostname_problem(normalize_hostname(raw), allow_wildcard=allow_wildcard)
    except ValueError as exc:
        problem = str(exc)
    return [FieldError(pointer, f"not a valid hostname: {problem}")] if problem else []


def canonical_hostnames(raw: Iterable[str], *, exclude: str) -> list[str]:
    """Normalized, de-duplicated, sorted, without ``exclude`` (the primary name)."""
    return sorted({normalize_hostname(name) for name in raw} - {exclude})


def canonical_ticket_ids(raw: Iterable[str]) -> list[str]:
    return sorted({ticket.strip().upper() for ticket in raw})


def canonical_arn(raw: str | None) -> str | None:
    return raw.strip() if raw is not None else None
