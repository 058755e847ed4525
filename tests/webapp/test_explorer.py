"""The explorer: pick a checkpoint of your runs, fill masks, score sentence pairs; clear errors."""
from __future__ import annotations

import html
import re
import shutil

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpoint(alice):
    """A real trained checkpoint of one of Alice's runs (MLM + NSP)."""
    run = make_run(alice, status=RunStatus.SUCCEEDED, name="tiny")
    return make_checkpoint(run, step=20, real=True)


def fill(api, ckpt, text, top_k=3):
    return api.post("/api/explore/fill-mask/", {"checkpoint": str(ckpt.id), "text": text, "top_k": top_k},
                    format="json")


def test_fill_mask_returns_top_k_tokens_for_each_mask(alice_api, checkpoint):
    response = fill(alice_api, checkpoint, "the [MASK] of the module is [MASK] .", top_k=4)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["checkpoint"] == str(checkpoint.id) and len(body["masks"]) == 2
    for mask in body["masks"]:
        probs = [p["prob"] for p in mask["predictions"]]
        assert len(probs) == 4 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
        assert all(isinstance(p["token"], str) and isinstance(p["id"], int) for p in mask["predictions"])


def test_next_sentence_returns_a_probability(alice_api, checkpoint):
    response = alice_api.post("/api/explore/next-sentence/", {
        "checkpoint": str(checkpoint.id), "text_a": "The function returns a list.",
        "text_b": "Each item is a string."}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert 0 <= body["is_next"] <= 1 and abs(body["is_next"] + body["not_next"] - 1) < 1e-6


@pytest.mark.parametrize("text, message", [
    ("no mask in this sentence", "has no [MASK]"),
    ("a b " * 300 + "[MASK]", "tokens long"),            # under the character limit, over the 512 positions
    ("word " * 500 + "[MASK]", "the explorer takes at most 2,000"),  # over the character limit
])
def test_fill_mask_errors_are_sentences(alice_api, checkpoint, text, message):
    response = fill(alice_api, checkpoint, text)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_checkpoint_whose_files_are_gone_says_so(alice, alice_api, alice_client, checkpoint):
    shutil.rmtree(checkpoint.folder)
    response = fill(alice_api, checkpoint, "the [MASK] .")
    assert response.status_code == 400
    assert response.json() == {"error": "This checkpoint's files are no longer on disk."}
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}")
    assert "This checkpoint's files are no longer on disk." in html.unescape(page.content.decode())


@pytest.mark.parametrize("content, message", [
    (b'{"family": "bert", "config": ', "has a broken model_config.json (not valid JSON: Expecting value at line 1)"),
    (b'{"config": {}}', "has a broken model_config.json: it does not name a model family and its config."),
])
def test_a_checkpoint_with_a_broken_model_config_says_so(alice_api, alice_client, checkpoint, content, message):
    (checkpoint.folder / "model_config.json").write_bytes(content)
    response = fill(alice_api, checkpoint, "the [MASK] .")
    assert response.status_code == 400 and message in response.json()["error"]
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}")
    assert page.status_code == 200 and message in page.content.decode()


def test_bob_gets_404_for_alices_checkpoint(bob_api, bob_client, checkpoint):
    assert fill(bob_api, checkpoint, "the [MASK] .").status_code == 404
    response = bob_api.post("/api/explore/next-sentence/", {"checkpoint": str(checkpoint.id), "text_a": "a",
                                                           "text_b": "b"}, format="json")
    assert response.status_code == 404
    assert bob_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").status_code == 404
    response = bob_client.post(reverse("explorer:index"), {"action": "fill_mask", "checkpoint": checkpoint.id,
                                                           "text": "the [MASK] .", "top_k": 3})
    assert response.status_code == 404


def test_anonymous_explorer_calls_are_refused(anon_api, client, checkpoint):
    assert fill(anon_api, checkpoint, "the [MASK] .").status_code in (401, 403)
    assert client.get(reverse("explorer:index")).status_code == 302


def test_the_page_groups_checkpoints_by_run_and_preselects_the_latest(alice, alice_client):
    older = make_run(alice, name="older run", status=RunStatus.SUCCEEDED)
    make_checkpoint(older, step=10)
    newer = make_run(alice, name="newer run", status=RunStatus.RUNNING)
    make_checkpoint(newer, step=10)
    latest = make_checkpoint(newer, step=20)
    page = alice_client.get(reverse("explorer:index"))
    html = page.content.decode()
    assert page.status_code == 200 and page.context["selected"] == latest
    assert html.index('optgroup label="newer run') < html.index('optgroup label="older run')
    assert re.search(rf'value="{latest.id}"[^>]*data-nsp="1" selected', html)
    assert "Insert [MASK]" in html and "js/explorer.js" in html and reverse("runs:plotly-js") in html
    first = older.checkpoints.get()
    assert alice_client.get(reverse("explorer:index") + f"?checkpoint={first.id}").context["selected"] == first


def test_the_page_without_checkpoints_points_to_launching_a_run(alice_client):
    html = alice_client.get(reverse("explorer:index")).content.decode()
    assert "No checkpoints yet" in html and reverse("runs:new") in html


def test_the_page_answers_without_javascript_and_shows_errors_inline(alice_client, checkpoint):
    url = reverse("explorer:index")
    page = alice_client.post(url, {"action": "fill_mask", "checkpoint": checkpoint.id, "text": "the [MASK] .",
                                   "top_k": 3})
    assert page.status_code == 200
    assert page.context["result"]["kind"] == "fill_mask" and len(page.context["result"]["masks"]) == 1
    assert 'id="fill-mask-data"' in page.content.decode()
    page = alice_client.post(url, {"action": "fill_mask", "checkpoint": checkpoint.id, "text": "no mask here",
                                   "top_k": 3})
    assert "has no [MASK]" in page.context["error"] and "has no [MASK]" in page.content.decode()
    page = alice_client.post(url, {"action": "next_sentence", "checkpoint": checkpoint.id, "text_a": "One.",
                                   "text_b": "Two."})
    assert page.context["result"]["kind"] == "next_sentence" and 0 <= page.context["result"]["is_next"] <= 1
    page = alice_client.post(url, {"action": "next_sentence", "checkpoint": checkpoint.id, "text_a": "",
                                   "text_b": "Two."})
    assert "Type sentence A." in page.content.decode()


def test_next_sentence_on_an_mlm_only_run_is_refused_clearly(alice, alice_api):
    run = make_run(alice, status=RunStatus.SUCCEEDED, objectives=["mlm"])
    ckpt = make_checkpoint(run, step=20, real=True)
    state = ckpt.folder / "trainer_state.json"
    import json

    data = json.loads(state.read_text())
    data["config"]["objectives"] = ["mlm"]
    state.write_text(json.dumps(data))
    response = alice_api.post("/api/explore/next-sentence/", {"checkpoint": str(ckpt.id), "text_a": "a",
                                                             "text_b": "b"}, format="json")
    assert response.status_code == 400 and "without next sentence prediction" in response.json()["error"]
