"""Corpus pages and services: upload (stored under a UUID name), ingest, clear errors, deletion, ownership."""
from __future__ import annotations

import gzip
import json
from html import escape as html_escape
import logging
import random
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from webapp.corpora import services
from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs import lifecycle
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

WORDS = (
    "river mountain quiet garden letter window morning evening forest silver harbor engine valley "
    "student teacher market village bridge lantern winter summer autumn spring orchard meadow castle "
    "painter sailor farmer doctor library kitchen candle mirror thunder shadow feather pocket ribbon "
    "walks carries finds builds paints writes reads opens closes watches follows remembers forgets "
    "slowly quickly gently often never always again together alone beneath beyond across within"
).split()


def sample_text(n_docs: int = 12, sentences: int = 8, seed: int = 0) -> str:
    """Documents of simple sentences, a blank line between documents (the .txt format)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        lines = []
        for _ in range(sentences):
            words = rng.sample(WORDS, rng.randint(6, 11))
            lines.append(" ".join(words).capitalize() + ".")
        docs.append("\n".join(lines))
    return "\n\n".join(docs) + "\n"


def sample_jsonl(n_docs: int = 12) -> str:
    return "".join(json.dumps({"text": doc}) + "\n" for doc in sample_text(n_docs).split("\n\n"))


def upload(client, filename: str, content: bytes, *, xhr: bool = False, **fields):
    data = {"file": SimpleUploadedFile(filename, content), "name": "", **fields}
    headers = {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"} if xhr else {}
    return client.post(reverse("corpora:upload"), data, **headers)


def stored_files(corpus: Corpus) -> set[str]:
    return {p.name for p in corpus.folder.iterdir()}


# ------------------------------------------------------------------ the upload form


def test_upload_page_has_one_checkbox_per_cleaning_rule(alice_client):
    from trainer.prep.corpus import RULES

    html = alice_client.get(reverse("corpora:upload")).content.decode()
    for field, label, _help in RULES:
        assert f'name="{field}"' in html
        assert label.replace('"', "&quot;") in html
    assert 'id="upload-form"' in html and "js/upload.js" in html
    assert 'enctype="multipart/form-data"' in html


def test_uploaded_file_is_stored_under_the_corpus_id_not_the_clients_name(alice_client, alice, django_capture_on_commit_callbacks):
    content = sample_text().encode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = upload(alice_client, "../../evil.txt", content)
    corpus = Corpus.objects.get(owner=alice)
    assert response.status_code == 302 and response.url == reverse("corpora:detail", args=[corpus.id])
    assert len(callbacks) == 1  # the ingest task is queued after commit
    assert corpus.folder == Path(django_settings.STORAGE_ROOT) / "corpora" / str(corpus.id)
    assert stored_files(corpus) == {"raw.txt"}
    assert (corpus.folder / "raw.txt").read_bytes() == content
    assert corpus.original_filename == "evil.txt"  # shown only
    assert corpus.name == "evil" and corpus.size_bytes == len(content)
    storage = Path(django_settings.STORAGE_ROOT)
    assert not any("evil" in p.name for p in storage.rglob("*"))
    assert not list(Path(django_settings.FILE_UPLOAD_TEMP_DIR).iterdir())  # the temp file was moved, not copied


def test_upload_by_xhr_answers_json_with_the_corpus_page(alice_client, alice):
    response = upload(alice_client, "poems.txt", sample_text().encode(), xhr=True, name="My poems")
    assert response.status_code == 201
    corpus = Corpus.objects.get(owner=alice)
    assert response.json() == {"id": str(corpus.id), "redirect": reverse("corpora:detail", args=[corpus.id])}
    assert corpus.name == "My poems"


@pytest.mark.parametrize("name", ["report.pdf", "notes.docx", "data.csv", "archive.gz", "txt"])
def test_wrong_extension_is_refused_at_once(alice_client, alice, name):
    page = upload(alice_client, name, b"some text")
    assert page.status_code == 200
    assert "is not a file type LM Workbench reads" in page.content.decode()
    assert not Corpus.objects.exists()

    response = upload(alice_client, name, b"some text", xhr=True)
    assert response.status_code == 400
    assert "Upload a .txt file" in response.json()["fields"]["file"][0]


def test_empty_file_is_refused_at_once(alice_client):
    page = upload(alice_client, "empty.txt", b"")
    assert "The file is empty (0 bytes)." in page.content.decode()
    assert not Corpus.objects.exists()


def test_file_over_the_size_limit_is_refused_by_the_form(alice_client, settings):
    settings.UPLOAD_MAX_BYTES = 1000
    page = upload(alice_client, "big.txt", b"x" * 1001)
    assert "The file is 1,001 bytes; the largest upload accepted is 1,000 bytes." in page.content.decode()
    assert not Corpus.objects.exists()


def test_cleaning_choices_are_kept_and_what_they_removed_is_shown(alice_client, alice, eager,
                                                                  django_capture_on_commit_callbacks):
    text = sample_text() + "\nA heading without a full stop\nMenu\n"
    with django_capture_on_commit_callbacks(execute=True):
        upload(alice_client, "c.txt", text.encode(), terminal_punct="on")
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.READY, corpus.error
    assert corpus.options["terminal_punct"] is True and corpus.options["min_words"] is False
    assert corpus.removed["lines_without_terminal_punctuation"] == 2
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "Keep only lines that end in terminal punctuation" in html
    assert "2 lines" in html


# ------------------------------------------------------------------ processing


def test_txt_upload_becomes_ready_with_statistics_and_preview(alice_client, alice, eager,
                                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        upload(alice_client, "poems.txt", sample_text().encode())
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.READY and corpus.progress == 100 and corpus.error == ""
    assert corpus.stats["documents"] == 12 and corpus.stats["sentences"] == 96
    assert corpus.stats["train"]["documents"] + corpus.stats["valid"]["documents"] == 12
    assert {"train.txt", "valid.txt"} <= stored_files(corpus)
    assert corpus.preview and corpus.preview[0][0].endswith(".")

    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "Statistics" in html and "Validation" in html and "Training" in html
    assert corpus.preview[0][0] in html
    assert 'id="train-tokenizer"' in html and 'value="8000"' in html
    assert "data-job-url" not in html  # no progress bar once it is ready


@pytest.mark.parametrize("name, compress", [("poems.txt.gz", sample_text), ("poems.jsonl.gz", sample_jsonl),
                                             ("poems.jsonl", sample_jsonl)])
def test_compressed_and_jsonl_uploads_work(alice_client, alice, eager, django_capture_on_commit_callbacks, name,
                                           compress):
    data = compress().encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    with django_capture_on_commit_callbacks(execute=True):
        upload(alice_client, name, data)
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.READY, corpus.error
    assert corpus.stats["documents"] == 12
    suffix = name[name.index("."):]
    assert f"raw{suffix}" in stored_files(corpus)


BAD_UPLOADS = [
    ("binary.txt", b"Hello there.\x00\x01\x02 binary", "contains a NUL byte at byte offset 12"),
    ("latin1.txt", "Caf\u00e9 au lait.\n".encode("latin-1") + sample_text().encode(),
     "not valid UTF-8: the byte 0xE9 at byte offset 3"),
    ("windows.txt", sample_text().encode("utf-16"), "encoded as UTF-16"),
    ("broken.jsonl", (json.dumps({"text": "Fine."}) + "\n{\"text\": \"oops\n").encode(),
     "Line 2 of \"broken.jsonl\" is not valid JSON"),
    ("tiny.txt", b"Just one short sentence.\n", "too small to train on"),
    ("hollow.txt.gz", gzip.compress(b""), "decompresses to 0 bytes"),
]


@pytest.mark.parametrize("name, content, message", BAD_UPLOADS, ids=[b[0] for b in BAD_UPLOADS])
def test_bad_upload_fails_with_a_clear_message_and_no_half_made_output(
    alice_client, alice, eager, django_capture_on_commit_callbacks, alice_api, name, content, message,
):
    with django_capture_on_commit_callbacks(execute=True):
        upload(alice_client, name, content)
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.FAILED
    assert message in corpus.error
    assert stored_files(corpus) == {f"raw{name[name.index('.'):]}"}  # no train/valid/stats, no temp folder

    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert 'class="errorbox big"' in html and html_escape(message) in html
    assert "Train a tokenizer" not in html
    body = alice_api.get(f"/api/corpora/{corpus.id}/").json()
    assert body["status"] == "failed" and message in body["error"]


def test_an_internal_error_is_logged_and_shown_as_a_generic_sentence(alice, monkeypatch, caplog, settings):
    import trainer.prep.corpus

    def broken_ingest(*args, **kwargs):
        raise RuntimeError("disk on fire")

    corpus = services.corpus_create_from_upload(
        owner=alice, name="c", uploaded_file=SimpleUploadedFile("c.txt", sample_text().encode()),
        original_filename="c.txt", options={},
    )
    monkeypatch.setattr(trainer.prep.corpus, "ingest", broken_ingest)
    with caplog.at_level(logging.ERROR, logger="webapp.corpora.services"):
        services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.FAILED
    assert corpus.error == lifecycle.INTERNAL_ERROR and "disk on fire" not in corpus.error
    assert "disk on fire" in caplog.text and "Traceback" in caplog.text


def test_processing_reports_progress_to_the_row(alice, monkeypatch):
    import trainer.prep.corpus

    seen = []
    real_ingest = trainer.prep.corpus.ingest

    def watching_ingest(*args, progress, **kwargs):
        def spy(percent):
            progress(percent)
            seen.append(Corpus.objects.get(pk=corpus.pk).progress)
        return real_ingest(*args, progress=spy, **kwargs)

    corpus = services.corpus_create_from_upload(
        owner=alice, name="c", uploaded_file=SimpleUploadedFile("c.txt", sample_text().encode()),
        original_filename="c.txt", options={},
    )
    monkeypatch.setattr(trainer.prep.corpus, "ingest", watching_ingest)
    services.corpus_process(corpus_id=corpus.id)
    assert Corpus.objects.get(pk=corpus.pk).status == JobStatus.READY
    assert seen and all(0 <= p <= 100 for p in seen)
    assert Corpus.objects.get(pk=corpus.pk).progress == 100


def test_a_finished_corpus_is_not_processed_twice(alice):
    corpus = Corpus.objects.create(owner=alice, name="done", status=JobStatus.READY, progress=100)
    services.corpus_process(corpus_id=corpus.id)  # a redelivered task: nothing happens
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY


def test_pending_corpus_page_shows_a_live_progress_bar(alice_client, alice):
    corpus = Corpus.objects.create(owner=alice, name="Waiting", status=JobStatus.PENDING)
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert f'data-job-url="/api/corpora/{corpus.id}/"' in html
    assert "Waiting for a worker" in html and "js/corpora.js" in html
    assert "You can train a tokenizer as soon as the corpus is ready." in html

    listing = alice_client.get(reverse("corpora:list")).content.decode()
    assert 'class="badge pending"' in listing and "data-job-url" in listing


def test_demo_corpus_is_built_and_ingested(alice_client, alice, eager, django_capture_on_commit_callbacks):
    page = alice_client.get(reverse("corpora:list")).content.decode()
    assert "Create a demo corpus" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("corpora:demo"))
    corpus = Corpus.objects.get(owner=alice)
    assert response.status_code == 302 and response.url == reverse("corpora:detail", args=[corpus.id])
    assert corpus.status == JobStatus.READY, corpus.error
    assert corpus.stats["documents"] > 100 and corpus.stats["words"] > 10_000
    assert corpus.size_bytes == (corpus.folder / "raw.txt").stat().st_size
    listing = alice_client.get(reverse("corpora:list")).content.decode()
    assert corpus.name in listing and 'class="badge ready"' in listing


# ------------------------------------------------------------------ deletion


def test_delete_asks_first_then_removes_the_corpus_its_tokenizers_and_files(
    alice_client, alice, django_capture_on_commit_callbacks,
):
    corpus = services.corpus_create_from_upload(
        owner=alice, name="c", uploaded_file=SimpleUploadedFile("c.txt", b"Some text."), original_filename="c.txt",
        options={},
    )
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t")
    tokenizer.folder.mkdir(parents=True)
    confirm = alice_client.get(reverse("corpora:delete", args=[corpus.id]))
    assert "cannot be undone" in confirm.content.decode() and "t" in confirm.context["also"]
    assert Corpus.objects.filter(pk=corpus.pk).exists()

    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("corpora:delete", args=[corpus.id]))
    assert response.status_code == 302 and response.url == reverse("corpora:list")
    assert not Corpus.objects.filter(pk=corpus.pk).exists()
    assert not Tokenizer.objects.filter(pk=tokenizer.pk).exists()
    assert not corpus.folder.exists() and not tokenizer.folder.exists()


def test_delete_is_refused_while_runs_use_the_corpus(alice_client, alice):
    from webapp.runs.models import Run

    corpus = Corpus.objects.create(owner=alice, name="Used", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.READY)
    Run.objects.create(owner=alice, name="r", corpus=corpus, tokenizer=tokenizer, family="bert",
                       preset="bert-tiny")
    response = alice_client.post(reverse("corpora:delete", args=[corpus.id]), follow=True)
    assert "“Used” is used by 1 run. Delete those runs first" in response.content.decode()
    assert Corpus.objects.filter(pk=corpus.pk).exists()


# ------------------------------------------------------------------ who may see what


def test_another_user_gets_404_for_every_corpus_page(alice, bob_client):
    corpus = Corpus.objects.create(owner=alice, name="Alice's diary", status=JobStatus.READY)
    for url in (reverse("corpora:detail", args=[corpus.id]), reverse("corpora:delete", args=[corpus.id])):
        assert bob_client.get(url).status_code == 404
    assert bob_client.post(reverse("corpora:delete", args=[corpus.id])).status_code == 404
    assert bob_client.post(reverse("corpora:tokenizer-create", args=[corpus.id]),
                           {"algorithm": "wordpiece", "vocab_size": 500}).status_code == 404
    assert "Alice's diary" not in bob_client.get(reverse("corpora:list")).content.decode()
    assert Corpus.objects.filter(pk=corpus.pk).exists() and not Tokenizer.objects.exists()


def test_anonymous_visitors_are_sent_to_log_in(client):
    for url in (reverse("corpora:list"), reverse("corpora:upload"), reverse("corpora:tokenizer-list")):
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_a_broker_that_does_not_answer_is_reported_on_the_corpus(alice, monkeypatch,
                                                                  django_capture_on_commit_callbacks):
    from webapp.corpora.tasks import ingest_corpus

    def down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(ingest_corpus, "apply_async", down)
    with django_capture_on_commit_callbacks(execute=True):
        corpus = services.corpus_create_from_upload(
            owner=alice, name="c", uploaded_file=SimpleUploadedFile("c.txt", b"Some text."),
            original_filename="c.txt", options={},
        )
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.FAILED and corpus.error == lifecycle.QUEUE_DOWN
