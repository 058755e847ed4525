"""UniLM's source -> target panel in the system Chromium: the Generate button submits the page's
form, and the script asks the API instead and writes the target in place (without JavaScript the
form posts and the page answers: tests/webapp/test_explorer_generate.py)."""
from __future__ import annotations

import pytest

from tests.webapp.test_explorer_generate import unilm_checkpoint  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_unilm_panel_writes_the_target_in_place(unilm_checkpoint, alice_cookie, live_server_page):  # noqa: F811
    from trainer.inference import generate as generation

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={unilm_checkpoint.id}")
    # a greyed button says why beside it, not only in a tooltip (issue 31, point 6): as for a model
    # trained without NSP (the chosen option says so to the script)
    assert page.is_hidden("[data-why=fill_mask]")  # its MLM head works: nothing to explain
    page.evaluate("""() => { const select = document.getElementById('id_checkpoint');
        select.selectedOptions[0].dataset.nsp = '0'; select.dispatchEvent(new Event('change')); }""")
    assert page.is_disabled("button[value=next_sentence]")
    assert page.text_content("[data-why=next_sentence]") == "This model was trained without next sentence prediction."
    assert not page.evaluate("() => document.querySelector('[data-why=next_sentence]').hidden")
    source = "return the value of the key."
    page.fill("#id_source", source)
    page.fill("#id_max_new_tokens", "6")
    page.evaluate("() => { window.samePage = true; }")
    page.click("#generate-button")
    page.wait_for_selector("#generate-result:not([hidden])")
    assert page.evaluate("() => window.samePage === true")  # asked by the script: the form was not posted
    expected = generation.generate(unilm_checkpoint.folder, source, strategy="greedy", max_new_tokens=6)
    assert expected["text"] and page.text_content("#generate-text") == expected["text"]
    assert page.text_content("#generate-stopped").startswith(f"{len(expected['tokens'])} tokens;")

    page.fill("#id_source", "")
    page.click("#generate-button")
    page.wait_for_function("document.querySelector('[data-error=generate_seq2seq]').textContent.trim() !== ''")
    assert page.is_hidden("#generate-result")
