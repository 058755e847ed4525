"""The launch form and the dashboard with the new families, in the system Chromium: choosing
T5 on a WordPiece tokenizer warns before launching; an ELMo run launched from the form charts
the perplexity of its forward and backward language models live."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _traces_with_points(page, chart_id: str) -> int:
    return page.evaluate(
        """id => { const el = document.getElementById(id);
                   return el && el.data ? el.data.filter(t => t.x && t.x.length).length : 0; }""", chart_id)


def test_elmo_from_the_launch_form_charts_both_directions(page, live_stack, shots, sign_up, create_demo_corpus,
                                                          train_tokenizer):
    sign_up("frank")
    create_demo_corpus()
    train_tokenizer(2000)
    page.click("text=Launch a run with this tokenizer")
    page.wait_for_selector("#run-form")

    # T5 reads a Unigram tokenizer with sentinel tokens: the form says so before anything is launched.
    page.select_option("#id_family", "t5")
    page.wait_for_selector("#tokenizer-warning:not([hidden])")
    assert "unigram" in page.inner_text("#tokenizer-warning").lower()

    page.select_option("#id_family", "elmo")
    page.wait_for_function("() => document.getElementById('id_preset').value.startsWith('elmo-')")
    for field, value in {"max_steps": "60", "batch_size": "8", "seq_len": "64", "warmup_steps": "5",
                         "eval_every": "20", "checkpoint_every": "60"}.items():
        page.fill(f"#id_{field}", value)
    page.click("summary:has-text('Advanced settings')")
    page.fill("#id_log_every", "5")
    page.click("#launch")
    page.wait_for_url("**/runs/*-*/")

    page.wait_for_selector("#run-status.succeeded", timeout=300_000)
    # Forward and backward, train and validation: four traces with points on the perplexity chart.
    page.wait_for_function("() => { const el = document.getElementById('chart-elmo_perplexity');"
                           " return el && el.data && el.data.filter(t => t.x && t.x.length).length === 4; }")
    assert _traces_with_points(page, "chart-elmo_loss") == 4
    page.screenshot(path=str(shots / "dashboard-elmo.png"), full_page=True)
