"""Refuse oversized uploads from the headers, before any of the body is read.

Django's ASGI handler reads the whole request body (spooling to disk) before a view runs,
so the size check must happen one layer further out, on the raw ASGI scope.
"""
from __future__ import annotations

import json

from django.conf import settings


class UploadSizeLimit:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("method") in ("POST", "PUT", "PATCH"):
            length = None
            for name, value in scope.get("headers", []):
                if name == b"content-length":
                    try:
                        length = int(value)
                    except ValueError:
                        length = None
            limit = settings.UPLOAD_MAX_BYTES
            if length is not None and length > limit:
                await self._reject(scope, send, length, limit)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _reject(scope, send, length: int, limit: int) -> None:
        message = (
            f"The upload is {length / 1e6:,.1f} MB; the largest accepted is {limit / 1e6:,.1f} MB "
            "(set UPLOAD_MAX_BYTES to change it)."
        )
        wants_json = scope.get("path", "").startswith("/api/")
        if wants_json:
            body = json.dumps({"error": message}).encode()
            ctype = b"application/json"
        else:
            body = (
                "<!doctype html><title>Upload too large</title>"
                f"<h1>Upload too large</h1><p>{message}</p><p><a href='/corpora/'>Back to corpora</a></p>"
            ).encode()
            ctype = b"text/html; charset=utf-8"
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})
