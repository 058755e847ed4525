"""The tokenizer form in the system Chromium (issue 21): the number of T5 sentinel tokens follows
the algorithm (Unigram, the one T5 trains: T5's 100; the others: none) until the person types a
number of their own."""
from __future__ import annotations

import pytest

from webapp.corpora.models import Corpus
from webapp.jobs.models import JobStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def corpus(alice):
    return Corpus.objects.create(owner=alice, name="ready", status=JobStatus.READY,
                                 stats={"documents": 10, "sentences": 100})


def test_the_sentinels_follow_the_algorithm_until_edited(corpus, alice_cookie, live_server_page):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/corpora/{corpus.id}/")
    assert page.input_value("#id_extra_ids") == "0"  # WordPiece
    page.select_option("#id_algorithm", "unigram")
    assert page.input_value("#id_extra_ids") == "100"
    page.select_option("#id_algorithm", "bpe")
    assert page.input_value("#id_extra_ids") == "0"
    page.fill("#id_extra_ids", "7")
    page.select_option("#id_algorithm", "unigram")
    assert page.input_value("#id_extra_ids") == "7"  # the person's number stays


@pytest.fixture
def queued(alice, corpus):
    from webapp.corpora.models import Tokenizer

    return Tokenizer.objects.create(owner=alice, corpus=corpus, name="wp", status=JobStatus.PENDING)


def test_the_badges_follow_the_bar_once_a_worker_moves_it(queued, alice_cookie, live_server_page):
    """Issue 45, point 8: a tokenizer page opened while the job waited said "Waiting for a worker"
    above a bar at 87%; its badge, and the one in the corpus page's table, follow the bar."""
    from webapp.corpora.models import Tokenizer

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/corpora/tokenizers/{queued.id}/")
    assert page.text_content("#status-badge").strip() == "Waiting for a worker"
    Tokenizer.objects.filter(pk=queued.pk).update(progress=87.0)  # the worker reports before its row says so
    page.wait_for_function("() => document.querySelector('.job-percent').textContent.trim() === '87 %'")
    page.wait_for_function("() => document.getElementById('status-badge').textContent.trim() === 'Processing'")
    assert "processing" in page.get_attribute("#status-badge", "class")

    Tokenizer.objects.filter(pk=queued.pk).update(progress=0.0)
    page.goto(f"/corpora/{queued.corpus_id}/")
    cell = ".status-cell .badge"
    assert page.text_content(cell).strip() == "Waiting for a worker"
    Tokenizer.objects.filter(pk=queued.pk).update(progress=40.0)
    page.wait_for_function(f"() => document.querySelector('{cell}').textContent.trim() === 'Processing'")
