"""XLNet in the explorer, in the system Chromium: the text's tokens, positions clicked in the order to
predict them, each step's top tokens, and the query stream's attention heatmap (its diagonal empty).
Django serves the page from a thread of this process (live_server); the checkpoint is a tiny random
XLNet. Screenshot: test-artifacts/screenshots/explorer-xlnet.png."""
from __future__ import annotations

import pytest

from tests.webapp.explorer_models_helpers import family_checkpoint

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def xlnet(alice):
    return family_checkpoint(alice, "xlnet", extra_ids=0)


def test_fill_in_by_permutation_and_both_streams(xlnet, alice_cookie, live_server_page, shots):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={xlnet.id}")
    assert page.is_visible("#permutation") and page.is_hidden("#fill-mask") and page.is_hidden("#generate")
    assert "XLNet: fill in chosen positions" in page.inner_text("#checkpoint-kind")

    page.fill("#id_permutation_text", "the cat sat on the mat")
    page.click("#permutation-tokens-button")
    page.wait_for_selector("#permutation-tokens .permutation-token")
    chips = page.locator("#permutation-tokens .permutation-token")
    assert chips.count() == 6 and page.is_disabled("#permutation-button")
    chips.nth(5).click()
    chips.nth(1).click()
    assert page.inner_text("#permutation-order-text").startswith("Order: 1. “mat” (position 5), 2. “cat” (position 1)")
    assert page.inner_text("#permutation-tokens .picked >> nth=0").startswith("2")  # "cat" is the second
    page.fill("#id_permutation_top_k", "3")
    page.click("#permutation-button")
    page.wait_for_selector("#permutation-steps > li")
    steps = page.locator("#permutation-steps > li")
    assert steps.count() == 2
    assert steps.nth(0).inner_text().startswith("Position 5") and steps.nth(1).inner_text().startswith("Position 1")
    assert steps.nth(0).locator("ul li").count() == 3
    assert page.inner_text("#permutation-filled").strip()

    page.select_option("#id_attention_stream", "query")
    page.fill("#id_attention_text", "the cat sat on the mat")
    page.click("#attention-button")
    page.wait_for_function("() => { const el = document.getElementById('attention-chart');"
                           " return el && el.data && el.data.length > 0 && el.data[0].z.length > 1; }")
    diagonal = page.evaluate("() => document.getElementById('attention-chart').data[0].z.map((row, i) => row[i])")
    assert diagonal and all(v == 0 for v in diagonal)
    assert "query stream" in page.inner_text("#attention-caption")
    page.screenshot(path=str(shots / "explorer-xlnet.png"), full_page=True)
