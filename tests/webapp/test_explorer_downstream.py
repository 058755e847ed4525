"""The explorer's tools for fine-tuned checkpoints (issue 9, section 6): classify, tag, answer and
sentence embeddings through the API (each only on your own checkpoints, a sentence for the wrong
one) and the panels the page shows for a fine-tuned checkpoint."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.test_runs_finetune import FAST, ready_demo, tiny_checkpoint
from webapp.explorer import services as services_explorer
from webapp.runs import services
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def tuned(alice, eager, django_capture_on_commit_callbacks):
    """(base checkpoint, fine-tuned classification checkpoint, dataset)."""
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.finetune_create(owner=alice, checkpoint=base, dataset=dataset, training=FAST)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return base, run.checkpoints.order_by("step").last(), dataset


def test_classify_and_embed_through_the_api(alice_api, tuned):
    base, checkpoint, dataset = tuned
    response = alice_api.post(reverse("api-explore-classify"), {"checkpoint": str(checkpoint.id),
                                                                 "text": "Return the path of a file."}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["checkpoint"] == str(checkpoint.id) and body["problem_type"] == "single_label_classification"
    assert sorted(x["label"] for x in body["labels"]) == sorted(dataset.labels)
    assert sum(x["probability"] for x in body["labels"]) == pytest.approx(1.0, abs=1e-4)
    assert body["predicted"] == [body["labels"][0]["label"]]

    # the compare column: the fine-tuned classifier answers, the pre-trained one says why it cannot
    both = alice_api.post(reverse("api-explore-compare"), {
        "checkpoints": [str(checkpoint.id), str(base.id)], "task": "classify",
        "inputs": {"text": "Return the path of a file."}}, format="json")
    assert both.status_code == 200, both.content
    first, second = both.json()["results"]
    assert first["result"]["labels"] == body["labels"] and first["error"] is None
    assert second["result"] is None and "a pre-trained model without a task head" in second["error"]

    for ckpt in (base, checkpoint):  # any encoder: the pre-trained one and the fine-tuned one
        response = alice_api.post(reverse("api-explore-embed"), {
            "checkpoint": str(ckpt.id), "sentences": ["Open a file.", "Open a file.", "Close the socket."]},
            format="json")
        assert response.status_code == 200, response.content
        sim = response.json()["similarity"]
        assert len(sim) == 3 and sim[0][1] == pytest.approx(1.0, abs=1e-4)


def test_the_wrong_checkpoint_or_input_gets_a_sentence_and_only_yours_answer(alice_api, bob_api, tuned):
    base, checkpoint, _ = tuned
    refused = alice_api.post(reverse("api-explore-tag"), {"checkpoint": str(checkpoint.id), "text": "os.path"},
                             format="json")
    assert refused.status_code == 400 and "Tagging needs a checkpoint fine-tuned as a token classifier" in \
        refused.json()["error"]
    refused = alice_api.post(reverse("api-explore-classify"), {"checkpoint": str(base.id), "text": "x"},
                             format="json")
    assert refused.status_code == 400 and "a pre-trained model without a task head" in refused.json()["error"]
    refused = alice_api.post(reverse("api-explore-answer"), {"checkpoint": str(checkpoint.id), "question": "q?",
                                                             "context": "c"}, format="json")
    assert refused.status_code == 400 and "Question answering needs" in refused.json()["error"]
    refused = alice_api.post(reverse("api-explore-embed"), {"checkpoint": str(base.id), "sentences": ["a", " "]},
                             format="json")
    assert refused.status_code == 400 and "Give from 2 to 8 sentences" in refused.json()["error"]
    for name, body in (("api-explore-classify", {"text": "x"}), ("api-explore-tag", {"text": "x"}),
                       ("api-explore-answer", {"question": "q", "context": "c"}),
                       ("api-explore-embed", {"sentences": ["a", "b"]})):
        response = bob_api.post(reverse(name), {"checkpoint": str(checkpoint.id), **body}, format="json")
        assert response.status_code == 404 and "not yours" in response.json()["error"], name


def test_the_page_shows_the_fine_tuned_panels(alice_client, tuned):
    base, checkpoint, _ = tuned
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    assert 'data-task="classification" data-tool="classify"' in html and "js/explorer_downstream.js" in html
    assert '<section class="card" id="classify" data-tool="classify">' in html
    assert '<section class="card" id="tag" data-tool="tag" hidden>' in html
    assert 'id="fill-mask" data-kinds="encoder unilm" data-pretrained hidden>' in html
    assert '<section class="card" id="embed" data-kinds="encoder unilm">' in html
    # what it says it can do is what it still can (issue 21): its task, not fill-mask
    about = re.search(r'<p class="helptext" id="checkpoint-kind">([^<]*)</p>', html).group(1)
    assert about.startswith("An encoder fine-tuned for classification: ask it what it was fine-tuned for")
    assert "fill in masks, score" not in about and "no longer fills in masks" in about
    assert f'value="{checkpoint.id}"' in html and f'data-about="{about}"' in html  # the script's copy for the select
    plain = alice_client.get(reverse("explorer:index") + f"?checkpoint={base.id}").content.decode()
    assert '<p class="helptext" id="checkpoint-kind">An encoder: fill in masks, score sentence pairs' in plain
    assert 'id="classify" data-tool="classify" hidden>' in plain
    assert 'id="fill-mask" data-kinds="encoder unilm" data-pretrained>' in plain


# ---------------------------------------------------------------------------- without JavaScript
def _post(client, checkpoint, action, **fields) -> str:
    response = client.post(reverse("explorer:index"), {"checkpoint": str(checkpoint.id), "action": action, **fields})
    assert response.status_code == 200
    return response.content.decode()


def test_without_javascript_the_classifier_answers_in_a_table(alice_client, tuned):
    base, checkpoint, dataset = tuned
    html = _post(alice_client, checkpoint, "classify", classify_text="Return the path of a file.")
    answer = services_explorer.classify(checkpoint=checkpoint, text="Return the path of a file.")
    assert '<table class="compact explorer-prob-table">' in html
    for row in answer["labels"]:
        assert f"{row['label']}" in html and f"<td>{row['probability']:.3f}</td>" in html
    assert f"Predicted: {answer['predicted'][0]}." in html
    assert '<div id="classify-result" class="explorer-results">' in html  # shown, not hidden

    both = _post(alice_client, checkpoint, "classify", classify_text="Return the path of a file.",
                 compare_with=str(base.id))
    assert '<div class="explorer-columns two">' in both and "a pre-trained model without a task head" in both
    empty = _post(alice_client, checkpoint, "classify", classify_text=" ")
    assert "Type a text to classify." in empty and 'id="classify-result" class="explorer-results" hidden' in empty


def test_without_javascript_the_similarities_are_a_table(alice_client, tuned):
    base, _, _ = tuned
    html = _post(alice_client, base, "embed", embed_sentences="Open a file.\nOpen a file.\nClose the socket.",
                 embed_pooling="cls")
    assert "<table class=\"compact explorer-similarity\" data-similarity>" in html
    assert "<th>1. Open a file.</th><td>1.000</td><td>1.000</td>" in html and "cls pooling" in html
    one = _post(alice_client, base, "embed", embed_sentences="Only one.")
    assert "Give from 2 to 8 sentences" in one


def test_without_javascript_entities_and_the_answer_are_marked(alice_client, tuned, monkeypatch):
    """The template's part (the models' answers are the API tests' and the trainer's): entities
    wrapped in <mark> with their type, the answer span marked in its context."""
    from webapp.explorer import views

    base, _, _ = tuned
    text = "Use os.path.join to build the path."
    monkeypatch.setattr(views.services, "tag", lambda **kw: {
        "words": [{"text": "os.path.join", "start": 4, "end": 16, "tag": "B-CODE", "probability": 0.9}],
        "entities": [{"type": "CODE", "start": 4, "end": 16, "text": "os.path.join", "score": 0.9}],
        "truncated": False})
    html = _post(alice_client, base, "tag", tag_text=text)
    assert ('<p class="explorer-highlighted">Use <mark data-type="CODE" title="CODE">os.path.join<sup>CODE</sup>'
            "</mark> to build the path.</p>") in html
    context = "getcwd() returns a string. It raises OSError."
    monkeypatch.setattr(views.services, "answer", lambda **kw: {
        "answer": {"text": "a string", "start": 17, "end": 25, "score": 3.5}, "null_score": -1.0, "threshold": 0.0,
        "windows": 1, "n_best": [{"text": "a string", "start": 17, "end": 25, "score": 3.5}]})
    html = _post(alice_client, base, "answer", qa_question="What does getcwd return?", qa_context=context)
    assert '<p class="explorer-highlighted">getcwd() returns <mark class="answer">a string</mark>. It raises' in html
    assert "<li>a string (3.50)</li>" in html


def test_marked_cuts_the_text_around_its_spans():
    from webapp.explorer.pages import marked

    pieces = marked("ab cd ef", [{"start": 6, "end": 8, "type": "Y"}, {"start": 0, "end": 2, "type": "X"},
                                 {"start": 1, "end": 4, "type": "Z"}])  # Z overlaps X: left out
    assert [(p["text"], p["mark"], p["type"]) for p in pieces] == [
        ("ab", True, "X"), (" cd ", False, ""), ("ef", True, "Y")]
