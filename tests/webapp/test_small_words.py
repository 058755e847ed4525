"""The small words of the pages (issue 45, point 8): a badge that follows its job's bar, the home
page naming every corpus format and the server import, "1 document" in the singular."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus(alice):
    return Corpus.objects.create(owner=alice, name="ready", status=JobStatus.READY,
                                 stats={"documents": 10, "sentences": 100})


def badge(html: str, where: str = "") -> str:
    """The first status badge of the page (after `where`): its class and its words."""
    html = html.split(where, 1)[1] if where else html
    found = re.search(r'<span class="badge ([a-z]+)"[^>]*>([^<]*)</span>', html)
    return f"{found.group(1)}: {found.group(2)}"


def test_a_tokenizer_a_worker_has_moved_is_not_waiting_for_one(alice_client, alice, corpus):
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="wp", status=JobStatus.PENDING,
                                         progress=87.0)
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[tokenizer.id])).content.decode()
    assert badge(html, "<h1>") == "processing: Processing" and "87 %" in html
    assert 'id="status-badge"' in html and 'data-job-badge="#status-badge"' in html  # the bar's script updates it
    listing = alice_client.get(reverse("corpora:tokenizer-list")).content.decode()
    assert badge(listing, "<tbody>") == "processing: Processing"

    Tokenizer.objects.filter(pk=tokenizer.pk).update(progress=0.0)  # not yet taken: waiting, as before
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[tokenizer.id])).content.decode()
    assert badge(html, "<h1>") == "pending: Waiting for a worker"


def test_the_home_page_names_every_corpus_format_and_the_server_import(client):
    html = client.get(reverse("home")).content.decode()
    card = html.split("1 · Corpus", 1)[1].split("</div>", 1)[0]
    assert "gzip welcome" not in card
    for words in (".txt", ".jsonl", "Parquet", "Arrow", "gzip", "zstd", "bzip2", "import them from the server"):
        assert words in card, words


def test_one_document_is_singular(alice_client, alice):
    from webapp.corpora import display

    corpus = Corpus.objects.create(owner=alice, name="one", status=JobStatus.READY, options={"min_words": True},
                                   stats={"documents": 2, "sentences": 40, "words": 1, "characters": 900,
                                          "bytes": 900, "input": {"files": 1, "bytes": 900, "documents": 1,
                                                                  "lines": 1}},
                                   removed={"pages_left_empty": 1, "lines_min_words": 1})
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "1 document before cleaning" in html and "1 line;" in html
    assert re.search(r'data-removed="pages_left_empty">.*?<td class="num">1 document</td>', html, re.S)
    assert "<b>1</b>word</div>" in html and "<b>2</b>documents</div>" in html
    assert "1 documents" not in html and "1 lines" not in html
    assert display.removed_rows({"pages_left_empty": 3}, {})[0]["unit"] == "documents"
