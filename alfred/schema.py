"""OpenAPI extensions: the bearer token scheme, and free text declared with the pattern it is
checked against (drf-spectacular finds extensions once imported; the app config imports this
module)."""

from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)

from alfred.text import FREE_TEXT_PATTERN, REQUIRED_TEXT_PATTERN


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "alfred.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token from `manage.py alfred_token create` (integration or "
            "operator role).",
        }


class FreeTextFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "alfred.text.FreeTextField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        schema["pattern"] = (
            REQUIRED_TEXT_PATTERN if not self.target.allow_blank else FREE_TEXT_PATTERN
        )
        return schema
