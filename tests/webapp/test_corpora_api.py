"""The corpora JSON API: create (upload or demo), list, read, delete; errors as sentences; ownership."""
from __future__ import annotations

import gzip

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

CORPUS_FIELDS = {"id", "name", "original_filename", "size_bytes", "status", "progress", "error", "options", "stats",
                 "removed", "preview", "created_at", "source_kind", "text_field", "sources", "sources_summary",
                 "progress_detail", "examples"}


def text(n_docs: int = 10) -> bytes:
    def doc(d: int) -> str:
        return "\n".join(f"Sentence {i} of document {d} talks about the quiet river and the old mill."
                         for i in range(8))

    return ("\n\n".join(f"Document {d}. " + doc(d) for d in range(n_docs)) + "\n").encode()


def post_file(api, filename: str, content: bytes, **fields):
    return api.post("/api/corpora/", {"file": SimpleUploadedFile(filename, content), **fields}, format="multipart")


def test_upload_creates_a_corpus_and_processing_makes_it_ready(alice_api, alice, eager,
                                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_file(alice_api, "mill.txt.gz", gzip.compress(text()), name="Mill", dedup_spans="true")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == CORPUS_FIELDS
    assert body["name"] == "Mill" and body["original_filename"] == "mill.txt.gz"
    assert body["options"]["dedup_spans"] is True and body["options"]["bad_words"] is False

    detail = alice_api.get(f"/api/corpora/{body['id']}/").json()
    assert detail["status"] == "ready" and detail["progress"] == 100, detail["error"]
    assert detail["stats"]["documents"] == 10 and detail["stats"]["train"]["documents"] == 9
    assert "sentences_in_duplicate_spans" in detail["removed"]
    assert detail["preview"][0][0].startswith("Document 0.")


def test_upload_answers_at_once_while_the_corpus_waits_for_a_worker(alice_api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as queued:
        body = post_file(alice_api, "mill.txt", text()).json()
    assert body["status"] == "pending" and body["progress"] == 0
    assert len(queued) == 1


@pytest.mark.parametrize("name, content, message", [
    ("notes.pdf", b"%PDF-1.4", "“notes.pdf” is not a file type LM Workbench reads."),
    ("empty.txt", b"", "The file is empty (0 bytes)."),
])
def test_bad_uploads_are_refused_with_a_sentence(alice_api, name, content, message):
    response = post_file(alice_api, name, content)
    assert response.status_code == 400
    assert response.json()["error"].startswith("file: " + message)
    assert not Corpus.objects.exists()


def test_missing_file_is_named(alice_api):
    response = alice_api.post("/api/corpora/", {"name": "x"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "file: No file was submitted."


def test_too_large_upload_is_refused(alice_api, settings):
    settings.UPLOAD_MAX_BYTES = 100
    response = post_file(alice_api, "big.txt", text())
    assert response.status_code == 400
    assert "the largest upload accepted is 100 bytes" in response.json()["error"]


def test_demo_flag_creates_the_demo_corpus(alice_api, alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = alice_api.post("/api/corpora/", {"demo": True}, format="json")
    assert response.status_code == 201
    corpus = Corpus.objects.get(owner=alice)
    assert response.json()["id"] == str(corpus.id) and corpus.name.startswith("Demo corpus")
    assert (corpus.folder / "raw.txt").stat().st_size == corpus.size_bytes > 100_000
    assert len(queued) == 1  # ingested by the normal task


def test_list_shows_only_your_corpora(alice_api, alice, bob):
    mine = Corpus.objects.create(owner=alice, name="Mine")
    Corpus.objects.create(owner=bob, name="Bob's")
    response = alice_api.get("/api/corpora/")
    assert response.status_code == 200
    assert [c["id"] for c in response.json()] == [str(mine.id)]


def test_another_users_corpus_is_not_found(alice, bob_api):
    corpus = Corpus.objects.create(owner=alice, name="Alice's", status=JobStatus.READY)
    for response in (bob_api.get(f"/api/corpora/{corpus.id}/"), bob_api.delete(f"/api/corpora/{corpus.id}/")):
        assert response.status_code == 404
        assert response.json() == {"error": "Not found. It does not exist, or it is not yours."}
    assert Corpus.objects.filter(pk=corpus.pk).exists()


def test_anonymous_api_calls_are_refused_with_a_sentence(anon_api, alice):
    corpus = Corpus.objects.create(owner=alice, name="Alice's")
    for response in (anon_api.get("/api/corpora/"), anon_api.get(f"/api/corpora/{corpus.id}/"),
                     anon_api.post("/api/corpora/", {"demo": True}, format="json")):
        assert response.status_code in (401, 403)
        assert "Authorization: Token" in response.json()["error"]


def test_delete_removes_the_corpus(alice_api, alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        corpus_id = post_file(alice_api, "mill.txt", text()).json()["id"]
    folder = Corpus.objects.get(pk=corpus_id).folder
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/corpora/{corpus_id}/").status_code == 204
    assert not folder.exists()
    assert alice_api.get(f"/api/corpora/{corpus_id}/").status_code == 404


def test_delete_is_refused_while_runs_use_it(alice_api, alice):
    from webapp.runs.models import Run

    corpus = Corpus.objects.create(owner=alice, name="Used", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.READY)
    Run.objects.create(owner=alice, name="r", corpus=corpus, tokenizer=tokenizer, family="bert",
                       preset="bert-tiny")
    response = alice_api.delete(f"/api/corpora/{corpus.id}/")
    assert response.status_code == 409
    assert response.json()["error"].startswith("“Used” is used by 1 run.")
