"""Oversized uploads are refused from the request headers by the ASGI middleware, before any body is read."""
from __future__ import annotations

import asyncio

import pytest

from webapp.server.limits import UploadSizeLimit


def call(app, *, path: str, length: int, method: str = "POST"):
    scope = {
        "type": "http", "method": method, "path": path,
        "headers": [(b"content-length", str(length).encode()), (b"content-type", b"multipart/form-data; boundary=x")],
    }
    sent = []
    received = []

    async def receive():
        received.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent, received


class Recorder:
    def __init__(self):
        self.called = False

    async def __call__(self, scope, receive, send):
        self.called = True
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("path, content_type", [("/api/corpora/", b"application/json"),
                                                ("/corpora/upload/", b"text/html; charset=utf-8")])
def test_an_upload_over_the_limit_gets_413_before_the_body_is_read(settings, path, content_type):
    settings.UPLOAD_MAX_BYTES = 1_000_000
    inner = Recorder()
    sent, received = call(UploadSizeLimit(inner), path=path, length=5_000_000)
    assert not inner.called and not received  # Django never saw it; not one byte was awaited
    start, body = sent
    assert start["status"] == 413
    assert dict(start["headers"])[b"content-type"] == content_type
    assert b"The upload is 5.0 MB; the largest accepted is 1.0 MB" in body["body"]


def test_an_upload_within_the_limit_goes_through(settings):
    settings.UPLOAD_MAX_BYTES = 1_000_000
    inner = Recorder()
    sent, received = call(UploadSizeLimit(inner), path="/corpora/upload/", length=999_999)
    assert inner.called and received and sent[0]["status"] == 201
