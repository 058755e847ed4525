"""A run on two devices launched from the form, in the system Chromium: the real worker starts it
under torchrun (two processes over gloo on the CPU) and the dashboard charts it live."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_two_device_run_from_the_form_is_charted(page, live_stack, shots, sign_up, create_demo_corpus,
                                                   train_tokenizer):
    sign_up("devi")
    create_demo_corpus()
    train_tokenizer(2000)
    page.click("text=Launch a run with this tokenizer")
    page.wait_for_selector("#run-form")
    # the form's deferred script (run_form.js) has run before DOMContentLoaded: its listeners are on
    page.wait_for_load_state("domcontentloaded")
    for field, value in {"max_steps": "30", "batch_size": "4", "seq_len": "64", "warmup_steps": "3",
                         "eval_every": "15", "checkpoint_every": "15", "grad_accum": "2", "devices": "2"}.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_device", "cpu")
    # the summary follows the fields as they are typed (a fresh clone's CI once read it empty here)
    page.wait_for_function("t => document.getElementById('run-summary').innerText.includes(t)",
                           arg="16 sequences (4 × 2 × 2 devices)", timeout=10_000)
    page.click("summary:has-text('Advanced settings')")
    page.fill("#id_log_every", "5")
    page.click("#launch")
    page.wait_for_url("**/runs/*-*/")
    assert page.inner_text("#run-batch") == "effective batch 16 (4 x 2 x 2 devices)"

    page.wait_for_selector("#run-status.succeeded", timeout=300_000)
    page.wait_for_function("() => { const el = document.getElementById('chart-loss');"
                           " return el && el.data && el.data[0].x.length === 7; }")  # steps 1, 5, ..., 30 once each
    assert page.inner_text("#run-log").count("on 2 cpu processes (fp32, DDP)") == 1
    page.screenshot(path=str(shots / "dashboard-two-devices.png"), full_page=True)
