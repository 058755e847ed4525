"""A person's first session, in the system Chromium: sign up, demo corpus, tokenizer,
launch a run, watch the loss chart gain points live, and see fill-mask bars.

Screenshots land in test-artifacts/screenshots/ (the README's pictures come from there).
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def _chart_points(page, chart_id: str) -> int:
    return page.evaluate(
        """id => { const el = document.getElementById(id);
                   return el && el.data ? el.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0) : 0; }""",
        chart_id,
    )


# What a page must never show a person (issue 31, point 6): template syntax, or a Python list's repr.
RAW = ("{#", "#}", "{%", "%}", "{{", "}}", "['", "']")


def no_internals(page) -> None:
    text = page.inner_text("body")
    leaked = [raw for raw in RAW if raw in text]
    assert not leaked, (page.url, leaked)


def test_first_session_from_signup_to_fill_mask(page, live_stack, shots, sign_up, create_demo_corpus,
                                                train_tokenizer):
    sign_up("carol")
    assert page.inner_text("h1") == "Welcome, carol"  # just signed up: not "Welcome back"
    no_internals(page)
    create_demo_corpus()
    no_internals(page)
    page.screenshot(path=str(shots / "corpus.png"), full_page=True)
    train_tokenizer(3000)
    page.fill("#tokenize-input", "Return the number of items in the list.")
    page.wait_for_selector("#tokenize-output :nth-child(3)")

    no_internals(page)
    page.click("text=Launch a run with this tokenizer")
    page.wait_for_selector("#run-form")
    no_internals(page)
    for field, value in {"max_steps": "150", "batch_size": "8", "seq_len": "64", "warmup_steps": "10", "lr": "0.001",
                         "eval_every": "50", "checkpoint_every": "150"}.items():
        page.fill(f"#id_{field}", value)
    page.click("summary:has-text('Advanced settings')")
    page.fill("#id_log_every", "2")
    page.click("#launch")
    page.wait_for_url("**/runs/*-*/")

    # The chart first gets points, then gains more while we watch: it follows the run live.
    page.wait_for_function("() => { const el = document.getElementById('chart-loss'); return el && el.data && el.data[0] && el.data[0].x.length > 0; }", timeout=120_000)
    first = _chart_points(page, "chart-loss")
    page.wait_for_function(
        "n => { const el = document.getElementById('chart-loss'); return el.data.reduce((s, t) => s + t.x.length, 0) > n; }",
        arg=first, timeout=120_000,
    )
    assert _chart_points(page, "chart-loss") > first
    page.wait_for_selector("#run-status.succeeded", timeout=300_000)
    no_internals(page)
    page.screenshot(path=str(shots / "dashboard.png"), full_page=True)

    page.click("#checkpoints-body a[href*='/explore/']")
    page.wait_for_selector("#explore-form")
    page.fill("#id_text", "Return the [MASK] of items in the list.")
    page.click("button[value=fill_mask]")
    page.wait_for_selector("#fill-mask-results .explorer-mask svg .bars path, #fill-mask-results .explorer-mask svg .point path")
    no_internals(page)
    page.screenshot(path=str(shots / "explorer.png"), full_page=True)
