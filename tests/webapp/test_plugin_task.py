"""Adding a fine-tuning task takes its own module, its test and one registration line.

This file is all three: it defines a toy task (its collator and step are real ones, reused; its
scoring, chart, dataset spec, explorer tool and one setting are its own), registers it with one
patched line of trainer.finetune.REGISTRY, and sees it in the fine-tuning schema and form (its
setting shown beside a BERT checkpoint and a dataset of its kind, with its label and help),
accepted by the API's validation (its setting's bound checked, out of bounds refused), charted on
the run's dashboard, offered its tool in the explorer, and its datasets scored against its baseline.
"""
from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint
from tests.webapp.test_runs_finetune import family_stub
from trainer import finetune
from trainer.charts import ChartSpec, MetricSpec
from trainer.finetune.baselines import TRIVIAL, Baseline, class_references
from trainer.finetune.metrics import TaskMetrics, classification_metrics
from trainer.finetune.settings import Setting
from trainer.finetune.tasks import SequenceCollator, SequenceStep, Task
from trainer.prep.labelled.tasks import TaskSpec
from webapp.runs import launch
from webapp.runs.models import Run, RunKind

pytestmark = pytest.mark.django_db(transaction=False)

TOY = Task(
    "toy", "Toy task (a test's)", "sequence_classification", "single_label_classification", SequenceCollator,
    SequenceStep, "toy",
    settings=(Setting("label_smoothing", "Toy smoothing", "How much of each target the toy task spreads over "
                      "the other classes.", section="task"),),
    explorer_action="classify",
    scoring=TaskMetrics("toy", classification_metrics, "accuracy", True,
                        (MetricSpec("accuracy", "toy accuracy", chart="toy_chart", splits=("valid",)),)),
    charts=(ChartSpec("toy_chart", "Toy accuracy", order=40, scale="percent"),),
    dataset=TaskSpec("toy", "Toy sentences", (("text", "label"),), "classes", "A text and its toy class."),
    baselines=(Baseline("always_x", "Always x", TRIVIAL, lambda train: lambda examples: ["x"] * len(examples)),),
    references=class_references,
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(finetune.REGISTRY, "toy", f"{__name__}:TOY")  # the one registration line
    launch.finetune_json.cache_clear()
    yield
    launch.finetune_json.cache_clear()


@pytest.fixture
def toy_choices(alice):
    from webapp.datasets.models import Dataset
    from webapp.jobs.models import JobStatus

    dataset = Dataset.objects.create(owner=alice, name="toys", task="toy", status=JobStatus.READY)
    return family_stub(alice, "bert"), dataset


def test_the_schema_describes_it(registered):
    schema = launch.finetune_json()
    assert schema["tasks"]["toy"] == {"name": "toy", "label": "Toy task (a test's)", "title": "Toy sentences",
                                      "generates": False, "explorer_action": "classify", "metrics": ["accuracy"],
                                      "primary": "accuracy"}
    assert schema["families"]["bert"]["tasks"]["toy"] == ["label_smoothing"]
    assert "toy" not in schema["families"]["gpt"]["tasks"]  # an encoder task: no head on GPT
    assert schema["settings"]["label_smoothing"] == {
        "name": "label_smoothing", "label": "Toy smoothing", "help": "How much of each target the toy task spreads "
        "over the other classes.", "advanced": False, "section": "task", "families": [], "type": "float",
        "default": 0.0, "min": 0.0, "max": 0.5}


def test_the_form_offers_it_and_its_setting(registered, alice, alice_client, toy_choices):
    checkpoint, dataset = toy_choices
    html = alice_client.get(reverse("runs:finetune") + f"?checkpoint={checkpoint.id}&dataset={dataset.id}"
                            ).content.decode()
    assert "fine-tunes on classification, regression, multi-label classification, token classification, " \
           "extractive question answering or toy sentences datasets" in html
    assert '<label for="id_label_smoothing">Toy smoothing</label>' in html
    option = re.search(rf'<option value="{dataset.id}"[^>]*>', html).group(0)
    assert 'data-task="toy"' in option and "disabled" not in option


def test_the_api_accepts_it_and_checks_its_setting(registered, alice, alice_api, alice_client, enqueued,
                                                    toy_choices):
    checkpoint, dataset = toy_choices
    body = {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id)}
    refused = alice_api.post("/api/finetune/", {**body, "label_smoothing": 0.9}, format="json")
    assert refused.status_code == 400 and "label_smoothing" in refused.json()["fields"]
    response = alice_api.post("/api/finetune/", {**body, "label_smoothing": 0.1}, format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.kind == RunKind.FINETUNE and run.config["task"] == "toy" and run.config["label_smoothing"] == 0.1

    # the dashboard charts its metric on its own chart
    page = alice_client.get(f"/runs/{run.id}/").content.decode()
    charts = json.loads(re.search(r'<script id="dashboard-charts" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    toy = next(c for c in charts if c["id"] == "toy_chart")
    assert toy["title"] == "Toy accuracy" and [s["metric"] for s in toy["series"]] == ["accuracy"]

    # the explorer offers its checkpoints the tool it declares
    tuned = make_checkpoint(run, step=5)
    explorer = alice_client.get(reverse("explorer:index") + f"?checkpoint={tuned.id}").content.decode()
    assert 'data-task="toy" data-tool="classify"' in explorer
    assert '<section class="card" id="classify" data-tool="classify">' in explorer


def test_its_dataset_spec_is_all_the_labelled_data_side_needs(monkeypatch, tmp_path):
    """The labelled-data layer (trainer.prep.labelled, below the task registry) builds, counts and
    reads a dataset by its TaskSpec's forms and kind of label, never by the task's name: the toy's
    spec, registered there, is ingested as a classes dataset, charted per class, measured and
    searched with its labels."""
    from trainer.inference.neighbours import dataset_texts
    from trainer.prep.labelled import SplitSpec, ingest, label_counts, model_input
    from trainer.prep.labelled.tasks import TASKS

    monkeypatch.setitem(TASKS, "toy", TOY.dataset)  # the labelled layer's own registration line
    rows = "".join(f"{'Open' if i % 2 else 'Close'} the file number {i}.,{'io' if i % 2 else 'os'}\n"
                   for i in range(12))
    path = tmp_path / "toys.csv"
    path.write_text("text,label\n" + rows, encoding="utf-8")
    out = tmp_path / "out"
    result = ingest(path, out, original_filename="toys.csv", task="toy", mapping={"text": "text", "label": "label"},
                    split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert result.labels == ["io", "os"] and result.label_counts["train"] == {"io": 6, "os": 6}
    chart = label_counts(out)
    assert chart["kind"] == "classes" and chart["counts"]["train"] == [6, 6]
    first = result.preview[0]
    assert model_input(first) == first["text"]
    items, total = dataset_texts(out)
    assert total == 12 and {item["label"] for item in items} == {"io", "os"}


def test_its_datasets_are_scored_against_its_own_baseline(registered, monkeypatch, tmp_path):
    from trainer.finetune import baselines
    from trainer.prep.labelled import store

    splits = {"train": [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}],
              "validation": [{"text": "c", "label": "x"}, {"text": "d", "label": "y"}, {"text": "e", "label": "x"},
                             {"text": "f", "label": "y"}],
              "test": []}
    monkeypatch.setattr(store, "read_meta", lambda data_dir: {"task": "toy"})
    monkeypatch.setattr(store, "iter_examples", lambda data_dir, split: iter(splits[split]))
    out = baselines.compute(tmp_path)
    assert (out["task"], out["metric"], out["note"]) == ("toy", "accuracy", "")
    [row] = out["baselines"]
    assert (row["name"], row["kind"], row["test"]) == ("always_x", "trivial", None)
    assert row["validation"]["accuracy"] == 0.5

