"""A workflow's input, declared once: a pydantic model (:class:`WorkflowInput`) from which come
the JSON Schema the API serves (draft 2020-12), the validation with the API's own bounded
messages, the canonical form the logical identity hashes, and typed access in stage code
(``ctx.input.zone``, checked by mypy).

Why pydantic v2 (docs/architecture.md, "Typed workflow data"): one declaration yields all
four; it reports every invalid field at once, each at its place (a JSON Pointer here), where
msgspec stops at the first; its validators run after a field's shape is checked, so the
hostname rules and the canonical forms sit on the field they belong to; and it generates the
JSON Schema from the same types it validates with, so what is served is what is checked.

The model's contract:

- ``strict``: a JSON value is taken as the type it is (``"true"`` is not a boolean, ``1`` not
  a string); ``extra="forbid"``: an unknown property is named and refused.
- Patterns are matched by Python's ``re`` (``regex_engine="python-re"``), as the served
  schema's readers match them.
- A field's validators return its canonical value: ``model_dump(mode="json")`` of a valid
  input *is* its canonical form, every default filled in.
- Messages are Alfred's (:func:`field_errors`): the bounds, choices and the ``x-expected``
  words the schema states, never the value sent and never a regular expression.
- A stored input is read back with :meth:`WorkflowInput.stored`, without validating it again:
  an execution accepted under earlier rules keeps loading.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema
from typing_extensions import is_typeddict  # typing's misses typing_extensions' TypedDict

from alfred.problems import shown
from executions.catalog import FieldError, InvalidInput
from executions.runtime.errors import FatalError

# The annotation beside every ``pattern`` (and on an ``anyOf`` of forms): what the value must be,
# in words with an example ("a ticket ID: ..., e.g. OPS-123"). An ``x-`` name, so the schema
# stays a valid OpenAPI 3.0 schema object too (executions.api.schema); JSON Schema ignores it.
EXPECTED = "x-expected"

# What a served schema states instead of a property's ``pattern``. The validator ignores it
# (an unknown keyword); :func:`documented` puts it in place for the schema the API serves.
DOCUMENTED_PATTERN = "x-documented-pattern"


def expected(what: str, example: str) -> dict[str, str]:
    """The ``x-expected`` annotation: ``what`` the value must be, and an example of it."""
    return {EXPECTED: f"{what}, e.g. {example}"}


class InputSchema(GenerateJsonSchema):
    """Draft 2020-12, named by ``$schema``; a nullable simple value as a list of types
    (``"type": ["string", "null"]``), as a person writes it, not an ``anyOf``."""

    def generate(self, schema: core_schema.CoreSchema, mode: Any = "validation") -> JsonSchemaValue:
        generated = super().generate(schema, mode=mode)
        return {"$schema": self.schema_dialect, **generated}

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        kind = inner.get("type")
        if kind is None or "$ref" in inner:
            return super().nullable_schema(schema)
        return {**inner, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}


_SCHEMAS: dict[type[WorkflowInput], dict[str, Any]] = {}


class WorkflowInput(BaseModel):
    """The base of every workflow's input model. Its docstring is the schema's description;
    ``model_config``'s ``title`` and ``json_schema_extra={"examples": [...]}`` name it and
    show it."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        regex_engine="python-re",
        hide_input_in_errors=True,
    )

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The input's JSON Schema (draft 2020-12), generated once per model."""
        schema = _SCHEMAS.get(cls)
        if schema is None:
            schema = _SCHEMAS[cls] = cls.model_json_schema(schema_generator=InputSchema)
        return schema

    @classmethod
    def parsed(cls, data: Any) -> Self:
        """``data`` validated and in its canonical form; :class:`InvalidInput` with every
        field error, each at its JSON Pointer."""
        if not isinstance(data, Mapping):
            raise InvalidInput([FieldError("", "must be an object")])
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidInput(field_errors(exc.errors(), cls.json_schema())) from None

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> Self:
        """An accepted execution's canonical input, as its stages read it: not validated
        again (it was, when accepted), so rules tightened since do not turn it away; a
        property the model no longer declares is left out, one it added since takes its
        default."""
        return cls.model_construct(**{k: v for k, v in data.items() if k in cls.model_fields})

    def canonical(self) -> dict[str, Any]:
        """The canonical form: JSON, every property present (defaults filled in)."""
        return self.model_dump(mode="json")


# --- messages ------------------------------------------------------------------------------

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _pointer(path: Sequence[Any]) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else ""


def _placed(loc: Sequence[Any], schema: Mapping[str, Any]) -> tuple[list[Any], Mapping[str, Any]]:
    """The part of ``loc`` that is a place in the request (properties, item indexes) and the
    schema there. A union's member (pydantic names it after its type) is not a place: the
    error belongs to the property whose forms all failed, which says what they stand for."""
    path: list[Any] = []
    here: Mapping[str, Any] = schema
    for part in loc:
        if isinstance(part, int) and "items" in here:
            here = here["items"]
        elif isinstance(part, str) and part in here.get("properties", {}):
            here = here["properties"][part]
        elif isinstance(part, str) and not path and "properties" in here:
            path.append(part)  # an unknown property (extra_forbidden): its own place
            return path, {}
        else:
            break
        path.append(part)
    return path, here


