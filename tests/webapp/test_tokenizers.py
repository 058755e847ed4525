"""Tokenizers: training from a ready corpus (page and API), statistics, the live tokenize box, ownership."""
from __future__ import annotations

import random

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from webapp.corpora import services
from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

SYLLABLES = "ka lo mi re su ta ne vo pi da gu fe ri to ma li sa no be ku".split()


def corpus_text(n_docs: int = 40, sentences: int = 8, seed: int = 1) -> str:
    """A few hundred sentences over a made-up vocabulary of a few hundred words."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.sample(SYLLABLES, rng.randint(1, 3))) for _ in range(600)})
    docs = []
    for _ in range(n_docs):
        docs.append("\n".join(" ".join(rng.choices(words, k=rng.randint(5, 12))).capitalize() + "."
                              for _ in range(sentences)))
    return "\n\n".join(docs) + "\n"


@pytest.fixture
def ready_corpus(alice) -> Corpus:
    corpus = services.corpus_create_from_upload(
        owner=alice, name="Syllables", uploaded_file=SimpleUploadedFile("s.txt", corpus_text().encode()),
        original_filename="s.txt", options={},
    )
    services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY, corpus.error
    return corpus


def test_a_tokenizer_trains_and_the_tokenize_endpoint_answers(alice_api, ready_corpus, eager,
                                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post("/api/tokenizers/", {"corpus": str(ready_corpus.id), "vocab_size": 500,
                                                       "lowercase": True}, format="json")
    assert response.status_code == 201
    created = response.json()
    assert created["corpus"] == str(ready_corpus.id) and created["algorithm"] == "wordpiece"
    assert created["name"] == "Syllables · wordpiece 500 uncased"

    body = alice_api.get(f"/api/tokenizers/{created['id']}/").json()
    assert body["status"] == "ready" and body["progress"] == 100, body["error"]
    stats = body["stats"]
    assert 100 < stats["vocab_size"] <= 500
    assert stats["tokens_per_word"] >= 1 and 0 <= stats["unk_rate"] < 0.05
    assert stats["shards"]["train"]["n_tokens"] > 0 and stats["shards"]["valid"]["n_tokens"] > 0
    folder = Tokenizer.objects.get(pk=created["id"]).folder
    assert (folder / "tokenizer.json").is_file() and (folder / "shards" / "train" / "tokens.bin").is_file()
    assert not list(folder.parent.glob(".*"))  # no temporary folder left behind

    tokens = alice_api.post(f"/api/tokenizers/{created['id']}/tokenize/", {"text": "Kalo mire sutane."},
                            format="json")
    assert tokens.status_code == 200
    pieces = tokens.json()["tokens"]
    assert pieces and all(set(p) == {"token", "id"} for p in pieces)
    assert "".join(p["token"].removeprefix("##") for p in pieces) == "kalomiresutane."

    assert alice_api.get("/api/tokenizers/").json()[0]["id"] == created["id"]


def test_the_page_form_trains_a_tokenizer_and_its_page_shows_everything(alice_client, ready_corpus, eager,
                                                                        django_capture_on_commit_callbacks):
    corpus_page = alice_client.get(reverse("corpora:detail", args=[ready_corpus.id])).content.decode()
    assert '<option value="wordpiece" selected>' in corpus_page
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("corpora:tokenizer-create", args=[ready_corpus.id]), {
            "name": "Tiny pieces", "algorithm": "wordpiece", "vocab_size": 500, "lowercase": "on",
        })
    tokenizer = Tokenizer.objects.get(name="Tiny pieces")
    assert response.status_code == 302 and response.url == reverse("corpora:tokenizer-detail", args=[tokenizer.id])
    assert tokenizer.status == JobStatus.READY, tokenizer.error

    html = alice_client.get(response.url).content.decode()
    assert "tokens per word" in html and "unknown tokens" in html and "Token shards" in html
    assert f'data-url="/api/tokenizers/{tokenizer.id}/tokenize/"' in html and "js/corpora-tokenize.js" in html
    assert f"/runs/new/?tokenizer={tokenizer.id}" in html
    # the tokenizer's identity is its content: the page names it, and says why (issue 30, point 7)
    from trainer.prep.tokenization import tokenizer_sha256

    assert "may give another vocabulary" in corpus_page
    assert tokenizer.stats["sha256"] == tokenizer_sha256(tokenizer.folder)
    assert f"sha256 <code>{tokenizer.stats['sha256']}</code>" in html and "may have another vocabulary" in html
    assert "Tiny pieces" in alice_client.get(reverse("corpora:tokenizer-list")).content.decode()
    assert "Tiny pieces" in alice_client.get(reverse("corpora:detail", args=[ready_corpus.id])).content.decode()


def test_a_corpus_still_processing_cannot_get_a_tokenizer(alice_api, alice_client, alice):
    corpus = Corpus.objects.create(owner=alice, name="Busy", status=JobStatus.PROCESSING)
    response = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id)}, format="json")
    assert response.status_code == 400
    assert response.json()["error"].startswith("corpus: The corpus is still being processed.")

    page = alice_client.post(reverse("corpora:tokenizer-create", args=[corpus.id]),
                             {"algorithm": "wordpiece", "vocab_size": 500}, follow=True)
    assert page.redirect_chain == [(reverse("corpora:detail", args=[corpus.id]), 302)]
    assert "The corpus is still being processed." in page.content.decode()
    assert not Tokenizer.objects.exists()


def test_a_failed_corpus_cannot_get_a_tokenizer(alice_api, alice):
    corpus = Corpus.objects.create(owner=alice, name="Broken", status=JobStatus.FAILED, error="bad")
    response = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id)}, format="json")
    assert response.status_code == 400 and "failed to process" in response.json()["error"]


@pytest.mark.parametrize("payload, message", [
    ({"vocab_size": 10}, "vocab_size: Ensure this value is greater than or equal to 100."),
    ({"vocab_size": 10**7}, "vocab_size: Ensure this value is less than or equal to 200000."),
    ({"algorithm": "magic"}, 'algorithm: "magic" is not a valid choice.'),
])
def test_bad_settings_are_refused_with_a_sentence(alice_api, alice, payload, message):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    response = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id), **payload}, format="json")
    assert response.status_code == 400 and response.json()["error"] == message


def test_training_failure_is_shown_and_leaves_no_files(alice, ready_corpus, monkeypatch):
    import trainer.prep.tokenization
    from trainer.errors import TokenizerError

    def refuse(*args, **kwargs):
        raise TokenizerError("The corpus has too little text to learn a vocabulary from.")

    monkeypatch.setattr(trainer.prep.tokenization, "train_tokenizer", refuse)
    tokenizer = services.tokenizer_create(owner=alice, corpus=ready_corpus, name="", algorithm="wordpiece",
                                          vocab_size=500, lowercase=True)
    services.tokenizer_process(tokenizer_id=tokenizer.id)
    tokenizer.refresh_from_db()
    assert tokenizer.status == JobStatus.FAILED
    assert tokenizer.error == "The corpus has too little text to learn a vocabulary from."
    assert not tokenizer.folder.exists() and not list(tokenizer.folder.parent.glob(".*"))


def test_tokenize_waits_for_the_tokenizer(alice_api, alice):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.PROCESSING)
    response = alice_api.post(f"/api/tokenizers/{tokenizer.id}/tokenize/", {"text": "hi"}, format="json")
    assert response.status_code == 400 and "not ready yet" in response.json()["error"]


def test_pending_tokenizer_page_shows_a_live_progress_bar(alice_client, alice):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.PROCESSING,
                                         progress=42)
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[tokenizer.id])).content.decode()
    assert f'data-job-url="/api/tokenizers/{tokenizer.id}/"' in html and "42 %" in html
    assert "Launch a run" not in html


def test_another_user_gets_404_for_the_tokenizer(alice, bob_client, bob_api):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="Alice's", status=JobStatus.READY)
    for url in (reverse("corpora:tokenizer-detail", args=[tokenizer.id]),
                reverse("corpora:tokenizer-delete", args=[tokenizer.id])):
        assert bob_client.get(url).status_code == 404
    assert "Alice's" not in bob_client.get(reverse("corpora:tokenizer-list")).content.decode()
    responses = [
        bob_api.get(f"/api/tokenizers/{tokenizer.id}/"),
        bob_api.delete(f"/api/tokenizers/{tokenizer.id}/"),
        bob_api.post(f"/api/tokenizers/{tokenizer.id}/tokenize/", {"text": "hi"}, format="json"),
        bob_api.post("/api/tokenizers/", {"corpus": str(corpus.id)}, format="json"),  # Alice's corpus
    ]
    for response in responses:
        assert response.status_code == 404
        assert response.json() == {"error": "Not found. It does not exist, or it is not yours."}
    assert bob_api.get("/api/tokenizers/").json() == []
    assert Tokenizer.objects.count() == 1


def test_anonymous_tokenizer_api_is_refused(anon_api):
    response = anon_api.get("/api/tokenizers/")
    assert response.status_code in (401, 403) and "Authorization: Token" in response.json()["error"]


def test_delete_a_tokenizer(alice_client, alice, django_capture_on_commit_callbacks):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.READY)
    tokenizer.folder.mkdir(parents=True)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("corpora:tokenizer-delete", args=[tokenizer.id]))
    assert response.status_code == 302 and response.url == reverse("corpora:tokenizer-list")
    assert not Tokenizer.objects.exists() and not tokenizer.folder.exists()
    assert Corpus.objects.filter(pk=corpus.pk).exists()
