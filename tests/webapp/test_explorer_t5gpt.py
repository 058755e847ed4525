"""The explorer for T5, GPT and ELMo: POST /api/explore/generate/, /fill-spans/ and
/word-similarity/, the page's panels per kind of model, its answers without JavaScript, ownership,
clear errors, and the OpenAPI schema."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db

GENERATE, SPANS, SIMILARITY = "/api/explore/generate/", "/api/explore/fill-spans/", "/api/explore/word-similarity/"
APPLE = {"sentence_a": "我今天吃了一个苹果", "sentence_b": "我买了一部苹果手机", "word": "苹果"}


@pytest.fixture
def t5(alice):
    return family_checkpoint(alice, "t5")


@pytest.fixture
def gpt(alice):
    return family_checkpoint(alice, "gpt", run=True)


@pytest.fixture
def elmo(alice):
    return family_checkpoint(alice, "elmo")


def ask(api, url, ckpt, **body):
    return api.post(url, {"checkpoint": str(ckpt.id), **body}, format="json")


# ---------------------------------------------------------------------------- answers
def test_t5_answers_the_explorers_generate_endpoint(alice_api, t5):
    from trainer.inference import generate as generation
    response = ask(alice_api, GENERATE, t5, prompt="summarize: the cat sat on the mat", max_new_tokens=6)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["checkpoint"] == str(t5.id) and body["family"] == "t5"
    assert len(body["tokens"]) <= 6 and body["stopped"] in ("end", "length")
    assert body["decoding"] == {"strategy": "greedy", "max_new_tokens": 6}
    direct = generation.generate(t5.folder, "summarize: the cat sat on the mat", max_new_tokens=6)
    assert body["text"] == direct["text"] and body["tokens"] == direct["tokens"]


def test_gpt_answers_the_explorers_generate_endpoint(alice_api, gpt):
    body = {"prompt": "the cat sat", "strategy": "sample", "temperature": 0.8, "top_k": 20, "top_p": 0.9,
            "max_new_tokens": 10, "seed": 11}
    first = ask(alice_api, GENERATE, gpt, **body)
    assert first.status_code == 200, first.json()
    data = first.json()
    assert data["family"] == "gpt" and 0 < len(data["tokens"]) <= 10 and isinstance(data["text"], str)
    assert data["decoding"] == {"strategy": "sample", "max_new_tokens": 10, "temperature": 0.8, "top_k": 20,
                                "top_p": 0.9, "seed": 11}
    assert ask(alice_api, GENERATE, gpt, **body).json()["tokens"] == data["tokens"]  # same seed, same text
    beam = ask(alice_api, GENERATE, gpt, prompt="the cat sat", strategy="beam", num_beams=3, max_new_tokens=5)
    assert beam.status_code == 200 and beam.json()["decoding"]["num_beams"] == 3


def test_t5_fills_the_spans_of_its_sentinels(alice_api, t5):
    response = ask(alice_api, SPANS, t5, text="the cat <extra_id_0> the mat and <extra_id_1>.", max_new_tokens=8)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert [s["sentinel"] for s in body["spans"]] == ["<extra_id_0>", "<extra_id_1>"]
    assert all(set(s) == {"sentinel", "index", "text", "tokens", "found"} for s in body["spans"])
    assert isinstance(body["filled"], str) and body["stopped"] in ("end", "length")


def test_elmo_compares_a_word_in_two_sentences(alice_api, elmo):
    response = ask(alice_api, SIMILARITY, elmo, **APPLE)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert [layer["layer"] for layer in body["layers"]] == [0, 1, 2]
    assert body["layers"][0]["cosine"] == pytest.approx(1.0, abs=1e-5)  # the token layer ignores context
    assert [body["tokens_a"][i] for i in body["positions_a"]] == ["苹", "果"]


# ---------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("url, body, message", [
    (GENERATE, {"prompt": "a", "max_new_tokens": 0}, "max_new_tokens: Ensure this value is greater than or equal to 1"),
    (GENERATE, {"prompt": "a", "max_new_tokens": 257}, "max_new_tokens: Ensure this value is less than or equal to 256"),
    (GENERATE, {"prompt": "a", "num_beams": 9}, "num_beams: Ensure this value is less than or equal to 8"),
    (GENERATE, {"prompt": "a", "temperature": 0}, "temperature: Must be greater than 0."),
    (GENERATE, {"prompt": "a", "top_p": 1.5}, "top_p: Must be greater than 0 and at most 1."),
    (GENERATE, {"prompt": "a", "top_k": -1}, "top_k: Ensure this value is greater than or equal to 0"),
    (GENERATE, {"prompt": "a", "strategy": "nucleus"}, 'strategy: "nucleus" is not a valid choice'),
    (GENERATE, {"prompt": ""}, "prompt: This field may not be blank"),
    (GENERATE, {"prompt": "word " * 500}, "the explorer takes at most 2,000"),
    (SPANS, {"text": "no sentinel here"}, "has no sentinel: write <extra_id_0>"),
    (SPANS, {"text": "a <extra_id_99> b"}, "<extra_id_99> is not one of them"),
    (SIMILARITY, {**APPLE, "word": "香蕉"}, "“香蕉” is not in sentence A"),
])
def test_bad_inputs_are_400_with_a_sentence(alice_api, t5, elmo, url, body, message):
    ckpt = elmo if url == SIMILARITY else t5
    response = ask(alice_api, url, ckpt, **body)
    assert response.status_code == 400
    assert message in response.json()["error"] and "Traceback" not in response.content.decode()


@pytest.mark.parametrize("family, url, body, message", [
    ("bert", GENERATE, {"prompt": "the cat"}, "does not generate text"),
    ("elmo", GENERATE, {"prompt": "the cat"}, "does not generate text"),
    ("gpt", SPANS, {"text": "the <extra_id_0> cat"}, "Span filling needs a T5 checkpoint"),
    ("t5", SIMILARITY, APPLE, "needs an ELMo checkpoint"),
    ("gpt", "/api/explore/fill-mask/", {"text": "the [MASK] sat"}, "GPT predicts the next token, so it cannot"),
])
def test_a_question_for_another_kind_of_model_says_so(alice, alice_api, family, url, body, message):
    response = ask(alice_api, url, family_checkpoint(alice, family), **body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_a_t5_tokenizer_without_sentinels_cannot_fill_spans(alice, alice_api):
    ckpt = family_checkpoint(alice, "t5", extra_ids=0)
    response = ask(alice_api, SPANS, ckpt, text="the <extra_id_0> cat")
    assert response.status_code == 400 and "tokenizer has no sentinel tokens" in response.json()["error"]


@pytest.mark.parametrize("url, body", [(GENERATE, {"prompt": "the cat"}), (SPANS, {"text": "a <extra_id_0>"}),
                                       (SIMILARITY, APPLE)])
def test_another_users_checkpoint_is_404_and_anonymous_is_refused(bob_api, anon_api, t5, elmo, url, body):
    ckpt = elmo if url == SIMILARITY else t5
    response = ask(bob_api, url, ckpt, **body)
    assert response.status_code == 404 and response.json() == {"error": "Not found. It does not exist, or it is not yours."}
    assert ask(anon_api, url, ckpt, **body).status_code in (401, 403)


# ---------------------------------------------------------------------------- the page
def _shown(html: str, section: str) -> bool:
    """Whether the page's <section id=...> is rendered without the hidden attribute."""
    tag = re.search(rf'<section[^>]*id="{section}"[^>]*>', html).group(0)
    return " hidden" not in tag