def _type_message(schema: Mapping[str, Any], fallback: str) -> str:
    kinds = schema.get("type", fallback)
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return "must be " + " or ".join(_TYPE_NAMES.get(str(k), str(k)) for k in kinds)


_TYPE_ERRORS = {
    "string_type": "string",
    "bool_type": "boolean",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "none_required": "null",
}


def _message(error: ErrorDetails, here: Mapping[str, Any], whole: Mapping[str, Any]) -> str:
    kind, context = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        known = ", ".join(sorted(whole.get("properties", {})))
        return f"unknown property {shown(str(error['loc'][-1]))}; the properties are {known}"
    if EXPECTED in here and ("anyOf" in here or kind == "string_pattern_mismatch"):
        # a pattern, or forms of which none matched: what the schema says they stand for
        return f"must be {here[EXPECTED]}"
    if kind in _TYPE_ERRORS:
        return _type_message(here, _TYPE_ERRORS[kind])
    if kind == "literal_error" and "enum" in here:
        return "must be one of " + ", ".join(json.dumps(choice) for choice in here["enum"])
    if kind == "string_pattern_mismatch":
        return "is not in the expected form"
    bounds = {
        "string_too_long": "must be at most {max_length} characters",
        "string_too_short": "must be at least {min_length} characters",
        "too_long": "must have at most {max_length} items",
        "too_short": "must have at least {min_length} items",
        "greater_than_equal": "must be at least {ge}",
        "less_than_equal": "must be at most {le}",
        "greater_than": "must be more than {gt}",
        "less_than": "must be less than {lt}",
    }
    if kind in bounds:
        return bounds[kind].format(**context)
    if kind.startswith("alfred_"):
        return error["msg"]  # a field validator's own words (PydanticCustomError)
    return f"is not valid ({kind})"


def field_errors(errors: Sequence[ErrorDetails], schema: Mapping[str, Any]) -> list[FieldError]:
    """pydantic's errors in the API's words, one per place (the first found there), in the
    order of the places. The schema says what each place expects; a union whose forms all
    failed is told once, at the property."""
    found: dict[str, tuple[list[Any], FieldError]] = {}
    for error in errors:
        path, here = _placed(error["loc"], schema)
        pointer = _pointer(path)
        if pointer not in found:
            found[pointer] = (path, FieldError(pointer, _message(error, here, schema)))
    ordered = sorted(found.values(), key=lambda item: [(isinstance(p, str), p) for p in item[0]])
    return [error for _, error in ordered]


# --- stage outputs ---------------------------------------------------------------------------

_OUTPUT_TYPES: dict[Callable[..., Any], TypeAdapter[Any] | None] = {}


def _output_type(function: Callable[..., Any]) -> TypeAdapter[Any] | None:
    if function not in _OUTPUT_TYPES:
        declared = get_type_hints(function).get("return")
        _OUTPUT_TYPES[function] = (
            TypeAdapter(declared) if declared is not None and is_typeddict(declared) else None
        )
    return _OUTPUT_TYPES[function]


def output_check(function: Callable[..., Any], output: Any) -> None:
    """Refuse an output its stage function's declared TypedDict does not allow: a required
    key missing, a value of another kind (``"no"`` where a boolean is declared, None where
    None is not allowed). What is checked is what will be recorded — the output as JSON,
    strictly (a tuple is an array there) — and keys the type does not name pass. Raises
    FatalError ``stage_output_invalid`` naming each place, never the values."""
    adapter = _output_type(function)
    if adapter is None:
        return
    try:
        adapter.validate_json(json.dumps(output, default=str), strict=True)
    except ValidationError as exc:
        places = sorted({f"{_pointer(e['loc']) or '/'} ({e['type']})" for e in exc.errors()})
        raise FatalError(
            f"stage {function.__name__} returned an output its type does not allow: "
            + ", ".join(places[:10]),
            code="stage_output_invalid",
        ) from None


def documented(schema: Any) -> Any:
    """``schema`` as the API serves it: each property's documented pattern in place of the
    one it is validated with. Why two: the server takes more than a pattern can say (a Unicode
    name IDNA accepts, a name relative to or inside a zone), and a pattern that said less
    would promise acceptance of names it then refuses (a single label, an all-digit top-level
    label, a name past 253 characters). A served pattern states a form every value of which
    is accepted; a client that needs more sends it and the server judges (422 with the field)."""
    if isinstance(schema, list):
        return [documented(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    served = {key: documented(value) for key, value in schema.items() if key != DOCUMENTED_PATTERN}
    if DOCUMENTED_PATTERN in schema:
        served["pattern"] = schema[DOCUMENTED_PATTERN]
    return served
