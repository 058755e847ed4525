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
