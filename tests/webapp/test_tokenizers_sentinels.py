"""The "T5 sentinel tokens" option of a tokenizer: form, API, training and the detail page."""
from __future__ import annotations

import html as html_lib
import json
import random
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from webapp.corpora import services
from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

SYLLABLES = "ka lo mi re su ta ne vo pi da gu fe ri to ma li sa no be ku".split()


def corpus_text(n_docs: int = 30, sentences: int = 8, seed: int = 2) -> str:
    rng = random.Random(seed)
    words = sorted({"".join(rng.sample(SYLLABLES, rng.randint(1, 3))) for _ in range(400)})
    docs = ["\n".join(" ".join(rng.choices(words, k=rng.randint(5, 12))).capitalize() + "." for _ in range(sentences))
            for _ in range(n_docs)]
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


def test_the_api_trains_a_tokenizer_with_sentinels(alice_api, ready_corpus, eager, django_capture_on_commit_callbacks):
    from trainer.prep.tokenization import load_tokenizer

    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post("/api/tokenizers/", {"corpus": str(ready_corpus.id), "algorithm": "unigram",
                                                       "vocab_size": 300, "extra_ids": 100}, format="json")
    assert response.status_code == 201 and response.json()["extra_ids"] == 100
    body = alice_api.get(f"/api/tokenizers/{response.json()['id']}/").json()
    assert body["status"] == "ready", body["error"]
    assert body["extra_ids"] == 100 and body["stats"]["extra_ids"] == 100
    bundle = load_tokenizer(Tokenizer.objects.get(pk=body["id"]).folder)
    assert len(bundle.sentinel_ids) == 100 and bundle.sentinel_ids[-1] == bundle.vocab_size - 1
    pieces = alice_api.post(f"/api/tokenizers/{body['id']}/tokenize/", {"text": "Kalo <extra_id_7> mire."},
                            format="json").json()["tokens"]
    assert {"token": "<extra_id_7>", "id": bundle.sentinel_ids[7]} in pieces


def test_sentinels_default_to_t5s_for_unigram_and_to_none_otherwise(alice_api, alice):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    response = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id)}, format="json")
    assert response.status_code == 201 and response.json()["extra_ids"] == 0  # WordPiece: none
    # Unigram is what T5 trains: its 100 sentinels unless told otherwise (issue 21)
    unigram = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id), "algorithm": "unigram"}, format="json")
    assert unigram.status_code == 201 and unigram.json()["extra_ids"] == 100
    none = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id), "algorithm": "unigram", "extra_ids": 0},
                          format="json")
    assert none.json()["extra_ids"] == 0
    assert sorted(Tokenizer.objects.values_list("extra_ids", flat=True)) == [0, 0, 100]


@pytest.mark.parametrize("value, message", [
    (-1, "extra_ids: Ensure this value is greater than or equal to 0."),
    (1001, "extra_ids: Ensure this value is less than or equal to 1000."),
    ("lots", "extra_ids: A valid integer is required."),
])
def test_bad_sentinel_counts_are_refused_with_a_sentence(alice_api, alice, value, message):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY)
    response = alice_api.post("/api/tokenizers/", {"corpus": str(corpus.id), "extra_ids": value}, format="json")
    assert response.status_code == 400 and response.json()["error"] == message
    assert not Tokenizer.objects.exists()


def test_the_form_offers_sentinels_and_the_detail_page_shows_them(alice_client, ready_corpus, monkeypatch):
    from webapp.corpora import services as corpora_services

    monkeypatch.setattr(corpora_services, "_enqueue", lambda *a, **kw: None)  # the setting is what is tested here
    page = alice_client.get(reverse("corpora:detail", args=[ready_corpus.id])).content.decode()
    assert "T5 sentinel tokens" in page and "T5 span corruption needs these; T5 uses 100" in page
    assert re.search(r'<input type="number" name="extra_ids" value="0" [^>]*data-defaults="([^"]+)"', page)
    defaults = json.loads(html_lib.unescape(re.search(r'data-defaults="([^"]+)"', page).group(1)))
    assert defaults["unigram"] == 100 and defaults["wordpiece"] == defaults["bpe"] == 0
    # the launch form's link for T5 (?algorithm=unigram) opens the form on Unigram with T5's 100
    linked = alice_client.get(reverse("corpora:detail", args=[ready_corpus.id]) + "?algorithm=unigram").content.decode()
    assert '<option value="unigram" selected>' in linked
    assert re.search(r'<input type="number" name="extra_ids" value="100"', linked)

    alice_client.post(reverse("corpora:tokenizer-create", args=[ready_corpus.id]), {
        "name": "With sentinels", "algorithm": "unigram", "vocab_size": 300, "lowercase": "on", "extra_ids": 100})
    alice_client.post(reverse("corpora:tokenizer-create", args=[ready_corpus.id]), {
        "name": "Without", "algorithm": "unigram", "vocab_size": 300, "lowercase": "on", "extra_ids": 0})
    alice_client.post(reverse("corpora:tokenizer-create", args=[ready_corpus.id]), {
        "name": "Left empty", "algorithm": "unigram", "vocab_size": 300, "lowercase": "on", "extra_ids": ""})
    with_sentinels, without = Tokenizer.objects.get(name="With sentinels"), Tokenizer.objects.get(name="Without")
    assert (with_sentinels.extra_ids, without.extra_ids) == (100, 0)
    assert Tokenizer.objects.get(name="Left empty").extra_ids == 100  # without JavaScript: Unigram's default
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[with_sentinels.id])).content.decode()
    assert "100 T5 sentinel tokens" in html and "&lt;extra_id_99&gt;" in html
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[without.id])).content.decode()
    assert "no T5 sentinel tokens" in html

    response = alice_client.post(reverse("corpora:tokenizer-create", args=[ready_corpus.id]), {
        "algorithm": "unigram", "vocab_size": 300, "extra_ids": 5000})
    assert response.status_code == 400 and "less than or equal to 1000" in response.content.decode()


def test_training_passes_the_setting_to_the_trainer(alice, ready_corpus, monkeypatch):
    import trainer.prep.tokenization

    seen = {}

    def fake_train(corpus_dir, out_dir, **kwargs):
        seen.update(kwargs)
        raise trainer.prep.tokenization.TokenizerError("stop here")

    monkeypatch.setattr(trainer.prep.tokenization, "train_tokenizer", fake_train)
    tokenizer = services.tokenizer_create(owner=alice, corpus=ready_corpus, name="", algorithm="unigram",
                                          vocab_size=300, lowercase=True, extra_ids=42)
    services.tokenizer_process(tokenizer_id=tokenizer.id)
    tokenizer.refresh_from_db()
    assert seen["extra_ids"] == 42 and tokenizer.status == JobStatus.FAILED and tokenizer.error == "stop here"
