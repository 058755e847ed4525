"""A full disk said in a sentence (issue 22, point 2): uploads of any size and chunked bodies get
507 from the API and the pages, a run whose sink finds no room ends "failed: the disk is full"
as soon as that can be written, and the reaper skips what it cannot write instead of failing.

The disk is made full at the OS call: files that should land on it are opened on /dev/full,
whose every write fails with ENOSPC from the kernel. The database is made full with Django's
execute_wrapper: its writes raise what SQLite raises on a full volume."""
from __future__ import annotations

import errno
import json
import sqlite3
from contextlib import contextmanager
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.utils import OperationalError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs_helpers import make_run
from webapp.runs import execution, reaper
from webapp.runs.models import LogLine, MetricPoint, Run, RunStatus
from webapp.server.storage import DISK_FULL, is_disk_full

pytestmark = pytest.mark.django_db

BODY = b"The first document of a corpus.\n\n" * 21_000  # about 700 KB


def full_file(*args, **kwargs):
    """A "temporary file" on a volume with no space left: its writes fail with ENOSPC."""
    return open("/dev/full", "w+b")  # noqa: SIM115 - closed by its owner, like the file it stands for


@pytest.fixture
def full_upload_folder(monkeypatch):
    """Django's upload handler (TemporaryFileUploadHandler) writes every uploaded file to a
    temporary file in FILE_UPLOAD_TEMP_DIR: here, on the full volume."""
    from django.core.files import temp

    monkeypatch.setattr(temp, "NamedTemporaryFile", full_file)


@pytest.fixture
def full_temp_folder(monkeypatch):
    """Bodies spooled past 1 MB spill to tempfile.TemporaryFile: here, on the full volume."""
    import tempfile

    monkeypatch.setattr(tempfile, "TemporaryFile", full_file)


def test_the_errors_of_a_full_disk_are_recognised_in_every_layer():
    import psycopg

    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as driver:
            raise OperationalError(*driver.args) from driver  # as Django wraps a driver's error
    except OperationalError as wrapped:
        assert is_disk_full(wrapped)
    postgres = psycopg.errors.DiskFull('could not extend file "base/16384/16385": No space left on device')
    assert postgres.sqlstate == "53100" and is_disk_full(postgres)
    assert is_disk_full(OperationalError('could not extend file "base/1/2": No space left on device'))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(OperationalError("database is locked"))
    assert not is_disk_full(ValueError("no"))


# ---------------------------------------------------------------------------------- uploads
def test_an_api_upload_the_disk_refuses_is_a_507_with_a_sentence(alice_api, full_upload_folder):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = alice_api.post("/api/corpora/", {"file": SimpleUploadedFile("notes.txt", BODY), "name": "Notes"},
                              format="multipart")
    assert response.status_code == 507
    assert response.json() == {"error": DISK_FULL}


def test_an_api_upload_with_a_session_the_disk_refuses_is_a_507(alice, full_upload_folder):
    """With a session, DRF's CSRF check reads the body first (for the form's token)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get(reverse("corpora:upload"))
    response = client.post("/api/corpora/", {"file": SimpleUploadedFile("notes.txt", BODY), "name": "Notes"},
                           HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    assert response.status_code == 507 and response.json() == {"error": DISK_FULL}


def test_a_page_upload_the_disk_refuses_is_a_507_page_with_the_sentence(alice, full_upload_folder):
    """With the CSRF check on, as in a browser: it reads the form's token from the body too."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get(reverse("corpora:upload"))
    token = client.cookies["csrftoken"].value
    response = client.post(reverse("corpora:upload"), {"file": SimpleUploadedFile("notes.txt", BODY), "name": "Notes",
                                                       "csrfmiddlewaretoken": token})
    assert response.status_code == 507
    html = response.content.decode()
    assert "The disk is full" in html and "Delete runs, checkpoints or corpora you no longer need" in html
    assert "Traceback" not in html


