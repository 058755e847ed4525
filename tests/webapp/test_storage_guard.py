"""The free-space guard (webapp/server/storage.py): uploads and launches that would leave less than
STORAGE_MIN_FREE_BYTES free are refused with a sentence and HTTP 507 (issue 11, point 4)."""
from __future__ import annotations

from asgiref.sync import async_to_sync

from tests.webapp.runs_helpers import make_data
from webapp.server import storage
from webapp.server.limits import UploadSizeLimit
from webapp.runs.models import Run


def test_a_launch_on_a_full_disk_is_refused_with_507(alice, alice_api, enqueued, settings, monkeypatch):
    _, tokenizer = make_data(alice)
    settings.STORAGE_MIN_FREE_BYTES = 10**9
    monkeypatch.setattr(storage, "free_bytes", lambda: 3 * 10**8)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json")
    assert response.status_code == 507
    assert response.json()["error"] == (
        "The server's storage is nearly full (0.3 GB free, and 1.0 GB are kept free), so a new run (its "
        "checkpoints need room) cannot start now. Delete runs, checkpoints or corpora you no longer need, then try "
        "again.")
    assert not Run.objects.exists()
    monkeypatch.setattr(storage, "free_bytes", lambda: 5 * 10**9)
    assert alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json").status_code == 201


def test_an_upload_that_would_fill_the_disk_is_refused_before_its_body(settings, monkeypatch):
    settings.STORAGE_MIN_FREE_BYTES = 10**9
    settings.UPLOAD_MAX_BYTES = 10**12
    monkeypatch.setattr(storage, "free_bytes", lambda: 2 * 10**9)
    sent, called = [], []

    async def receive():
        raise AssertionError("the body was read")

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        called.append(True)

    scope = {"type": "http", "method": "POST", "path": "/api/corpora/",
             "headers": [(b"content-length", str(3 * 10**9).encode())]}
    async_to_sync(UploadSizeLimit(app))(scope, receive, send)
    assert sent[0]["status"] == 507 and not called
    assert b"nearly full (2.0 GB free" in sent[1]["body"]
    scope["headers"] = [(b"content-length", str(5 * 10**8).encode())]  # 1.5 GB would stay free: let through
    async_to_sync(UploadSizeLimit(app))(scope, receive, send)
    assert called == [True]
