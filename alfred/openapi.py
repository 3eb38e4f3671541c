"""OpenAPI pieces shared by every API: the problem schema and the error responses."""

from __future__ import annotations

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
            ProblemSerializer,
            description="Problem codes: "
            + ", ".join(f"`{c}`" for c, (st, _) in CODES.items() if st == status),
        )
        for status in sorted({*statuses, *COMMON_ERRORS})
    }