def asgi_post(app, path: str, chunks: list[bytes], headers=()) -> tuple[int, dict, bytes]:
    """POST `chunks` to an ASGI app; (status, headers, body) of its answer."""
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/octet-stream"), *headers], "server": ("testserver", 80),
             "client": ("127.0.0.1", 1), "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}
    async_to_sync(app)(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("path, page", [("/api/corpora/", False), ("/corpora/upload/", True)])
def test_a_chunked_upload_the_disk_refuses_is_a_507(full_temp_folder, settings, path, page):
    """A body without a length is spooled by webapp.server.limits to count it; past 1 MB the spool
    spills to a file, which the full disk refuses."""
    from webapp.server.limits import UploadSizeLimit

    async def app(scope, receive, send):
        pytest.fail("the body never reached the app")

    settings.UPLOAD_MAX_BYTES = 10**8
    status, headers, body = asgi_post(UploadSizeLimit(app), path, [b"x" * 300_000] * 5)
    assert status == 507
    if page:
        assert headers[b"content-type"].startswith(b"text/html") and b"The disk is full" in body
    else:
        assert json.loads(body) == {"error": DISK_FULL}


@pytest.mark.django_db(transaction=True)
def test_a_body_the_disk_refuses_while_django_reads_it_is_a_507(full_temp_folder):
    """A body with a length is read by the web handler, which spools it past 1 MB."""
    from webapp.server.handler import PooledASGIHandler

    handler = PooledASGIHandler()
    try:
        chunks = [b"x" * 300_000] * 5
        status, _, body = asgi_post(handler, "/api/corpora/", chunks,
                                    headers=[(b"content-length", str(1_500_000).encode())])
    finally:
        handler.close()
    assert status == 507 and json.loads(body) == {"error": DISK_FULL}


# ----------------------------------------------------------------------------- runs, reaper
class FullDatabase:
    """Every INSERT, UPDATE and DELETE fails as SQLite's do on a full volume, while `full`."""

    def __init__(self) -> None:
        self.full = False
        self.refused: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        if self.full and sql.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            self.refused.append(sql)
            try:
                raise sqlite3.OperationalError("database or disk is full")
            except sqlite3.OperationalError as driver:
                raise OperationalError(*driver.args) from driver
        return execute(sql, params, many, context)


@contextmanager
def full_database():
    disk = FullDatabase()
    with connection.execute_wrapper(disk):
        yield disk


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_sink_finds_the_disk_full_ends_failed_with_the_sentence_once_there_is_room(
        alice, monkeypatch):
    """The sink's log line is refused mid-run (as in the issue): the training stops, and the
    worker records "The disk is full" as soon as the database takes writes again, over a reaper
    that marked the run crashed in that moment."""
    import time

    import trainer.training.engine

    run = make_run(alice)
    waits = []

    with full_database() as disk:
        def train(config, *, data_dir, out_dir, sink, should_stop, resume):
            for step in (5, 10):
                sink.metrics(step, "train", {"loss": 5.0 / step})
            disk.full = True
            sink.log("Validation at step 10: loss 0.5.")  # refused: the disk is full
            pytest.fail("the sink wrote to a full disk")

        def wait(seconds):  # the worker waiting to record the end: room again after its third wait ...
            waits.append(seconds)
            disk.full = len(waits) < 3
            if not disk.full:  # ... and the reaper took it first, calling the run silent
                Run.objects.filter(pk=run.pk).update(status=RunStatus.CRASHED, error="The worker stopped sending "
                                                     "heartbeats (last seen ...).")

        monkeypatch.setattr(trainer.training.engine, "train", train)
        monkeypatch.setattr(time, "sleep", wait)
        execution.run_execute(run_id=run.id)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error == execution.RUN_DISK_FULL
    assert run.error.startswith("The disk is full:") and "resume it" in run.error
    assert waits == [execution.END_RETRY_S] * 3  # it waited for room rather than giving up
    assert LogLine.objects.filter(run=run, text=execution.RUN_DISK_FULL).exists()  # written once there was room
    assert list(MetricPoint.objects.filter(run=run).values_list("step", flat=True).order_by("step")) == [5, 10]


@pytest.mark.django_db(transaction=True)
def test_the_reaper_skips_a_run_it_cannot_write_and_marks_it_on_a_later_pass(alice):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="gone:1",
                   heartbeat_at=timezone.now() - timedelta(hours=1))
    with full_database() as disk:
        disk.full = True
        assert reaper.mark_stale_runs() == 0  # no exception: the pass goes on, the next one tries again
        assert disk.refused
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert reaper.mark_stale_runs() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.CRASHED


# ----------------------------------------------------------------------------------- launches
def test_an_api_launch_the_full_database_refuses_is_a_507_with_a_sentence(alice, alice_api, enqueued):
    from tests.webapp.runs_helpers import make_data

    _, tokenizer = make_data(alice)
    with full_database() as disk:
        disk.full = True
        response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json")
    assert response.status_code == 507 and response.json() == {"error": DISK_FULL}
    assert not Run.objects.exists()


def test_a_page_launch_the_full_database_refuses_is_a_507_page(alice, alice_client, enqueued):
    from tests.webapp.runs_helpers import make_data
    from tests.webapp.test_runs import post_form

    _, tokenizer = make_data(alice)
    with full_database() as disk:
        disk.full = True
        response = post_form(alice_client, tokenizer)
    assert response.status_code == 507 and "The disk is full" in response.content.decode()
    assert not Run.objects.exists()


# --------------------------------------------------------------------------------------- jobs
def test_a_job_the_disk_refuses_fails_with_the_sentence(alice):
    from webapp.corpora.models import Corpus
    from webapp.jobs import lifecycle
    from webapp.jobs.models import JobStatus

    corpus = Corpus.objects.create(owner=alice, name="Notes", status=JobStatus.PROCESSING)
    lifecycle.fail(Corpus, corpus.pk, OSError(errno.ENOSPC, "No space left on device"))
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.FAILED and corpus.error == DISK_FULL
