from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from alfred.models import ApiToken
from alfred.tokens import token_resolve


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer alf_…``. ``request.user`` is the :class:`ApiToken`."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[ApiToken, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword:
            return None
        token = token_resolve(raw.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="alfred"'
