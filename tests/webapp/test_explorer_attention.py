"""The attention viewer: POST /api/explore/attention/ for every family (encoders, GPT, T5's
three stacks; ELMo says it has none), its refusals, ownership, and its panel."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import explorer_tools, family_checkpoint
from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db

URL = "/api/explore/attention/"


def attention(api, ckpt, **body):
    return api.post(URL, {"checkpoint": str(ckpt.id), **body}, format="json")


def rows_sum_to_one(maps):
    return all(abs(sum(row) - 1) < 2e-3 for layer in maps for head in layer for row in head)


@pytest.fixture
def bert(alice):
    """A real trained BERT checkpoint of one of Alice's runs."""
    return make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny"), step=20, real=True)


def test_a_trained_bert_shows_every_layer_and_head(alice_api, bert):
    response = attention(alice_api, bert, text="the function returns a list.")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["checkpoint"] == str(bert.id) and body["family"] == "bert" and body["stack"] == "encoder"
    assert body["tokens"][0] == "[CLS]" and body["tokens"][-1] == "[SEP]" and body["key_tokens"] == body["tokens"]
    T = len(body["tokens"])
    assert len(body["maps"]) == body["layers"] == 2 and all(len(layer) == body["heads"] for layer in body["maps"])
    assert all(len(head) == T and all(len(row) == T for row in head) for layer in body["maps"] for head in layer)
    assert rows_sum_to_one(body["maps"])
    one = attention(alice_api, bert, text="the function returns a list.", layer=1).json()
    assert one["layer"] == 1 and one["maps"] == body["maps"][1:]


def test_gpt_attention_looks_only_backwards(alice, alice_api):
    body = attention(alice_api, family_checkpoint(alice, "gpt"), text="the cat sat on the mat").json()
    assert body["stacks"] == ["decoder"] and rows_sum_to_one(body["maps"])
    head = body["maps"][0][0]
    assert all(head[i][j] == 0 for i in range(len(head)) for j in range(i + 1, len(head)))


def test_t5_shows_its_encoder_decoder_and_cross_attention(alice, alice_api):
    t5 = family_checkpoint(alice, "t5")
    enc = attention(alice_api, t5, text="the cat sat").json()
    assert enc["stacks"] == ["encoder", "decoder", "cross"] and enc["stack"] == "encoder"
    cross = attention(alice_api, t5, text="the cat sat", stack="cross", target="the dog").json()
    assert cross["tokens"] == ["[PAD]", "the", "dog"] and cross["key_tokens"] == enc["tokens"]
    assert cross["target"] == "the dog" and rows_sum_to_one(cross["maps"])
    greedy = attention(alice_api, t5, text="the cat sat", stack="decoder", layer=0)
    assert greedy.status_code == 200 and isinstance(greedy.json()["target"], str)


@pytest.mark.parametrize("family, body, message", [
    ("elmo", {"text": "the cat"}, "has no attention to show"),
    ("bert", {"text": "the cat", "stack": "cross"}, "has no 'cross' attention; choose encoder"),
    ("bert", {"text": "the cat", "stack": "sideways"}, 'stack: "sideways" is not a valid choice'),
    ("gpt", {"text": "the cat", "layer": 2}, "layer must be between 0 and 1"),
    ("gpt", {"text": "the cat", "layer": -1}, "layer: Ensure this value is greater than or equal to 0"),
    ("t5", {"text": "cat " * 200}, "the attention viewer shows at most 128 tokens"),
    ("t5", {"text": "  "}, "text: This field may not be blank"),
])
def test_attention_refusals_are_sentences(alice, alice_api, family, body, message):
    response = attention(alice_api, family_checkpoint(alice, family), **body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_another_users_checkpoint_is_404_and_anonymous_is_refused(bob_api, anon_api, bert):
    response = attention(bob_api, bert, text="the cat")
    assert response.status_code == 404 and response.json() == {"error": "Not found. It does not exist, or it is not yours."}
    assert attention(anon_api, bert, text="the cat").status_code in (401, 403)


def test_the_panel_asks_the_attention_api(alice_client, bert):
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={bert.id}").content.decode()
    assert explorer_tools(html)["attention"]["url"] == URL and 'id="attention-button"' in html
    assert 'id="id_attention_layer"' in html and 'id="id_attention_head"' in html
    assert "js/explorer_attention.js" in html and "/runs/static/plotly.min.js" in html
