from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response

from alfred.openapi import JSON, problems
from alfred.permissions import ReadsAll
from executions import selectors
from executions.api.params import AuditEntryCursorPagination
from executions.api.serializers import AuditEntrySerializer
from executions.models import AuditEntry


class AuditEntryListApi(generics.ListAPIView):
    """What operators did and why (operators and viewers)."""

    serializer_class = AuditEntrySerializer
    pagination_class = AuditEntryCursorPagination
    permission_classes = [ReadsAll]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        return selectors.audit_entries()

    @extend_schema(
        operation_id="audit_list",
        summary="The audit log, newest first (operator, viewer)",
        responses={
            (200, JSON): AuditEntrySerializer(many=True),
            **problems(401, 403),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)
