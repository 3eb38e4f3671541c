"""OpenAPI: the bearer token scheme (drf-spectacular finds extensions once imported; the app
config imports this module)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
