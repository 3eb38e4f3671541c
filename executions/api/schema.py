"""The trigger endpoint as one operation per workflow in the OpenAPI document, each with its
workflow's input schema as the request body (a drf-spectacular post-processing hook).

``POST /api/v1/workflows/{workflow}/executions`` is one view, but its body is a different
object per workflow; a path parameter cannot select a schema, so a client generator or a
fuzzer reading one templated operation sees only "an object" and never builds valid input.
Each workflow's path is written out instead, with the schema ``GET /api/v1/workflows``
serves, turned into an OpenAPI 3.0 schema object."""

from __future__ import annotations

import copy
from typing import Any

from executions import selectors
from executions.workflows.registry import get_workflow

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
            input_schema = get_workflow(name).input_schema
            schemas[component] = openapi_schema(input_schema)
            operation = copy.deepcopy(template)
            operation["operationId"] = f"executions_create_{name.replace('-', '_')}"
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
