"""The explorer's UniLM generation: POST /api/explore/generate-seq2seq/, its refusals and its panel."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db

URL = "/api/explore/generate-seq2seq/"


@pytest.fixture
def bert_checkpoint(alice):
    """A real trained BERT checkpoint of one of Alice's runs (MLM + NSP)."""
    return make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny"), step=20, real=True)


def generate(api, ckpt, source="A short title", max_new_tokens=8):
    return api.post(URL, {"checkpoint": str(ckpt.id), "source": source, "max_new_tokens": max_new_tokens},
                    format="json")


def test_a_bert_checkpoint_is_refused_with_a_sentence(alice_api, bert_checkpoint):
    response = generate(alice_api, bert_checkpoint)
    assert response.status_code == 400
    assert "Only UniLM checkpoints generate text" in response.json()["error"]


def test_bob_gets_404_for_alices_checkpoint(bob_api, bert_checkpoint):
    assert generate(bob_api, bert_checkpoint).status_code == 404


@pytest.mark.parametrize("body", [{"source": "a title", "max_new_tokens": 0},
                                  {"source": "a title", "max_new_tokens": 129}, {"source": ""}])
def test_bad_inputs_are_400(alice_api, bert_checkpoint, body):
    assert alice_api.post(URL, {"checkpoint": str(bert_checkpoint.id), **body}, format="json").status_code == 400


def test_a_unilm_answer_has_text_tokens_and_stopped(alice_api, bert_checkpoint, monkeypatch):
    from trainer.inference import generate as generation
    calls = []

    def fake(checkpoint_dir, source_text, max_new_tokens=32):
        calls.append((source_text, max_new_tokens))
        return {"text": "the article", "tokens": ["the", "article"], "ids": [5, 6], "stopped": "end"}

    monkeypatch.setattr(generation, "generate_seq2seq", fake)
    response = generate(alice_api, bert_checkpoint, source="  A title  ", max_new_tokens=12)
    assert response.status_code == 200, response.json()
    assert response.json() == {"text": "the article", "tokens": ["the", "article"], "stopped": "end"}
    assert calls == [("A title", 12)]


def test_the_panel_shows_for_unilm_runs_only(alice, alice_client, bert_checkpoint):
    unilm = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, family="unilm"), step=10)
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={unilm.id}").content.decode()
    assert 'id="generate-seq2seq">' in page and 'data-family="unilm"' in page
    assert "title → article and article → title" in page
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={bert_checkpoint.id}").content.decode()
    assert 'id="generate-seq2seq" hidden>' in page


@pytest.fixture
def unilm_checkpoint(alice):
    """A random tiny UniLM checkpoint (the cached WordPiece tokenizer) of one of Alice's runs."""
    import shutil

    import torch

    from models_lib.checkpoint import save_model
    from models_lib.core.config import EncoderConfig
    from models_lib.families.unilm import UniLMForPreTraining
    from tests.webapp.runs_helpers import prepared_data
    from trainer.prep.tokenization import load_tokenizer

    tok_dir = prepared_data()[1]
    checkpoint = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, family="unilm", name="tiny unilm"))
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset("unilm-tiny", vocab_size=load_tokenizer(tok_dir).vocab_size, hidden_size=32,
                                    num_heads=2, intermediate_size=64, num_layers=2, max_position_embeddings=64)
    save_model(UniLMForPreTraining(cfg).eval(), checkpoint.folder)
    for name in ("tokenizer.json", "tokenizer_meta.json"):
        shutil.copy(tok_dir / name, checkpoint.folder / name)
    return checkpoint


def test_without_javascript_the_unilm_panel_posts_and_the_page_shows_the_target(
        alice_client, bob_client, unilm_checkpoint, bert_checkpoint):
    """The panel's button posts the form (action generate_seq2seq) and the page answers with the
    target the trainer writes for that source, decoded as the Decoding card says."""
    from django.utils.html import escape

    from trainer.inference import generate as generation

    source = "return the value of the key."

    def ask(checkpoint, client=alice_client, **decoding):
        return client.post(reverse("explorer:index"), {"checkpoint": str(checkpoint.id), "action": "generate_seq2seq",
                                                      "source": source, "max_new_tokens": 6, **decoding})

    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={unilm_checkpoint.id}").content.decode()
    assert '<button type="submit" name="action" value="generate_seq2seq" id="generate-button">' in page
    for decoding in ({"strategy": "greedy"}, {"strategy": "beam", "num_beams": 3}):
        response = ask(unilm_checkpoint, **decoding)
        assert response.status_code == 200
        html = response.content.decode()
        section = html[html.index('id="generate-seq2seq"'):html.index("</section>", html.index('id="generate-seq2seq"'))]
        expected = generation.generate(unilm_checkpoint.folder, source, max_new_tokens=6, **decoding)
        assert expected["tokens"], "the model wrote nothing: the answer goes untested"
        shown = expected["text"] or "(no text: the model wrote only special tokens"
        assert '<div id="generate-result" class="explorer-results">' in section  # not hidden
        assert f'<p id="generate-text">{escape(shown)}' in section
        ending = "the model ended the target itself." if expected["stopped"] == "end" else "stopped at the token limit."
        assert f"{len(expected['tokens'])} tokens; {ending}" in section

    # a sentence, never a traceback: no source, a family that writes no text; another user's: 404
    empty = alice_client.post(reverse("explorer:index"), {"checkpoint": str(unilm_checkpoint.id),
                                                          "action": "generate_seq2seq", "source": "  "})
    assert "Type a source (e.g. a title) for the model to write a target for." in empty.content.decode()
    refused = ask(bert_checkpoint).content.decode()
    assert refused.count("Only UniLM checkpoints generate text") == 1
    assert ask(unilm_checkpoint, client=bob_client).status_code == 404