@pytest.mark.parametrize("family, shown, hidden", [
    ("t5", ["text-to-text", "fill-spans", "decoding", "attention"], ["fill-mask", "next-sentence", "generate",
                                                                     "word-similarity", "generate-seq2seq"]),
    ("gpt", ["generate", "decoding", "attention"], ["fill-mask", "text-to-text", "fill-spans", "word-similarity"]),
    ("elmo", ["word-similarity", "attention"], ["fill-mask", "generate", "text-to-text", "decoding"]),
    ("bert", ["fill-mask", "next-sentence", "attention"], ["generate", "text-to-text", "word-similarity", "decoding"]),
])
def test_the_page_shows_the_tools_of_the_checkpoints_kind(alice, alice_client, family, shown, hidden):
    ckpt = family_checkpoint(alice, family, run=family == "gpt")
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").content.decode()
    assert all(_shown(html, s) for s in shown), [s for s in shown if not _shown(html, s)]
    assert not any(_shown(html, s) for s in hidden), [s for s in hidden if _shown(html, s)]
    kind = family if family != "bert" else "encoder"
    assert f'data-kind="{kind}"' in html and "js/explorer_generate.js" in html and "js/explorer_attention.js" in html
    if family == "elmo":
        assert re.search(r'id="attention-none">ELMo reads\s+text with two LSTMs', html)
    if family == "t5":
        assert 'value="translate English to German: "' in html and "&lt;extra_id_0&gt;" in html


