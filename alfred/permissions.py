"""DRF permissions over :mod:`alfred.principals`. Whether a caller may act on one execution
(ownership) is decided in the control services, so the API, the admin and the commands agree;
these classes only decide who may call an endpoint at all."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from alfred.principals import Caller, Role, caller_of


def role_of(user: Any) -> str | None:
    caller = caller_of(user)
    return None if caller is None else caller.role


def request_caller(request: Request) -> Caller:
    """The caller of a request that passed :class:`IsPrincipal`."""
    caller = caller_of(request.user)
    if caller is None:  # pragma: no cover - the permission classes refused it already
        raise PermissionError("no caller")
    return caller


class IsPrincipal(permissions.BasePermission):
    """Any caller with a role: an integration, a viewer or an operator."""

    message = "This needs an API token or an Alfred login."

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) is not None


class MayTrigger(permissions.BasePermission):
    """Integrations and operators ask for executions; viewers read only."""

    message = "This action needs the integration or the operator role."

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) in (Role.INTEGRATION, Role.OPERATOR)


class ReadsAll(permissions.BasePermission):
    """Operators and viewers: the audit log."""

    message = "This needs the operator or the viewer role."

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) in (Role.OPERATOR, Role.VIEWER)


class IsOperator(permissions.BasePermission):
    message = "This action needs the operator role."

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request.user) == Role.OPERATOR
