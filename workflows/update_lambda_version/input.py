"""update-lambda-version: move every function of a fleet to one published version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, StringConstraints

from workflows import fields
from workflows.base import LaneClaim, Workflow, WorkflowInput
from workflows.inputs import expected

# Case is not folded: the lane key is built from these, so two spellings of one fleet must not
# yield two lanes. Uppercase is rejected rather than guessed at.
_SLUG = r"^\s*[a-z0-9]+(?:-[a-z0-9]+)*\s*$"
# At most 15 significant digits keeps every version a JSON-safe integer, and keeps the
# canonical string valid against the string branch below.
_MAX_VERSION = 10**15 - 1
_VERSION_EXPECTED = expected(
    "a published version number from 1 to 999999999999999 (not $LATEST), as an integer or a "
    "string of digits",
    "42",
)


def _integral(value: Any) -> Any:
    """JSON Schema counts 42.0 an integer: so does the version (a boolean is not one)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _canonical_version(value: int | str) -> str:
    return str(int(value.strip() if isinstance(value, str) else value))


# The forms a version may be sent in: an integer, or a string of digits.
_VersionForms = Annotated[
    Annotated[int, Field(ge=1, le=_MAX_VERSION)]
    | Annotated[
        str,
        StringConstraints(max_length=64, pattern=r"^\s*0*[1-9][0-9]{0,14}\s*$"),
        Field(json_schema_extra=_VERSION_EXPECTED),
    ],
    BeforeValidator(_integral),
    AfterValidator(_canonical_version),
]


class LambdaVersion:
    """The version field's type: ``Annotated[str, LambdaVersion()]`` takes either form and
    holds the canonical string, which is what stage code reads."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler.generate_schema(_VersionForms)


class UpdateLambdaVersionInput(WorkflowInput):
    """The fleet, the environment and the version to move it to."""

    model_config = ConfigDict(
        title="update-lambda-version input",
        json_schema_extra={
            "examples": [
                {"target": "checkout-api", "environment": "staging", "version": 42},
                {
                    "target": "checkout-api",
                    "environment": "production",
                    "version": "042",
                    "ticket_ids": ["REL-88"],
                    "dry_run": True,
                },
            ]
        },
    )

    target: Annotated[
        str,
        Field(
            title="Target fleet",
            description="The Lambda fleet name: a lowercase slug.",
            max_length=64,
            pattern=_SLUG,
            json_schema_extra=expected(
                "a fleet name in lower case: letters and digits, words joined by single hyphens",
                "checkout-api",
            ),
            examples=["checkout-api"],
        ),
        AfterValidator(str.strip),
    ]
    environment: Annotated[
        str,
        Field(
            title="Environment",
            description="The environment (the alias to move): a lowercase slug.",
            max_length=64,
            pattern=_SLUG,
            json_schema_extra=expected(
                "an environment name in lower case: letters and digits, words joined by "
                "single hyphens",
                "production",
            ),
            examples=["staging", "production"],
        ),
        AfterValidator(str.strip),
    ]
    version: Annotated[
        str,
        LambdaVersion(),
        Field(
            title="Version",
            description="A published Lambda version number (not $LATEST): an integer from 1, "
            "or a string of digits. Canonical form: the decimal string without leading zeros.",
            json_schema_extra=_VERSION_EXPECTED,
            examples=[42, "42"],
        ),
    ]
    ticket_ids: fields.TicketIds = []
    dry_run: fields.DryRun = False


class UpdateLambdaVersion(Workflow):
    name = "update-lambda-version"
    title = "Update Lambda version"
    description = (
        "Point the environment's alias of every function in a Lambda fleet at one published "
        "version, wait until each update is successful and verify; rollback restores the "
        "previous versions from the receipts."
    )
    stages: ClassVar[tuple[str, ...]] = ("plan", "update_aliases", "await_updates", "verify")
    # A continuation plans again: the plan's RevisionIds are compare-and-swap tokens, and
    # after a refusal (alias_changed) the old ones would be refused again.
    continuation_skips: ClassVar[tuple[str, ...] | None] = ()
    # A later execution for another version moves the same aliases: the fleet asked back to
    # this version needs a new execution, not this one's old "succeeded".
    replaced_by_another_token: ClassVar[bool] = True
    lane_description: ClassVar[str] = (
        "lambda:<target>:<environment>, claimed with the version as token: a request for "
        "another version while the lane holds or queues a different one fails closed "
        "(409 lane_conflict)"
    )
    Input: ClassVar[type[WorkflowInput]] = UpdateLambdaVersionInput

    def subject(self, data: Mapping[str, Any]) -> str:
        """The fleet on its environment, and the version it is moved to."""
        if not data.get("target"):
            return ""
        fleet = f"{data['target']} on {data.get('environment') or '?'}"
        return f"{fleet} → version {data['version']}" if data.get("version") else fleet

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim(
            f"lambda:{canonical['target']}:{canonical['environment']}",
            token=canonical["version"],
        )
