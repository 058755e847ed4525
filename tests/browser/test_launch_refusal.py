"""The launch form in the system Chromium (issue 21): when the chosen tokenizer cannot serve the run,
the sentence saying why stands beside the launch button it turns off, with a link to the corpus
page's tokenizer form on the algorithm to train (T5's: Unigram, 100 sentinel tokens by default)."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_data

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def unigram_without_sentinels(alice):
    return make_data(alice, algorithm="unigram", extra_ids=0, name="plain unigram")


def test_the_sentinel_refusal_sits_beside_the_disabled_button(unigram_without_sentinels, alice_cookie,
                                                              live_server_page):
    corpus, tokenizer = unigram_without_sentinels
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/new/?tokenizer={tokenizer.id}")
    page.select_option("#id_family", "t5")
    page.wait_for_selector("#sentinel-warning:not([hidden])")
    assert page.is_disabled("#launch")
    button, refusal = page.locator("#launch").bounding_box(), page.locator("#sentinel-warning").bounding_box()
    assert 0 <= refusal["y"] - (button["y"] + button["height"]) < 40  # right under the button
    link = page.locator("#sentinel-warning a")
    assert link.text_content() == "train a tokenizer with 100 sentinel tokens"
    assert link.get_attribute("href") == f"/corpora/{corpus.id}/?algorithm=unigram#train-tokenizer"
