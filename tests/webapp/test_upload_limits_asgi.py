"""The upload limit at the ASGI layer (webapp/server/limits.py) for a body without a length: counted
as it arrives, refused with 413 once past the limit, handed on unchanged below it."""
from __future__ import annotations

import json

from asgiref.sync import async_to_sync

from webapp.server.limits import UploadSizeLimit


def _call(chunks, limit, settings, headers=()):
    settings.UPLOAD_MAX_BYTES = limit
    sent, seen, pulled = [], [], []
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        pulled.append(True)
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def app(scope, app_receive, app_send):
        body = b""
        while True:
            message = await app_receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(body)
        await app_send({"type": "http.response.start", "status": 201, "headers": []})

    scope = {"type": "http", "method": "POST", "path": "/api/corpora/", "headers": list(headers)}
    async_to_sync(UploadSizeLimit(app))(scope, receive, send)
    return sent, seen, len(pulled)


def test_a_chunked_body_is_refused_at_the_limit_without_reading_the_rest(settings):
    chunks = [b"x" * 400] * 10  # 4,000 bytes, no Content-Length
    sent, seen, pulled = _call(chunks, 1000, settings)
    assert seen == [] and sent[0]["status"] == 413
    assert pulled == 3  # refused on the chunk that crossed 1,000 bytes; the rest never read
    assert json.loads(sent[1]["body"])["error"] == ("The upload is over 1,000 bytes (it was refused at that point); the largest "
                                                  "accepted is 1,000 bytes (set UPLOAD_MAX_BYTES to change it).")


def test_a_chunked_body_under_the_limit_reaches_the_app_unchanged(settings):
    chunks = [bytes([i]) * 70_000 for i in range(5)]  # 350 KB in five pieces
    sent, seen, _ = _call(chunks, 10**6, settings)
    assert seen == [b"".join(chunks)] and sent[0]["status"] == 201


def test_a_declared_length_is_still_judged_from_the_header(settings):
    sent, seen, pulled = _call([b"x" * 10], 1000, settings, headers=[(b"content-length", b"5000")])
    assert sent[0]["status"] == 413 and seen == [] and pulled == 0


def test_the_upload_page_states_both_limits(alice_client, settings):
    from django.urls import reverse

    settings.UPLOAD_MAX_BYTES = 2 * 1024**3
    html = alice_client.get(reverse("corpora:upload")).content.decode()
    assert "Largest accepted: 2.1 GB; a gzip-compressed file may unpack to at most 17.2 GB." in html
