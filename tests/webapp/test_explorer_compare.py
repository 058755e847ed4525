"""Pair order and side-by-side comparison: two checkpoints, the same question, two answers."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.import_helpers import imported_checkpoint
from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db

PAIR = {"text_a": "The function returns a list.", "text_b": "Each item is a string."}


@pytest.fixture
def steps(alice):
    """Two real checkpoints of one of Alice's MLM + NSP runs."""
    run = make_run(alice, status=RunStatus.SUCCEEDED, name="tiny")
    return make_checkpoint(run, step=10, real=True), make_checkpoint(run, step=20, real=True)


def compare(api, a, b, task, **inputs):
    return api.post("/api/explore/compare/", {"checkpoints": [str(a.id), str(b.id)], "task": task, "inputs": inputs},
                    format="json")


def test_sentence_order_scores_both_orders_of_an_nsp_model(alice_api, steps):
    response = alice_api.post("/api/explore/sentence-order/", {"checkpoint": str(steps[1].id), **PAIR}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["head"] == "nsp" and 0 <= body["ab"] <= 1 and 0 <= body["ba"] <= 1
    nsp = alice_api.post("/api/explore/next-sentence/", {"checkpoint": str(steps[1].id), **PAIR}, format="json")
    assert body["ab"] == pytest.approx(nsp.json()["is_next"], abs=1e-5)


def test_compare_returns_one_result_set_per_checkpoint(alice, alice_api, steps):
    imported = imported_checkpoint(alice)
    response = compare(alice_api, steps[0], imported, "fill-mask", text="the [MASK] of the list .", top_k=3)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["task"] == "fill-mask" and [r["checkpoint"] for r in body["results"]] == [str(steps[0].id), str(imported.id)]
    assert [r["label"] for r in body["results"]] == ["tiny @ step 10", "tiny bert"]
    for column in body["results"]:
        assert column["error"] is None and len(column["result"]["masks"][0]["predictions"]) == 3

    order = compare(alice_api, steps[0], steps[1], "sentence-order", **PAIR).json()["results"]
    assert all(set(c["result"]) == {"ab", "ba", "head", "judges_order"} for c in order)


def test_a_checkpoint_that_cannot_answer_says_so_in_its_column(alice, alice_api, steps):
    imported = imported_checkpoint(alice)  # a BertForMaskedLM: no next-sentence head
    results = compare(alice_api, steps[1], imported, "next-sentence", **PAIR).json()["results"]
    assert results[0]["error"] is None and 0 <= results[0]["result"]["is_next"] <= 1
    assert results[1]["result"] is None and "no trained next-sentence head" in results[1]["error"]
    both = compare(alice_api, steps[0], steps[1], "fill-mask", text="no mask here")
    assert both.status_code == 400 and "has no [MASK]" in both.json()["error"]  # the same refusal: one sentence
    missing = compare(alice_api, steps[0], steps[1], "sentence-order", text_a="only A")
    assert missing.status_code == 400 and "needs inputs.text_b" in missing.json()["error"]


def test_compare_refuses_other_users_checkpoints(alice, bob, bob_api, steps):
    bobs = make_checkpoint(make_run(bob, status=RunStatus.SUCCEEDED), step=10, real=True)
    assert compare(bob_api, bobs, steps[0], "fill-mask", text="the [MASK] .").status_code == 404


def test_the_page_compares_two_checkpoints_without_javascript(alice_client, steps):
    page = alice_client.post(reverse("explorer:index"), {
        "action": "sentence_order", "checkpoint": steps[1].id, "compare_with": steps[0].id, **PAIR})
    assert page.status_code == 200
    result = page.context["result"]
    assert result["kind"] == "sentence_order" and len(result["columns"]) == 2
    html = page.content.decode()
    assert "explorer-columns two" in html and html.count("A → B") == 2 and "tiny @ step 10" in html
    page = alice_client.post(reverse("explorer:index"), {
        "action": "fill_mask", "checkpoint": steps[1].id, "compare_with": steps[1].id, "text": "a [MASK] ."})
    assert "Choose a different checkpoint to compare with." in page.content.decode()
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={steps[1].id}&compare={steps[0].id}")
    assert page.context["compare_to"] == steps[0] and 'data-compare="/api/explore/compare/"' in page.content.decode()
