"""Refuse oversized uploads from the headers, before any of the body is read, and uploads
without a length (chunked transfer) as soon as their bytes pass the limit.

Django's ASGI handler reads the whole request body (spooling to disk) before a view runs,
so the size check must happen one layer further out, on the raw ASGI scope. A body whose
size the headers do not give is counted as it arrives (spooled to a temporary file, as
Django would) and answered with 413 at the limit; under it, the app reads it back unchanged.
A spool the full disk refuses is answered with 507 and a sentence (webapp.server.storage.DISK_FULL).
"""
from __future__ import annotations

import html
import json
import tempfile

from django.conf import settings

_SPOOL_IN_MEMORY = 1 << 20  # bytes of a length-less body kept in memory before spilling to disk
_REPLAY_CHUNK = 1 << 16
_CHECK_SPACE_FROM = 1 << 20  # bodies larger than this are checked against the free space first


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
            if length is not None and length > _CHECK_SPACE_FROM:
                from webapp.server.storage import StorageFullError, check_free_space

                try:
                    check_free_space(needed=length, what="this upload")
                except StorageFullError as e:
                    await _answer(scope, send, 507, "Storage nearly full", str(e))
                    return
            if length is None:
                await self._counted(scope, receive, send, limit)
                return
        await self.app(scope, receive, send)

    async def _counted(self, scope, receive, send, limit: int) -> None:
        """Read a body of unknown length, refusing it at `limit` bytes; then hand it on."""
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
        total = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body = message.get("body", b"")
                total += len(body)
                if total > limit:
                    await self._reject(scope, send, total, limit, known=False)
                    return
                if not await _spooled(spool, body, scope, send):
                    return
                if not message.get("more_body", False):
                    break
            spool.seek(0)
            done = False

            async def replay():
                nonlocal done
                if done:
                    return await receive()  # after the body: the client's disconnect, when it comes
                chunk = spool.read(_REPLAY_CHUNK)
                done = spool.tell() >= total
                return {"type": "http.request", "body": chunk, "more_body": not done}

            await self.app(scope, replay, send)
        finally:
            spool.close()

    @staticmethod
    async def _reject(scope, send, length: int, limit: int, known: bool = True) -> None:
        size = _size(length) if known else f"over {_size(limit)} (it was refused at that point)"
        message = f"The upload is {size}; the largest accepted is {_size(limit)} (set UPLOAD_MAX_BYTES to change it)."
        await _answer(scope, send, 413, "Upload too large", message)


async def _spooled(spool, body: bytes, scope, send) -> bool:
    """Write a piece of a length-less body to its spool; False, with a 507 sent, when the disk
    (where the spool spills past 1 MB) is full."""
    from webapp.server.storage import DISK_FULL, is_disk_full

    try:
        spool.write(body)
    except OSError as e:
        if not is_disk_full(e):
            raise
        await _answer(scope, send, 507, "The disk is full", DISK_FULL)
        return False
    return True


async def _answer(scope, send, status: int, title: str, message: str) -> None:
    """A JSON error under /api/, a short page elsewhere; the connection is closed after it."""
    if scope.get("path", "").startswith("/api/"):
        body, ctype = json.dumps({"error": message}).encode(), b"application/json"
    else:
        body = (f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{html.escape(message)}</p>"
                "<p><a href='javascript:history.back()'>Back</a></p>").encode()
        ctype = b"text/html; charset=utf-8"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"
