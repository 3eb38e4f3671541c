"""The field types the workflows' input models share (``workflows.inputs``): each one
declaration of a field's schema, its validation and its canonical form.

Two layers per field. The shape of what a client may send (type, length, a loose pattern that
admits case and surrounding whitespace) is checked first; the strict checks that need
normalization (hostnames) run after it, in the field's validator, which returns the one
normal form that the logical identity hashes.

Every string pattern admits surrounding whitespace and every canonical form strips it. That is
a contract choice, and also a guard: Python's ``re``, which matches the patterns here and in
most of the served schema's readers, lets ``$`` also match before a final newline, so
``"checkout-api\\n"`` passes ``^[a-z-]+$``. Stripping makes such input mean exactly what it
would mean without the newline instead of yielding a second lane key or identity.

Hostnames (domains, alternative names, zones, subdomains) follow the one copy of the rules in
``providers/hostnames.py`` (IDNA 2008 per label, the A-label as canonical form, the
mixed-script policy, at least two labels, no all-digit top-level label), which the GitOps
editors use too; here they are applied with Alfred's own quoting of values in messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, ValidationInfo
from pydantic_core import PydanticCustomError, core_schema

from alfred.problems import shown
from providers import hostnames
from workflows.inputs import DOCUMENTED_PATTERN, expected

MAX_HOSTNAME_LENGTH = hostnames.MAX_HOSTNAME_LENGTH
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


class Hostname:
    """A hostname field's type: ``Annotated[str, Hostname("Zone", "...", ["example.com"])]``.

    The raw shape is checked first (a string, 1-300 characters, one word: a loose pattern,
    since the strict rules run on the normalized name); then the name itself, under the one
    copy of the rules in ``providers/hostnames.py``; the field's value is the canonical name
    (the A-label, lower case, no trailing dot). ``normalized=False`` keeps the raw string for
    a model validator that places the name (add-subdomain's subdomain, inside its zone). The
    served schema states ``documented_pattern`` (default: any hostname, no wildcard), a form
    every value of which is accepted (``workflows.inputs.documented``)."""

    def __init__(
        self,
        title: str,
        description: str,
        examples: list[str],
        *,
        wildcard: bool = False,
        normalized: bool = True,
        documented_pattern: str | None = None,
    ) -> None:
        self.title, self.description, self.examples = title, description, examples
        self.wildcard, self.normalized = wildcard, normalized
        self.documented_pattern = documented_pattern or documented_hostname_pattern()

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        shape = core_schema.str_schema(
            min_length=1, max_length=_LOOSE_MAX_LENGTH, pattern=_LOOSE_NAME, strict=True
        )
        if not self.normalized:
            return shape
        return core_schema.no_info_after_validator_function(self._canonical, shape)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {
            **handler(schema),
            "title": self.title,
            "description": self.description
            + " Surrounding whitespace, letter case and one trailing dot are ignored;"
            " non-ASCII labels are IDNA-encoded (punycode): the pattern states the ASCII form.",
            DOCUMENTED_PATTERN: self.documented_pattern,
            **expected("one name without spaces (a hostname)", self.examples[0]),
            "examples": self.examples,
        }

    def _canonical(self, raw: str) -> str:
        problem = hostnames.input_problem(raw, wildcard=self.wildcard, show=shown)
        if problem:
            raise invalid(f"not a valid hostname: {problem}")
        return normalize_hostname(raw)


def invalid(message: str) -> PydanticCustomError:
    """A field validator's refusal, in Alfred's words (``workflows.inputs.field_errors``)."""
    return PydanticCustomError("alfred_invalid", message)


def _ticket_ids(raw: list[str]) -> list[str]:
    return sorted({ticket.strip().upper() for ticket in raw})


TicketId = Annotated[
    str,
    StringConstraints(max_length=64, pattern=r"^\s*[A-Za-z][A-Za-z0-9]*-[1-9][0-9]*\s*$"),
    Field(
        json_schema_extra=expected(
            "a ticket ID: a project key (a letter, then letters or digits), '-' and a number "
            "from 1",
            "OPS-123",
        )
    ),
]

TicketIds = Annotated[
    list[TicketId],
    Field(
        title="Ticket IDs",
        description="Tickets this change is done for, e.g. OPS-123 (project key, '-', number). "
        "Case and surrounding whitespace are ignored; duplicates collapse. Part of the "
        "identity.",
        max_length=50,
        examples=[["OPS-123"], ["OPS-123", "NET-7"]],
    ),
    AfterValidator(_ticket_ids),
]

DryRun = Annotated[
    bool,
    Field(
        title="Dry run",
        description="Plan and simulate against the frozen plan; no provider is mutated. "
        "Part of the identity: a dry run is a different operation from the real one.",
        examples=[False, True],
    ),
]

KirbyModeChoice = Literal["disabled", "enabled"]

KirbyMode = Annotated[
    KirbyModeChoice,
    Field(
        title="Kirby mode",
        description="Mystique Kirby routing for the domain. 'disabled': no Kirby routing "
        "entry is written; the domain is served by the nginx hosts entry alone. 'enabled': the "
        "routing stage also adds the domain to the Mystique Kirby routing values "
        "(a feat(kirby-routing) commit). Part of the identity.",
        examples=["disabled", "enabled"],
    ),
]

_ARN = (
    r"arn:aws:acm:[a-z]{2}(?:-[a-z]+)+-[0-9]+:[0-9]{12}:"
    r"certificate/[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}"
)

CertificateArn = Annotated[
    Annotated[str, StringConstraints(pattern=rf"^\s*{_ARN}\s*$"), AfterValidator(str.strip)] | None,
    Field(
        title="Certificate ARN",
        description="An existing ACM certificate to use instead of requesting one "
        "(arn:aws:acm:<region>:<12-digit account>:certificate/<uuid>). null requests a new "
        "certificate. Part of the identity.",
        json_schema_extra=expected(
            "null or an ACM certificate's ARN",
            "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f",
        ),
        examples=[
            None,
            "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f",
        ],
    ),
]


def normalize_hostname(raw: str) -> str:
    """The canonical form of a hostname (ValueError, with Alfred's message, when IDNA
    refuses it)."""
    return hostnames.normalize_hostname(raw, show=shown)


def hostname_problem(name: str, *, allow_wildcard: bool) -> str | None:
    """Why the canonical ``name`` is not a valid hostname, or None."""
    return hostnames.hostname_problem(name, wildcard=allow_wildcard, show=shown)


def canonical_hostnames(names: Iterable[str], *, exclude: str) -> list[str]:
    """Canonical ``names``, de-duplicated and sorted, without ``exclude`` (the primary name)."""
    return sorted(set(names) - {exclude})


def fqdn(raw_subdomain: str, zone: str) -> str:
    """The fully-qualified name ``raw_subdomain`` denotes inside the canonical ``zone``.

    A name ending in ``.<zone>`` is already fully qualified; any other name with a trailing dot
    is absolute and so outside the zone; the rest is relative to the zone ("api" →
    "api.example.com"). The FQDN is the canonical form because it is unambiguous: the relative
    form "api.example.com" of "api.example.com.example.com" would read back as "api".
    Raises ValueError for the zone apex itself or an absolute name outside the zone.
    """
    absolute = raw_subdomain.strip().endswith(".")
    name = normalize_hostname(raw_subdomain)
    if name == zone:
        raise ValueError(f"it names the zone apex {shown(zone)}; give a name below it")
    if name.endswith(f".{zone}"):
        return name
    if absolute:
        raise ValueError(f"it is an absolute name outside the zone {shown(zone)}")
    return f"{name}.{zone}"


def name_in_zone(raw: str, info: ValidationInfo, *, what: str) -> str:
    """A field validator's body for a name placed in the model's ``zone`` field (declared
    before it): the fully-qualified name, judged by the hostname rules, or a refusal "not a
    valid ``what``: why". In an invalid zone the name is left unjudged: the zone is told."""
    zone = info.data.get("zone")
    if zone is None:
        return raw
    try:
        name = fqdn(raw, zone)
        problem = hostname_problem(name, allow_wildcard=False)
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        raise invalid(f"not a valid {what}: {problem}")
    return name
