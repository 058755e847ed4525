"""The explorer with the memory families: XLNet's fill-in by permutation over the JSON API (its
answers, refusals and ownership), both streams in the attention viewer, and the panels each kind
gets; Transformer-XL generates and shows its causal attention like GPT."""
from __future__ import annotations

import pytest

from tests.webapp.explorer_models_helpers import family_checkpoint

pytestmark = pytest.mark.django_db

URL = "/api/explore/permutation/"


@pytest.fixture
def xlnet(alice):
    return family_checkpoint(alice, "xlnet", extra_ids=0)


def test_tokens_then_steps_in_the_given_order(alice_api, xlnet):
    tokens = alice_api.post(URL, {"checkpoint": str(xlnet.id), "text": "the cat sat on the mat"}, format="json")
    assert tokens.status_code == 200, tokens.json()
    assert tokens.json()["tokens"] == ["the", "cat", "sat", "on", "the", "mat"]
    body = alice_api.post(URL, {"checkpoint": str(xlnet.id), "text": "the cat sat on the mat", "order": [5, 1],
                                "top_k": 4}, format="json").json()
    assert [s["position"] for s in body["steps"]] == [5, 1] and body["checkpoint"] == str(xlnet.id)
    assert all(len(s["predictions"]) == 4 for s in body["steps"]) and body["steps"][0]["original"] == "mat"
    assert body["filled"][5] == body["steps"][0]["chosen"]


@pytest.mark.parametrize("order,status,message", [([1, 1], 400, "twice"), ([40], 400, "token numbers"),
                                                  (["x"], 400, "valid integer")])
def test_bad_orders_are_refused_with_a_sentence(alice_api, xlnet, order, status, message):
    r = alice_api.post(URL, {"checkpoint": str(xlnet.id), "text": "the cat sat", "order": order}, format="json")
    assert r.status_code == status and message in str(r.json())


def test_another_users_checkpoint_is_not_found(bob, xlnet):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=bob).key}")
    r = client.post(URL, {"checkpoint": str(xlnet.id), "text": "the cat", "order": [0]}, format="json")
    assert r.status_code == 404


def test_other_families_are_told_it_is_xlnets(alice, alice_api):
    gpt = family_checkpoint(alice, "gpt")
    r = alice_api.post(URL, {"checkpoint": str(gpt.id), "text": "the cat", "order": [0]}, format="json")
    assert r.status_code == 400 and "XLNet's" in r.json()["error"]


def test_xlnet_attention_has_two_streams(alice_api, xlnet):
    body = alice_api.post("/api/explore/attention/", {"checkpoint": str(xlnet.id), "text": "the cat sat",
                                                      "stack": "query", "layer": 0}, format="json").json()
    assert body["stacks"] == ["content", "query"] and body["stack"] == "query"
    assert all(row[i] == 0 for head in body["maps"][0] for i, row in enumerate(head))


def test_transfo_xl_generates_and_attends_backwards(alice, alice_api):
    txl = family_checkpoint(alice, "transfo_xl", extra_ids=0)
    out = alice_api.post("/api/explore/generate/", {"checkpoint": str(txl.id), "prompt": "the cat",
                                                    "max_new_tokens": 4}, format="json")
    assert out.status_code == 200, out.json()
    assert out.json()["family"] == "transfo_xl"
    head = alice_api.post("/api/explore/attention/", {"checkpoint": str(txl.id), "text": "the cat sat"},
                          format="json").json()["maps"][0][0]
    assert all(head[i][j] == 0 for i in range(len(head)) for j in range(i + 1, len(head)))


def test_the_page_shows_the_xlnet_panels(alice, client, xlnet):
    client.force_login(alice)
    page = client.get(f"/explore/?checkpoint={xlnet.id}").content.decode()
    assert 'id="permutation" data-kinds="xlnet">' in page and 'id="id_attention_stream"' in page
    assert 'id="fill-mask" data-kinds="encoder unilm" data-pretrained hidden' in page
