"""OpenAPI pieces shared by every API: the problem schema and the error responses."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from alfred.problems import CODES, PROBLEM_CONTENT_TYPE

JSON = "application/json"

# Statuses any endpoint can answer: no or bad credentials, an Accept it cannot satisfy, a bug.
COMMON_ERRORS = (401, 406, 500)


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details (``application/problem+json``)."""

    type = serializers.URLField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    code = serializers.ChoiceField(choices=sorted(CODES), help_text="Stable machine code.")
    instance = serializers.CharField(required=False)
    execution = serializers.CharField(required=False, help_text="The execution concerned.")

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # Declared here: as a class attribute it would shadow ``Serializer.errors``.
        fields["errors"] = serializers.ListField(
            child=serializers.DictField(child=serializers.CharField()),
            required=False,
            help_text="Field errors (invalid_input): JSON Pointer `field` and `message`.",
        )
        fields["errors_omitted"] = serializers.IntegerField(
            required=False, help_text="How many field errors past the first 20 were left out."
        )
        return fields


def problems(*statuses: int) -> dict[Any, OpenApiResponse]:
    """OpenAPI responses for these error statuses (plus the common ones): RFC 9457 problems,
    each listing the codes its status can carry (from the registry in ``alfred.problems``)."""
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            ProblemSerializer, description=_codes_described(status)
        )
        for status in sorted({*statuses, *COMMON_ERRORS})
    }


def _codes_described(status: int) -> str:
    """The description of a problem response: the codes its status can carry."""
    return "Problem codes: " + ", ".join(f"`{c}`" for c, (st, _) in CODES.items() if st == status)


# Refusals every operation of a kind can answer, whatever its view declares: a query string or
# header it reads can be malformed (400); a body can be malformed (400), too large (413), of
# another media type (415) or not fit the operation's input (422).
OPERATION_METHODS = ("get", "put", "post", "delete", "patch")


def document_refusals(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """A drf-spectacular post-processing hook: adds those refusals to each operation that can
    answer them and does not declare them yet, as the same problem responses as
    :func:`problems` gives."""
    for item in result.get("paths", {}).values():
        for method in OPERATION_METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            statuses: set[int] = set()
            if any(p["in"] in ("query", "header") for p in operation.get("parameters", [])):
                statuses.add(400)
            if "requestBody" in operation:
                statuses |= {400, 413, 415, 422}
            responses = operation["responses"]
            for status in sorted(statuses - {int(code) for code in responses}):
                responses[str(status)] = _problem_response(status)
    return result


def _problem_response(status: int) -> dict[str, Any]:
    return {
        "description": _codes_described(status),
        "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def blank_strings(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """A drf-spectacular post-processing hook: for a blank-allowed string with a pattern,
    drf-spectacular writes ``oneOf: [the field, {"maxLength": 0}]``. Where the pattern itself
    admits "" (free text), "" fits both and the ``oneOf`` fails: keep the field alone."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            one_of = node.get("oneOf")
            if (
                isinstance(one_of, list)
                and len(one_of) == 2
                and one_of[1] == {"type": "string", "maxLength": 0}
                and "pattern" in one_of[0]
                and re.search(one_of[0]["pattern"], "")
            ):
                node.update(node.pop("oneOf")[0])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(result)
    return result
