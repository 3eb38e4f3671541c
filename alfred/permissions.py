"""Roles (DESIGN §8): integrations trigger and read; operators also approve, roll back and
recover lanes. Admin-session users are operators when they are staff."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from alfred.models import ApiToken, Role


def role_of(user: Any) -> str | None:
    if isinstance(user, ApiToken):
        return user.role
    if user is not None and getattr(user, "is_authenticated", False):
        return Role.OPERATOR if user.is_staff else Role.INTEGRATION
    return None


class IsIntegration(permissions.BasePermission):
    """Any authenticated principal (integration or operator)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) is not None


class IsOperator(permissions.BasePermission):
    message = "This action needs the operator role."

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) == Role.OPERATOR
