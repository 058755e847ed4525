"""Websocket authentication: the session cookie (browsers) or 'Authorization: Token <key>' (scripts)."""
from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser


@database_sync_to_async
def _user_for_token(key: str):
    from rest_framework.authtoken.models import Token

    try:
        return Token.objects.select_related("user").get(key=key).user
    except Token.DoesNotExist:
        return AnonymousUser()


class _TokenAuth:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            for name, value in scope.get("headers", []):
                if name == b"authorization":
                    kind, _, key = value.decode("latin1").partition(" ")
                    if kind.lower() == "token" and key.strip():
                        scope = dict(scope, user=await _user_for_token(key.strip()))
                    break
        return await self.app(scope, receive, send)


def SessionOrTokenAuth(app):  # noqa: N802 - reads like the middleware class it builds
    return AuthMiddlewareStack(_TokenAuth(app))
