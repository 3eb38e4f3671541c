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

Hostnames (domains, alternative names, zones, subdomains) follow the one copy of the rules in
``providers/hostnames.py`` (IDNA 2008 per label, the A-label as canonical form, the
mixed-script policy, at least two labels, no all-digit top-level label), which the GitOps
editors use too; here they are applied with Alfred's own quoting of values in messages.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from alfred.problems import shown
from providers import hostnames
from workflows.base import DOCUMENTED_PATTERN, FieldError, expected

MAX_HOSTNAME_LENGTH = hostnames.MAX_HOSTNAME_LENGTH
label_scripts = hostnames.label_scripts
_LOOSE_NAME = r"^\s*\S+\s*$"
# The raw length the loose schema takes: a longest documented name (below) fits.
_LOOSE_MAX_LENGTH = 300

# The documented form of a hostname: ASCII labels, letter case, one trailing dot and a little
# surrounding whitespace (at most 8 of space, tab, CR, LF), every value of which the server
# accepts. A label is 1-63 of a-z, 0-9 and '-', not at either end, and not an A-label (xn--,
# which must also decode under IDNA: no pattern says that); the top-level label starts with a
# letter (never all digits). The lookahead bounds the name, trailing dot aside, to ``length``.
_SPACE = r"[ \t\n\r]{0,8}"
_LABEL = r"(?![Xx][Nn]--)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL = r"(?![Xx][Nn]--)[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"


def documented_hostname_pattern(
    *, wildcard: bool = False, length: int = MAX_HOSTNAME_LENGTH
) -> str:
    """The pattern a served schema states for a hostname of at most ``length`` characters
    (``*.`` first where ``wildcard``): a subset of what the server takes, since Unicode names
    and A-labels are IDNA's to judge, and no pattern can."""
    star = r"(?:\*\.)?" if wildcard else ""
    chars = "*A-Za-z0-9.-" if wildcard else "A-Za-z0-9.-"
    return (
        rf"^{_SPACE}(?=[{chars}]{{1,{length}}}\.?{_SPACE}$)"
        rf"{star}(?:{_LABEL}\.)+{_TOP_LABEL}\.?{_SPACE}$"
    )


def documented_label_pattern() -> str:
    """One relative label (``api``), as the served schema states a name inside a zone."""
    return rf"^{_SPACE}{_LABEL}{_SPACE}$"


def hostname_property(
    title: str,
    description: str,
    examples: list[str],
    *,
    documented_pattern: str | None = None,
) -> dict[str, Any]:
    """A hostname field: validated with a loose pattern (raw shape only: the strict rules run
    on the normalized name, in ``check_semantics``) and served with ``documented_pattern``
    (default: any hostname, no wildcard), a form every value of which is accepted."""
    return {
        "title": title,
        "description": description
        + " Surrounding whitespace, letter case and one trailing dot are ignored;"
        " non-ASCII labels are IDNA-encoded (punycode): the pattern states the ASCII form.",
        "type": "string",
        "minLength": 1,
        "maxLength": _LOOSE_MAX_LENGTH,
        "pattern": _LOOSE_NAME,
        DOCUMENTED_PATTERN: documented_pattern or documented_hostname_pattern(),
        **expected("one name without spaces (a hostname)", examples[0]),
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
        **expected(
            "a ticket ID: a project key (a letter, then letters or digits), '-' and a number "
            "from 1",
            "OPS-123",
        ),
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
    **expected(
        "null or an ACM certificate's ARN",
        "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f",
    ),
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
    """The canonical form of a hostname (ValueError, with Alfred's message, when IDNA
    refuses it)."""
    return hostnames.normalize_hostname(raw, show=shown)


def script_problem(ulabel: str) -> str | None:
    return hostnames.script_problem(ulabel, show=shown)


def hostname_problem(name: str, *, allow_wildcard: bool) -> str | None:
    """Why the canonical ``name`` is not a valid hostname, or None."""
    return hostnames.hostname_problem(name, wildcard=allow_wildcard, show=shown)


def hostname_errors(pointer: str, raw: str, *, allow_wildcard: bool = False) -> list[FieldError]:
    problem = hostnames.input_problem(raw, wildcard=allow_wildcard, show=shown)
    return [FieldError(pointer, f"not a valid hostname: {problem}")] if problem else []


def canonical_hostnames(raw: Iterable[str], *, exclude: str) -> list[str]:
    """Normalized, de-duplicated, sorted, without ``exclude`` (the primary name)."""
    return sorted({normalize_hostname(name) for name in raw} - {exclude})


def canonical_ticket_ids(raw: Iterable[str]) -> list[str]:
    return sorted({ticket.strip().upper() for ticket in raw})


def canonical_arn(raw: str | None) -> str | None:
    return raw.strip() if raw is not None else None
