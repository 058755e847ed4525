"""The explorer in the system Chromium with T5, GPT and ELMo checkpoints trained by the real
worker: GPT's text arrives token by token over the websocket, the attention heatmap draws,
T5 answers a text-to-text prompt and fills <extra_id_N> spans, ELMo compares a word in two
sentences layer by layer, UniLM writes a target with beam search from the same decoding card."""
from __future__ import annotations

import json

import pytest

from tests.livestack import finished_run, launch_run, ready_corpus, ready_tokenizers, token_session

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS = 30


def test_generation_attention_span_filling_and_elmo_in_the_browser(page, live_stack, shots, django_user_model):
    s = token_session(django_user_model, "erin")
    api = live_stack.url + "/api"
    corpus = ready_corpus(s, live_stack, 150_000)
    toks = ready_tokenizers(s, live_stack, corpus, {"t5": {"algorithm": "unigram", "extra_ids": 100},
                                                    "gpt": {"algorithm": "bpe"}, "elmo": {"algorithm": "wordpiece"}})
    toks["unilm"] = toks["elmo"]  # both read WordPiece
    runs = {arch: launch_run(s, live_stack, tokenizer=toks[arch], family=arch, steps=STEPS)["id"]
            for arch in ("t5", "gpt", "elmo", "unilm")}
    checkpoints = {}
    for arch, run_id in runs.items():
        finished_run(s, live_stack, run_id)
        checkpoints[arch] = s.get(f"{api}/runs/{run_id}/checkpoints/").json()[-1]["id"]

    page.goto("/login/")
    page.fill("#id_username", "erin")
    page.fill("#id_password", "erin-password-123")
    page.click("form button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)

    # GPT: the text is streamed, one websocket message per token.
    received: list[dict] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(json.loads(payload))))
    page.goto(f"/explore/?checkpoint={checkpoints['gpt']}")
    assert page.is_hidden("#fill-mask") and page.is_visible("#generate")
    page.fill("#id_gen_prompt", "Return the")
    page.fill("#id_max_new_tokens", "12")
    page.click("#stream-button")
    page.wait_for_function("() => document.querySelector('#stream-result [data-stopped]').textContent.trim() !== ''")
    kinds = [m.get("type") for m in received]
    assert kinds.count("token") >= 2 and kinds[-1] == "done", kinds
    shown = page.inner_text("#stream-result [data-output]")
    assert shown.strip() and shown == received[-1]["text"]

    page.click("#attention-button")
    page.wait_for_function("() => { const el = document.getElementById('attention-chart');"
                           " return el && el.data && el.data.length > 0 && el.data[0].z.length > 1; }")
    page.screenshot(path=str(shots / "explorer-gpt.png"), full_page=True)

    # T5: text to text with a task prefix, then span filling.
    page.goto(f"/explore/?checkpoint={checkpoints['t5']}")
    assert page.is_visible("#text-to-text") and page.is_visible("#fill-spans") and page.is_hidden("#generate")
    page.fill("#id_prompt", "return the number of items in the list.")
    page.click("button[value=text_to_text]")
    page.wait_for_function("() => document.querySelector('#text-to-text-result [data-stopped]').textContent.trim() !== ''")
    page.fill("#id_span_text", "return the <extra_id_0> of the <extra_id_1>.")
    page.click("button[value=fill_spans]")
    page.wait_for_selector("#fill-spans-result table[data-spans] tr")
    assert page.locator("#fill-spans-result table[data-spans] tr").count() == 2
    page.screenshot(path=str(shots / "explorer-t5.png"), full_page=True)

    # ELMo: no attention to show, and the word's cosine per layer.
    page.goto(f"/explore/?checkpoint={checkpoints['elmo']}")
    assert page.is_visible("#word-similarity") and page.is_visible("#attention-none")
    page.fill("#id_sentence_a", "return the value of the key.")
    page.fill("#id_sentence_b", "the key is not in the mapping.")
    page.fill("#id_word", "key")
    page.click("button[value=word_similarity]")
    page.wait_for_selector("#word-similarity-result table[data-layers] tr")
    assert page.locator("#word-similarity-result table[data-layers] tr").count() == 3  # token layer + 2 biLSTM layers

    # UniLM: source -> target with the decoding card's beam search.
    page.goto(f"/explore/?checkpoint={checkpoints['unilm']}")
    assert page.is_visible("#generate-seq2seq") and page.is_visible("#decoding") and page.is_hidden("#text-to-text")
    page.fill("#id_source", "return the value of the key.")
    page.select_option("#id_strategy", "beam")
    page.fill("#id_num_beams", "3")
    page.fill("#id_max_new_tokens", "6")
    page.click("#generate-button")
    page.wait_for_selector("#generate-result:not([hidden])")
    assert "tokens;" in page.inner_text("#generate-stopped")
