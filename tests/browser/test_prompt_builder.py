"""The explorer's prompt builder in Chromium: a GPT checkpoint and a classification dataset of
Alice's; the page shows exactly the prompt trainer.inference.incontext builds, each label's score,
and accuracy against k, saved and charted on the dataset's page beside the fine-tuning runs."""
from __future__ import annotations

import pytest

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_explorer_incontext import make_dataset
from tests.webapp.test_runs_compare import finetune_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpt_and_dataset(alice):
    gpt, dataset = family_checkpoint(alice, "gpt", run=True), make_dataset(alice)
    finetune_run(alice, dataset, gpt, "tuned", lr=1e-3, valid=[0.5], test={"accuracy": 0.75})
    return gpt, dataset


def test_the_prompt_builder_shows_the_prompt_sent_and_the_scores(gpt_and_dataset, alice_cookie, live_server_page):
    from trainer.inference import incontext

    gpt, dataset = gpt_and_dataset
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={gpt.id}")
    page.fill("#icl-template", "Q: {text}\nA: {label}")
    page.fill("#icl-k", "1")
    page.fill("#icl-index", "1")
    page.click("#icl-build")
    page.wait_for_selector("#icl-result:not([hidden])")
    expected = incontext.score_prompt(gpt.folder, dataset.data_dir, k=1, index=1, template="Q: {text}\nA: {label}")
    assert page.text_content("[data-icl-prompt]") == expected["prompt"]
    assert page.locator("[data-icl-scores] tr").count() == 2
    assert f'Predicted "{expected["predicted"]}"' in page.text_content("[data-icl-verdict]")

    page.fill("#icl-kmax", "2")
    page.fill("#icl-queries", "2")
    page.click("#icl-accuracy")
    page.wait_for_selector("#icl-accuracy-result:not([hidden])")
    assert page.locator("[data-icl-accuracy] tr").count() == 3

    # saved: the link goes to the dataset's page, which charts it beside the fine-tuning runs
    page.click("[data-icl-saved-link]")
    page.wait_for_selector("#incontext-chart .main-svg")
    assert page.url.endswith(f"/datasets/{dataset.id}/#incontext")
    assert page.locator("#incontext-table tbody tr").count() == 1
    assert page.locator("#incontext-chart .scatterlayer .trace").count() == 2  # the evaluation and the reference
    page.goto(f"/explore/?checkpoint={gpt.id}")

    page.fill("#icl-template", "{label} first")
    page.click("#icl-build")
    page.wait_for_function("document.querySelector('[data-error=prompt_builder]').textContent.includes('{label}')")
