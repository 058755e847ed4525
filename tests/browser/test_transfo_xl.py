"""Transformer-XL end to end in the system Chromium with the real worker: a tiny run launched from
the launch form with its memory length set, its dashboard charting validation perplexity with and
without memory, then its checkpoint in the explorer: text streamed token by token and the causal
attention heatmap (nothing above the diagonal). Screenshots: dashboard-transfo-xl.png, explorer-transfo-xl.png."""
from __future__ import annotations

import json

import pytest

from tests.livestack import ready_corpus, ready_tokenizers, token_session

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POINTS = """id => { const el = document.getElementById(id);
                    return el && el.data ? el.data.filter(t => t.x && t.x.length).map(t => t.name) : []; }"""


def log_in(page, username: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password-123")
    page.click("form button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)


def test_transfo_xl_from_the_form_to_the_explorer(page, live_stack, shots, django_user_model):
    s = token_session(django_user_model, "xavier")
    corpus = ready_corpus(s, live_stack, 60_000)
    tokenizer = ready_tokenizers(s, live_stack, corpus, {"bpe": {"algorithm": "bpe"}})["bpe"]
    log_in(page, "xavier")

    page.goto(f"/runs/new/?tokenizer={tokenizer}")
    page.select_option("#id_family", "transfo_xl")
    page.wait_for_function("() => document.getElementById('id_preset').value.startsWith('transfo-xl-')")
    page.select_option("#id_preset", "transfo-xl-tiny")
    assert page.is_visible("#id_mem_len")
    page.fill("#id_mem_len", "16")
    for field, value in {"max_steps": "12", "batch_size": "4", "seq_len": "16", "warmup_steps": "2",
                         "eval_every": "6", "checkpoint_every": "12"}.items():
        page.fill(f"#id_{field}", value)
    page.click("summary:has-text('Advanced settings')")
    page.fill("#id_log_every", "3")
    page.click("#launch")
    page.wait_for_url("**/runs/*-*/")
    run_id = page.url.rstrip("/").split("/")[-1]
    assert s.get(f"{live_stack.url}/api/runs/{run_id}/").json()["config"]["model_overrides"]["mem_len"] == 16

    page.wait_for_selector("#run-status.succeeded", timeout=300_000)
    # Both validation series, with and without memory, have points once the run has evaluated.
    page.wait_for_function(f"() => ({POINTS})('chart-memory_perplexity').length === 2")
    names = page.evaluate(POINTS, "chart-memory_perplexity")
    assert any("without memory" in n for n in names) and any("with memory" in n and "without" not in n
                                                              for n in names), names
    page.screenshot(path=str(shots / "dashboard-transfo-xl.png"), full_page=True)

    checkpoint = s.get(f"{live_stack.url}/api/runs/{run_id}/checkpoints/").json()[-1]["id"]
    received: list[dict] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(json.loads(payload))))
    page.goto(f"/explore/?checkpoint={checkpoint}")
    assert page.is_visible("#generate") and page.is_hidden("#fill-mask")
    page.fill("#id_gen_prompt", "Return the")
    page.fill("#id_max_new_tokens", "8")
    page.click("#stream-button")
    page.wait_for_function("() => document.querySelector('#stream-result [data-stopped]').textContent.trim() !== ''")
    kinds = [m.get("type") for m in received]
    assert kinds.count("token") >= 2 and kinds[-1] == "done", kinds
    assert page.inner_text("#stream-result [data-output]") == received[-1]["text"]

    page.fill("#id_attention_text", "return the value of the key")
    page.click("#attention-button")
    page.wait_for_function("() => { const el = document.getElementById('attention-chart');"
                           " return el && el.data && el.data.length > 0 && el.data[0].z.length > 1; }")
    z = page.evaluate("() => document.getElementById('attention-chart').data[0].z")
    # Causal: no query attends to a later key (past any memory columns, the upper triangle is empty).
    offset = len(z[0]) - len(z)
    assert all(not v for i, row in enumerate(z) for v in row[offset + i + 1:]), z
    page.screenshot(path=str(shots / "explorer-transfo-xl.png"), full_page=True)
