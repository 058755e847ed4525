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
