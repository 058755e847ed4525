"""Classification as text to text on T5 from the web (issue 9: "so T5 can be compared with BERT"): the
API launches a T5 checkpoint on a classification dataset, the run reports the encoders' metrics,
confusion matrix and predictions, sits on the dataset's leaderboard beside a BERT run metric by
metric, and its checkpoint answers the explorer's classify question with the word it writes."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils.html import escape

from tests.trainer.inference_generate_helpers import make_checkpoint
from tests.webapp.runs_helpers import make_run
from tests.webapp.test_runs_finetune import FAST, ready_demo, script_data, tiny_checkpoint
from webapp.explorer.serializers import ClassifyResponseSerializer
from webapp.runs import services
from webapp.runs.models import Checkpoint, Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def t5_that_writes_the_labels(owner, tmp_path) -> Checkpoint:
    """A step of a tiny random T5 run whose tokenizer is trained on the classification demo itself, so
    it can write every label (the explorer helpers' tiny tokenizer has no "x" nor "y": it would write
    "xml" and "asyncio" both as [UNK], which the run refuses)."""
    from trainer.prep.labelled import DEMOS, write_demo_dataset
    from tests.tokenizer_store import stored_tokenizer

    text = write_demo_dataset("classification", tmp_path / DEMOS["classification"].filename).read_text()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text(text, encoding="utf-8")
    (corpus / "valid.txt").write_text(text[:4000], encoding="utf-8")
    stored_tokenizer(corpus, tmp_path / "tokenizer", algorithm="wordpiece", vocab_size=600, lowercase=True,
                    extra_ids=8)
    parent = make_run(owner, status=RunStatus.SUCCEEDED, name="tiny t5 run", family="t5")
    rel = Path("runs") / str(parent.id) / "checkpoints" / "step-00000010"
    (Path(settings.STORAGE_ROOT) / rel).mkdir(parents=True)
    make_checkpoint("t5", Path(settings.STORAGE_ROOT) / rel, tmp_path / "tokenizer")
    return Checkpoint.objects.create(run=parent, step=10, path=str(rel), metrics={})


def test_t5_classification_through_the_api_reports_like_bert_and_shares_the_leaderboard(
        alice, alice_api, alice_client, eager, django_capture_on_commit_callbacks, tmp_path):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    t5 = t5_that_writes_the_labels(alice, tmp_path)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(t5.id), "dataset": str(dataset.id), **FAST, "source_prefix": "package: ",
            "max_target_length": 6}, format="json")
        bert = services.finetune_create(owner=alice, checkpoint=tiny_checkpoint(alice), dataset=dataset,
                                        training=FAST)
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    bert.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert bert.status == RunStatus.SUCCEEDED, bert.error
    assert run.family == "t5" and run.objectives == ["classification"]
    t5_test, bert_test = run.metrics.get(split="test").values, bert.metrics.get(split="test").values
    keys = {"accuracy", "f1_macro", "f1_micro", "mcc"}
    assert keys <= set(t5_test) and keys <= set(bert_test)

    # the run's page: the classification charts, the confusion matrix over the dataset's labels
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    charts = {c["id"]: c for c in script_data(html, "dashboard-charts")}
    assert {s["metric"] for s in charts["ft_classification"]["series"]} == {"accuracy", "f1_macro", "f1_micro"}
    confusion = script_data(html, "confusion-data")
    assert confusion["labels"][: len(dataset.labels)] == dataset.labels
    assert set(confusion["labels"][len(dataset.labels):]) <= {"(invalid)"}
    assert reverse("runs:predictions", args=[run.id, "csv"]) in html

    # one leaderboard, both runs, the same primary metric and test columns
    board = alice_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).json()
    assert board["primary"] == "accuracy"
    rows = {row["id"]: row for row in board["rows"]}
    assert set(rows) == {str(run.id), str(bert.id)}
    assert rows[str(run.id)]["test"]["accuracy"] == t5_test["accuracy"]
    assert keys <= set(board["test_metrics"])

    # the explorer: the classify card, and the word the checkpoint writes with each label's probability
    tuned = run.checkpoints.order_by("step").last()
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={tuned.id}").content.decode()
    card = page[page.index('<section class="card" id="classify"'):]
    assert card[: card.index(">")].find("hidden") == -1
    response = alice_api.post(reverse("api-explore-classify"), {"checkpoint": str(tuned.id),
                                                                 "text": "Return the path of a file."}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == set(ClassifyResponseSerializer().fields)  # what the schema says it answers
    assert isinstance(body["generated"], str) and body["problem_type"] == "single_label_classification"
    assert sorted(x["label"] for x in body["labels"]) == sorted(dataset.labels)
    assert sum(x["probability"] for x in body["labels"]) == pytest.approx(1.0, abs=1e-4)
    assert body["predicted"] == ([body["generated"]] if body["generated"] in dataset.labels else [])
    # the same answer without JavaScript: the page posts the card's form and shows the word written
    html = alice_client.post(reverse("explorer:index"), {"checkpoint": str(tuned.id), "action": "classify",
                                                         "classify_text": "Return the path of a file."}).content.decode()
    assert f'<p class="explorer-generated">Generated: <b>«{escape(body["generated"])}»</b>' in html
    assert f"Predicted: {', '.join(body['predicted']) or 'none'}." in html
    # an encoder's classifier says it wrote nothing
    bert_ckpt = bert.checkpoints.order_by("step").last()
    answer = alice_api.post(reverse("api-explore-classify"), {"checkpoint": str(bert_ckpt.id), "text": "x"},
                            format="json").json()
    assert answer["generated"] is None and answer["predicted"] == [answer["labels"][0]["label"]]
