"""The trigger endpoint as one operation per workflow in the OpenAPI document, each with its
workflow's input schema as the request body (a drf-spectacular post-processing hook).

``POST /api/v1/workflows/{workflow}/executions`` is one view, but its body is a different
object per workflow; a path parameter cannot select a schema, so a client generator or a
fuzzer reading one templated operation sees only "an object" and never builds valid input.
Each workflow's path is written out instead, with the schema ``GET /api/v1/workflows``
serves, turned into an OpenAPI 3.0 schema object."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from alfred.openapi import OPERATION_METHODS
from executions import selectors
from executions.catalog import workflow_get

TEMPLATE = "/api/v1/workflows/{workflow}/executions"


def workflow_paths(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    paths = result.get("paths", {})
    if TEMPLATE not in paths:
        return result
    template = paths[TEMPLATE]["post"]
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    expanded: dict[str, Any] = {}
    for path, item in paths.items():
        if path != TEMPLATE:
            expanded[path] = item
            continue
        for name in selectors.workflow_names():
            component = "".join(part.title() for part in name.split("-")) + "Input"
            input_schema = workflow_get(name).served_schema
            schemas[component] = openapi_schema(input_schema)
            operation = copy.deepcopy(template)
            operation["operationId"] = _create_id(name)
            operation["summary"] = f"Ask for an execution of {name}"
            operation["parameters"] = [
                p for p in operation.get("parameters", []) if p["name"] != "workflow"
            ]
            media: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{component}"}}
            if input_schema.get("examples"):
                media["examples"] = {
                    f"example{n}": {"value": value}
                    for n, value in enumerate(input_schema["examples"], start=1)
                }
            operation["requestBody"] = {"content": {"application/json": media}, "required": True}
            expanded[f"/api/v1/workflows/{name}/executions"] = {"post": operation}
    result["paths"] = expanded
    return result


def openapi_schema(schema: Any) -> Any:
    """A draft 2020-12 schema as an OpenAPI 3.0 schema object: no ``$schema``, ``examples``
    (a list) as ``example`` (its first), and a type list with "null" as ``nullable``."""
    if isinstance(schema, list):
        return [openapi_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$schema":
            continue
        if key == "examples" and isinstance(value, list):
            if value:
                converted["example"] = value[0]
            continue
        if key == "type" and isinstance(value, list):  # ["string", "null"]
            types = [t for t in value if t != "null"]
            converted["type"] = types[0] if len(types) == 1 else types
            if "null" in value:
                converted["nullable"] = True
            continue
        if key == "properties":
            converted[key] = {name: openapi_schema(sub) for name, sub in value.items()}
        else:
            converted[key] = openapi_schema(value)
    return converted


# OpenAPI links: where an answer names a resource that other operations take. Each row: the
# operations that answer (by operationId), the status they answer with, the value's place in
# the answer, the operations that take it and the parameter they take it as. A client
# generator, or the fuzzer's stateful phase (`make fuzz`), follows them from a new execution
# to its controls and its lane, from a new webhook endpoint to its operations, and from a list
# to one of its items.
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


class _Link(NamedTuple):
    sources: tuple[str, ...]
    status: str
    value: str
    targets: tuple[str, ...]
    parameter: str


def _links() -> list[_Link]:
    creates = {name: _create_id(name) for name in selectors.workflow_names()}
    laned = tuple(op for name, op in creates.items() if workflow_get(name).queues_on_a_lane)
    return [
        _Link(tuple(creates.values()), "202", "$response.body#/id", _EXECUTION, "execution_id"),
        _Link(laned, "202", "$response.body#/lane/key", _LANE, "key"),
        _Link(("lanes_list",), "200", "$response.body#/0/key", _LANE, "key"),
        _Link(("webhook_endpoints_create",), "201", "$response.body#/id", _ENDPOINT, "endpoint_id"),
        _Link(
            ("webhook_deliveries_list",),
            "200",
            "$response.body#/results/0/id",  # a cursor page
            ("webhook_deliveries_redeliver",),
            "delivery_id",
        ),
    ]


def operation_links(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """A drf-spectacular post-processing hook (after :func:`workflow_paths`): the links of
    :func:`_links` on the answers they start from. A link from or to an operation, or from a
    status, the document does not have is an error: the table and the API drifted apart."""
    operations = {
        operation["operationId"]: operation
        for item in result.get("paths", {}).values()
        for method in OPERATION_METHODS
        if (operation := item.get(method)) is not None
    }
    for link in _links():
        for name in (*link.sources, *link.targets):
            if name not in operations:
                raise KeyError(f"an OpenAPI link names no operation of the document: {name}")
        for source in link.sources:
            response = operations[source]["responses"].get(link.status)
            if response is None:
                raise KeyError(
                    f"an OpenAPI link starts from an answer {source} lacks: {link.status}"
                )
            links = response.setdefault("links", {})
            for target in link.targets:
                links[_link_name(target, link.parameter)] = {
                    "operationId": target,
                    "parameters": {link.parameter: link.value},
                }
    return result


def _create_id(workflow: str) -> str:
    return f"executions_create_{workflow.replace('-', '_')}"


def _link_name(target: str, parameter: str) -> str:
    """``executions_cancel`` taking ``execution_id``: ``ExecutionsCancelByExecutionId``."""
    words = [*target.split("_"), "by", *parameter.split("_")]
    return "".join(word.title() for word in words)