def test_a_trained_bert_run_still_lists_as_an_encoder(alice, alice_client):
    run = make_run(alice, status=RunStatus.SUCCEEDED)
    ckpt = make_checkpoint(run, step=10)  # no files: the run's family says what it is
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").content.decode()
    assert re.search(rf'value="{ckpt.id}"[^>]*data-family="bert" data-kind="encoder"', html)


def test_the_page_answers_without_javascript(alice_client, t5, gpt, elmo):
    url = reverse("explorer:index")
    page = alice_client.post(url, {"action": "text_to_text", "checkpoint": t5.id, "task_prefix": "summarize: ",
                                   "prompt": "the cat sat on the mat", "strategy": "greedy", "max_new_tokens": 5})
    assert page.status_code == 200 and page.context["result"]["kind"] == "text_to_text"
    bare = alice_client.post(url, {"action": "text_to_text", "checkpoint": t5.id, "prompt": "the cat sat on the mat",
                                   "max_new_tokens": 5}).context["result"]
    assert page.context["result"]["prompt_tokens"] == bare["prompt_tokens"] + 2  # "summarize", ":" put in front
    same = alice_client.post(url, {"action": "text_to_text", "checkpoint": t5.id, "task_prefix": "summarize: ",
                                   "prompt": "summarize: the cat sat on the mat", "max_new_tokens": 5})
    assert same.context["result"]["prompt_tokens"] == bare["prompt_tokens"] + 2  # not twice
    page = alice_client.post(url, {"action": "fill_spans", "checkpoint": t5.id,
                                   "span_text": "the cat <extra_id_0> the mat", "max_new_tokens": 6})
    assert page.context["result"]["spans"][0]["sentinel"] == "<extra_id_0>"
    assert "&lt;extra_id_0&gt;</td>" in page.content.decode()
    page = alice_client.post(url, {"action": "generate", "checkpoint": gpt.id, "gen_prompt": "the dog ran",
                                   "strategy": "sample", "seed": 3, "temperature": 0.9, "top_p": 0.9,
                                   "sample_top_k": 10, "max_new_tokens": 6})
    result = page.context["result"]
    assert result["kind"] == "generate" and result["decoding"]["seed"] == 3 and result["prompt"] == "the dog ran"
    assert f'data-output>{result["text"]}</span>'.replace("'", "&#x27;") in page.content.decode()
    page = alice_client.post(url, {"action": "word_similarity", "checkpoint": elmo.id, **APPLE})
    assert [layer["layer"] for layer in page.context["result"]["layers"]] == [0, 1, 2]
    assert "biLSTM layer 2" in page.content.decode()


