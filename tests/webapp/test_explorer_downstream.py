"""The explorer's tools for fine-tuned checkpoints (issue 9, section 6): classify, tag, answer and
sentence embeddings through the API (each only on your own checkpoints, a sentence for the wrong
one) and the panels the page shows for a fine-tuned checkpoint."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.test_runs_finetune import FAST, ready_demo, tiny_checkpoint
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
    assert 'data-task="classification"' in html and "js/explorer_downstream.js" in html
    assert '<section class="card" id="classify" data-tasks="classification regression multilabel">' in html
    assert '<section class="card" id="tag" data-tasks="token_classification" hidden>' in html
    assert 'id="fill-mask" data-kinds="encoder unilm" data-pretrained hidden>' in html
    assert '<section class="card" id="embed" data-kinds="encoder unilm">' in html
    assert "Fine-tuned for classification" in html
    plain = alice_client.get(reverse("explorer:index") + f"?checkpoint={base.id}").content.decode()
    assert 'id="classify" data-tasks="classification regression multilabel" hidden>' in plain
    assert 'id="fill-mask" data-kinds="encoder unilm" data-pretrained>' in plain
