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
_METHODS = ("get", "put", "post", "delete", "patch")


def document_refusals(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """A drf-spectacular post-processing hook: adds those refusals to each operation that can
    answer them and does not declare them yet, as the same problem responses as
    :func:`problems` gives."""
    for item in result.get("paths", {}).values():
        for method in _METHODS:
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


# OpenAPI links: where an answer names a resource that other operations take, by the
# operation that answers (an operationId, or its prefix ending in "*"), the status it
# answers with, and the value's place in the answer; then the operations that take it, and
# the parameter they take it as. A client generator, or the fuzzer's stateful phase
# (`make fuzz`), follows them from a new execution to its controls and lane, from a new
# webhook endpoint to its operations, and from a list to one of its items.
_EXECUTION = (
    "executions_retrieve",
    "executions_events",
    "executions_cancel",
    "executions_retry",
    "executions_rollback",
    "executions_approve",
)
_LANE = ("lanes_retrieve", "lanes_recover")
_ENDPOINT = (
    "webhook_endpoints_get",
    "webhook_endpoints_update",
    "webhook_endpoints_delete",
    "webhook_deliveries_list",
    "webhook_endpoints_redeliver_failed",
    "webhook_endpoints_rotate_secret",
)
_LINKS: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("executions_create_*", "202", "$response.body#/id", _EXECUTION, "execution_id"),
    ("executions_create_*", "202", "$response.body#/lane/key", _LANE, "key"),
    ("lanes_list", "200", "$response.body#/0/key", _LANE, "key"),
    ("webhook_endpoints_create", "201", "$response.body#/id", _ENDPOINT, "endpoint_id"),
    (
        "webhook_deliveries_list",
        "200",
        "$response.body#/0/id",
        ("webhook_deliveries_redeliver",),
        "delivery_id",
    ),
)


def operation_links(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """A drf-spectacular post-processing hook: the links of ``_LINKS`` on the answers they
    start from. A link to an operation the document does not have is an error: the table
    and the API have drifted apart."""
    operations = {
        operation["operationId"]: operation
        for item in result.get("paths", {}).values()
        for method in _METHODS
        if (operation := item.get(method)) is not None
    }
    for source, status, value, targets, parameter in _LINKS:
        for target in targets:
            if target not in operations:
                raise KeyError(f"an OpenAPI link names no operation: {target}")
        for operation_id, operation in operations.items():
            if not _named(operation_id, source):
                continue
            links = operation["responses"][status].setdefault("links", {})
            for target in targets:
                links[_link_name(target, parameter)] = {
                    "operationId": target,
                    "parameters": {parameter: value},
                }
    return result


def _named(operation_id: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return operation_id.startswith(pattern[:-1])
    return operation_id == pattern


def _link_name(target: str, parameter: str) -> str:
    """``executions_cancel`` taking ``execution_id``: ``ExecutionsCancelByExecutionId``."""
    words = [*target.split("_"), "by", *parameter.split("_")]
    return "".join(word.title() for word in words)