def test_the_page_shows_mistakes_inline(alice_client, t5, gpt, elmo):
    url = reverse("explorer:index")
    html = alice_client.post(url, {"action": "fill_spans", "checkpoint": t5.id,
                                   "span_text": "no sentinel"}).content.decode()
    assert "has no sentinel: write &lt;extra_id_0&gt;" in html
    html = alice_client.post(url, {"action": "generate", "checkpoint": gpt.id, "gen_prompt": "the dog",
                                   "strategy": "sample", "temperature": 0}).content.decode()
    assert "Temperature: Must be greater than 0." in html
    html = alice_client.post(url, {"action": "generate", "checkpoint": gpt.id, "gen_prompt": " "}).content.decode()
    assert "Type a prompt for the model to continue." in html
    html = alice_client.post(url, {"action": "word_similarity", "checkpoint": elmo.id, **APPLE,
                                   "word": "香蕉"}).content.decode()
    assert "is not in sentence A" in html
    # A mistake in another panel's field, or in a field the strategy ignores, does not block the question asked.
    page = alice_client.post(url, {"action": "word_similarity", "checkpoint": elmo.id, **APPLE,
                                   "temperature": "hot", "top_k": "-3"})
    assert page.context["result"]["kind"] == "word_similarity"
    page = alice_client.post(url, {"action": "generate", "checkpoint": gpt.id, "gen_prompt": "the dog",
                                   "strategy": "greedy", "temperature": 0, "top_p": 7, "max_new_tokens": 4})
    assert page.context["result"]["decoding"] == {"strategy": "greedy", "max_new_tokens": 4}


def test_bob_cannot_post_alices_checkpoint(bob_client, gpt):
    response = bob_client.post(reverse("explorer:index"), {"action": "generate", "checkpoint": gpt.id,
                                                           "gen_prompt": "the dog"})
    assert response.status_code == 404


# ---------------------------------------------------------------------------- Hugging Face imports
@pytest.mark.parametrize("kind", ["t5", "gpt2"])
def test_an_imported_t5_or_gpt2_archive_answers_the_generate_endpoint(alice, alice_api, alice_client, tmp_path, kind):
    from tests.trainer.importing_helpers import zip_folder
    from tests.trainer.inference_generate_helpers import write_tiny_hf_gpt2, write_tiny_hf_t5
    from webapp.explorer.imports import checkpoint_import

    folder = (write_tiny_hf_t5 if kind == "t5" else write_tiny_hf_gpt2)(tmp_path / kind)
    ckpt = checkpoint_import(owner=alice, name=f"tiny {kind}", archive_path=zip_folder(folder, tmp_path / "m.zip"))
    response = ask(alice_api, GENERATE, ckpt, prompt="summarize: the cat" if kind == "t5" else "The cat",
                   max_new_tokens=5)
    assert response.status_code == 200, response.json()
    assert response.json()["family"] == ("t5" if kind == "t5" else "gpt")
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").content.decode()
    assert _shown(html, "text-to-text" if kind == "t5" else "generate")
    page = alice_client.get(reverse("explorer:import")).content.decode()
    assert "t5" in page and "gpt2" in page  # listed among the supported model types


# ---------------------------------------------------------------------------- OpenAPI
def test_the_openapi_schema_documents_the_new_endpoints_and_validates():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    for path in (GENERATE, SPANS, SIMILARITY, "/api/explore/attention/"):
        assert "post" in schema["paths"][path], path
    props = schema["components"]["schemas"]["GenerateRequest"]["properties"]
    assert {"checkpoint", "prompt", "strategy", "max_new_tokens", "num_beams", "temperature", "top_k", "top_p",
            "seed"} <= set(props)


def test_every_family_that_fine_tunes_is_offered_fine_tuning_from_the_explorer(alice_client, alice, t5, gpt, elmo):
    """Issue 30, point 1: the link followed the kind of model (encoders and UniLM); it follows the
    task registry now (trainer.finetune.tasks_for_family), so T5, GPT and ELMo have it, XLNet not."""
    bert = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED), step=10, real=True)
    for ckpt in (bert, t5, gpt, elmo):
        html = alice_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").content.decode()
        assert f'id="checkpoint-finetune" href="{reverse("runs:finetune")}?checkpoint={ckpt.id}"' in html, ckpt
    xlnet = family_checkpoint(alice, "xlnet")
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={xlnet.id}").content.decode()
    assert 'id="checkpoint-finetune"' not in html
