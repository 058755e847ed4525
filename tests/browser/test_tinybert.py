"""TinyBERT end to end in the system Chromium with the real worker: a tiny BERT teacher trained
through the API, then a TinyBERT run launched from the launch form with that teacher chosen (the
student's projections take the teacher's width), its four distillation losses charted with
points, and the student filling a [MASK] in the explorer. Screenshot: dashboard-tinybert.png."""
from __future__ import annotations

import pytest

from tests.browser.test_transfo_xl import POINTS, log_in
from tests.livestack import finished_run, launch_run, ready_corpus, ready_tokenizers, token_session

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOSSES = ("embeddings", "attention", "hidden states", "predictions")


def test_tinybert_from_the_form_with_a_teacher_to_fill_mask(page, live_stack, shots, django_user_model):
    s = token_session(django_user_model, "tina")
    api = live_stack.url + "/api"
    corpus = ready_corpus(s, live_stack, 60_000)
    tokenizer = ready_tokenizers(s, live_stack, corpus, {"wp": {"algorithm": "wordpiece"}})["wp"]
    teacher_run = launch_run(s, live_stack, tokenizer=tokenizer, family="bert", steps=4, preset="bert-tiny",
                             batch_size=4, seq_len=32)["id"]
    finished_run(s, live_stack, teacher_run)
    teacher = s.get(f"{api}/runs/{teacher_run}/checkpoints/").json()[-1]["id"]
    log_in(page, "tina")

    page.goto(f"/runs/new/?tokenizer={tokenizer}")
    page.select_option("#id_family", "tinybert")
    page.wait_for_function("() => document.getElementById('id_preset').value.startsWith('tinybert-')")
    page.select_option("#id_preset", "tinybert-tiny")
    assert page.is_visible("#id_teacher_checkpoint")
    page.select_option("#id_teacher_checkpoint", str(teacher))
    for field, value in {"max_steps": "8", "batch_size": "4", "seq_len": "32", "warmup_steps": "2",
                         "eval_every": "4", "checkpoint_every": "8"}.items():
        page.fill(f"#id_{field}", value)
    page.click("summary:has-text('Advanced settings')")
    page.fill("#id_log_every", "2")
    page.click("#launch")
    page.wait_for_url("**/runs/*-*/")
    run_id = page.url.rstrip("/").split("/")[-1]
    overrides = s.get(f"{api}/runs/{run_id}/").json()["config"]["model_overrides"]
    assert overrides["teacher_hidden_size"] == 128, overrides  # bert-tiny's width, set for the user

    page.wait_for_selector("#run-status.succeeded", timeout=300_000)
    # Each of the four losses, training and validation, has points on the distillation chart.
    page.wait_for_function(f"() => ({POINTS})('chart-tinybert').length === 8")
    names = page.evaluate(POINTS, "chart-tinybert")
    assert all(sum(loss in n for n in names) == 2 for loss in LOSSES), names
    page.screenshot(path=str(shots / "dashboard-tinybert.png"), full_page=True)

    student = s.get(f"{api}/runs/{run_id}/checkpoints/").json()[-1]["id"]
    page.goto(f"/explore/?checkpoint={student}")
    assert page.is_visible("#fill-mask") and page.is_hidden("#generate")
    page.fill("#id_text", "Return the [MASK] of items in the list.")
    page.click("button[value=fill_mask]")
    page.wait_for_selector("#fill-mask-results .explorer-mask svg .bars path, "
                           "#fill-mask-results .explorer-mask svg .point path")
