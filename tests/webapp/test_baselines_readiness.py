"""A yardstick for every result and a readiness check before fine-tuning (issue 21, points 3 and 4):
a dataset gets its baselines as it becomes ready, shown on its page, its leaderboard and the API;
a run below the lexical baseline says so on its page; the fine-tune form warns about a checkpoint
whose sentence vectors are all alike, not about one whose vectors differ; without a GPU the home
page and the fine-tune page say what pre-training on a CPU means."""
from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache
from django.urls import reverse

from tests.webapp.runs_helpers import make_run
from webapp.datasets import services as dataset_services
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs import capacity
from webapp.runs.models import Checkpoint, CheckpointSource, MetricPoint, Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A small classification dataset ingested once (its words are in the tiny BERT's vocabulary)
    with its baselines computed: (data folder, baselines)."""
    from tests.trainer.importing_helpers import VOCAB
    from trainer.finetune import baselines
    from trainer.prep.labelled import ingest

    base = tmp_path_factory.mktemp("bl-web")
    words = [w for w in VOCAB if w.isalpha() and w not in ("cat", "dog")]
    rng = random.Random(0)
    with open(base / "raw.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for _ in range(120):
            label = rng.choice(["cat", "dog"])
            writer.writerow([" ".join([*(rng.choice(words) for _ in range(5)), label]), label])
    ingest(base / "raw.csv", base / "data", original_filename="raw.csv", task="classification",
           mapping={"text": "text", "label": "label"})
    return base / "data", baselines.compute(base / "data")


def make_dataset(owner, stored) -> Dataset:
    import shutil

    data, found = stored
    dataset = Dataset.objects.create(owner=owner, name="pets", task="classification", status=JobStatus.READY,
                                     sizes={"train": 96, "validation": 12, "test": 12}, labels=["cat", "dog"],
                                     baselines=found)
    shutil.copytree(data, dataset.data_dir)
    return dataset


def finetune_run(owner, dataset, *, test_accuracy=None, valid_accuracy=None, status=RunStatus.SUCCEEDED) -> Run:
    run = Run.objects.create(owner=owner, name="ft", kind=RunKind.FINETUNE, dataset=dataset, family="bert",
                             preset="", objectives=["classification"], config={"lr": 5e-5}, status=status)
    if valid_accuracy is not None:
        MetricPoint.objects.create(run=run, step=10, split="valid", values={"accuracy": valid_accuracy})
    if test_accuracy is not None:
        MetricPoint.objects.create(run=run, step=20, split="test", values={"accuracy": test_accuracy})
    return run


# ---------------------------------------------------------------------------- baselines
def test_a_dataset_gets_its_baselines_as_it_becomes_ready(alice, alice_client, alice_api, eager,
                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        dataset = dataset_services.dataset_create_demo(owner=alice, name="classification")
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    assert dataset.baselines["metric"] == "accuracy"
    assert [row["name"] for row in dataset.baselines["baselines"]] == ["majority", "bow_logistic"]
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="baselines-table"' in html and "Bag of words + logistic regression" in html
    body = alice_api.get(f"/api/datasets/{dataset.id}/").json()
    assert body["baselines"]["baselines"][1]["kind"] == "lexical"


def test_the_leaderboard_lists_the_baselines_beside_the_runs(alice, alice_client, alice_api, stored):
    dataset = make_dataset(alice, stored)
    finetune_run(alice, dataset, test_accuracy=0.9, valid_accuracy=0.9)
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'data-baseline="bow_logistic"' in html.split('id="leaderboard-table"')[1]
    board = alice_api.get(f"/api/datasets/{dataset.id}/leaderboard/").json()
    lexical = next(row for row in board["baselines"] if row["kind"] == "lexical")
    assert lexical["test"]["accuracy"] == stored[1]["baselines"][1]["test"]["accuracy"]


def test_a_run_below_the_lexical_baseline_says_so_and_one_above_does_not(alice, alice_client, alice_api, stored):
    dataset = make_dataset(alice, stored)
    floor = stored[1]["baselines"][1]["test"]["accuracy"]
    below = finetune_run(alice, dataset, test_accuracy=floor - 0.2)
    above = finetune_run(alice, dataset, test_accuracy=min(1.0, floor + 0.01) if floor < 1 else 1.0)
    html = alice_client.get(reverse("runs:detail", args=[below.id])).content.decode()
    assert 'id="below-baseline"' in html and "import a pre-trained Hugging Face checkpoint" in html
    assert reverse("explorer:import") in html.split('id="below-baseline"')[1]
    assert alice_api.get(f"/api/runs/{below.id}/test-report/").json()["baseline"]["beats"] is False
    if floor < 1:
        html = alice_client.get(reverse("runs:detail", args=[above.id])).content.decode()
        assert 'id="below-baseline"' not in html and 'id="baseline-verdict"' in html


def test_an_imported_base_still_learning_is_told_to_train_longer_not_blamed(alice, alice_client, stored):
    """Issue 31, point 1, the MiniLM case: an imported base at 5e-5 whose validation loss was still
    falling; the page says train longer (with the epochs), blames neither the base nor the rate,
    and offers no import of what was imported."""
    from webapp.runs.models import Checkpoint, CheckpointSource

    dataset = make_dataset(alice, stored)
    dataset.sizes = {"train": 800, "validation": 100, "test": 100}
    dataset.save()
    floor = stored[1]["baselines"][1]["test"]["accuracy"]
    run = finetune_run(alice, dataset, test_accuracy=floor - 0.1)
    run.base_checkpoint = Checkpoint.objects.create(owner=alice, source=CheckpointSource.IMPORT, name="all-MiniLM-L6-v2",
                                                    path="imports/minilm", step=0)
    run.config = {"lr": 5e-5, "batch_size": 32, "grad_accum": 1}
    run.current_step = 30
    run.save()
    for step, valid, train in ((10, 1.1, 1.3), (20, 0.9, 1.0), (30, 0.8, 0.85)):
        MetricPoint.objects.create(run=run, step=step, split="valid", values={"loss": valid})
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": train})
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    advice = html.split('id="below-baseline-causes"')[1].split("</ul>")[0]
    assert 'data-cause="still_learning"' in advice and advice.count("<li") == 1
    assert "Train longer first: it ran 1.2 epochs (30 steps); try 3.6 epochs (about 90 steps)." in advice
    box = html.split('id="below-baseline"')[1].split("</section>")[0]
    assert "learned little" not in box and "2e-5 to 5e-5" not in box and 'id="below-baseline-import"' not in box


def test_a_classifier_flat_at_chance_is_told_it_learnt_nothing(alice, alice_client, stored):
    """Issue 45, point 1: a 2-class run whose training loss stayed at ln 2 (0.693), its last point
    a little above its first, is told it learnt nothing (raise the rate, train longer), not that its
    rate is too high."""
    dataset = make_dataset(alice, stored)
    floor = stored[1]["baselines"][1]["test"]["accuracy"]
    run = finetune_run(alice, dataset, test_accuracy=floor - 0.1)
    Run.objects.filter(pk=run.pk).update(current_step=40)
    for step, train in ((1, 0.6921), (10, 0.6958), (20, 0.6903), (30, 0.6949), (40, 0.6940)):
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": train})
    for step, valid in ((20, 0.6932), (40, 0.6931)):
        MetricPoint.objects.create(run=run, step=step, split="valid", values={"loss": valid})
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    advice = html.split('id="below-baseline-causes"')[1].split("</ul>")[0]
    assert 'data-cause="chance"' in advice and "ln 2 = 0.693" in advice and "learnt nothing" in advice
    assert 'data-cause="lr_high"' not in advice and 'data-cause="lr_low"' not in advice


def test_a_finished_run_without_a_test_split_is_judged_on_its_best_validation(alice, alice_client, stored):
    dataset = make_dataset(alice, stored)
    floor = stored[1]["baselines"][1]["validation"]["accuracy"]
    run = finetune_run(alice, dataset, valid_accuracy=floor - 0.3)
    assert 'id="below-baseline"' in alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    running = finetune_run(alice, dataset, valid_accuracy=floor - 0.3, status=RunStatus.RUNNING)
    html = alice_client.get(reverse("runs:detail", args=[running.id])).content.decode()
    assert 'id="below-baseline"' not in html and 'id="baseline-reference"' in html  # the yardstick, not a verdict


# ---------------------------------------------------------------------------- readiness
def imported_checkpoint(owner, *, collapsed: bool) -> Checkpoint:
    """A random tiny BERT from transformers imported as the explorer does; collapsed=True zeroes its
    last layer norm's scale (and sets its shift to ones), so every token, and so every sentence,
    comes out as the same vector."""
    import tempfile

    from safetensors.torch import load_file, save_file

    from tests.trainer.importing_helpers import write_tiny_hf_bert
    from trainer.inference.importing import import_hf_directory

    rel = Path("imports") / ("collapsed" if collapsed else "random") / str(owner.pk)
    folder = Path(settings.STORAGE_ROOT) / rel
    with tempfile.TemporaryDirectory() as tmp:
        import_hf_directory(write_tiny_hf_bert(Path(tmp) / "hf", kind="model", tokenizer_json=True), folder)
    if collapsed:
        import torch

        weights = load_file(folder / "model.safetensors")
        last = max(k for k in weights if k.endswith("ffn_norm.weight") and k.startswith("bert.encoder."))
        weights[last] = torch.zeros_like(weights[last])
        weights[last.replace(".weight", ".bias")] = torch.ones_like(weights[last])
        save_file(weights, folder / "model.safetensors")
    return Checkpoint.objects.create(owner=owner, source=CheckpointSource.IMPORT, name="tiny", path=str(rel))


def test_the_form_warns_about_a_collapsed_checkpoint_and_not_about_one_whose_vectors_differ(
        alice, alice_client, stored):
    cache.clear()
    dataset = make_dataset(alice, stored)
    collapsed = imported_checkpoint(alice, collapsed=True)
    html = alice_client.get(reverse("runs:finetune"), {"checkpoint": collapsed.id, "dataset": dataset.id}).content.decode()
    assert 'id="readiness-collapsed"' in html and "nearly identical for every" in html
    assert reverse("explorer:import") in html.split('id="readiness-collapsed"')[1]
    fine = imported_checkpoint(alice, collapsed=False)
    html = alice_client.get(reverse("runs:finetune"), {"checkpoint": fine.id, "dataset": dataset.id}).content.decode()
    assert 'id="readiness-probe"' in html and 'id="readiness-collapsed"' not in html
    assert 'role="alert"' not in html.split('id="readiness"')[1].split("</div>")[0]


def test_the_form_names_a_short_pre_training_from_the_record(alice, alice_client, bob):
    run = make_run(alice, status=RunStatus.SUCCEEDED, name="short", current_step=79, tokens_seen=40_000)
    checkpoint = Checkpoint.objects.create(run=run, step=79, path="runs/none", metrics={"valid": {"loss": 6.8}})
    html = alice_client.get(reverse("runs:finetune"), {"checkpoint": checkpoint.id}).content.decode()
    assert 'id="readiness-record"' in html and "only 79 steps (40,000 tokens)" in html
    bobs = make_run(bob, status=RunStatus.SUCCEEDED, name="bob's")
    theirs = Checkpoint.objects.create(run=bobs, step=5, path="runs/x")
    html = alice_client.get(reverse("runs:finetune"), {"checkpoint": theirs.id}).content.decode()
    assert 'id="readiness"' not in html  # another user's checkpoint is not read


def test_without_a_gpu_the_home_and_finetune_pages_say_what_a_cpu_means(alice_client, monkeypatch):
    monkeypatch.setattr(capacity, "live_workers", lambda: [{"queues": ["cpu"], "gpus": None, "cpu_processes": 1}])
    for url in (reverse("home"), reverse("runs:finetune")):
        html = alice_client.get(url).content.decode()
        assert 'id="cpu-notice"' in html and "hours to days on a CPU" in html, url
        assert reverse("explorer:import") in html.split('id="cpu-notice"')[1]
    monkeypatch.setattr(capacity, "live_workers", lambda: [{"queues": ["gpu"], "gpus": 1, "cpu_processes": None}])
    for url in (reverse("home"), reverse("runs:finetune")):
        assert 'id="cpu-notice"' not in alice_client.get(url).content.decode()


def test_the_api_and_the_forms_panel_answer_for_the_pair_and_only_for_the_owner(
        alice, alice_client, alice_api, bob, bob_api, stored):
    cache.clear()
    dataset = make_dataset(alice, stored)
    collapsed = imported_checkpoint(alice, collapsed=True)
    url = f"/api/checkpoints/{collapsed.id}/readiness/"
    body = alice_api.get(url, {"dataset": str(dataset.id)}).json()
    assert body["collapsed"] is True and body["warn"] is True and body["probe"]["mean_cosine"] > 0.99
    assert body["record"]["imported"] is True and body["importer_url"] == reverse("explorer:import")
    assert alice_api.get(url).json()["probe"] is None  # no dataset: the record alone
    assert bob_api.get(url, {"dataset": str(dataset.id)}).status_code == 404  # not bob's checkpoint
    bobs = make_dataset(bob, stored)
    assert alice_api.get(url, {"dataset": str(bobs.id)}).status_code == 404  # not alice's dataset
    assert alice_api.get(url, {"dataset": "nope"}).status_code == 400
    panel = alice_client.get(reverse("runs:finetune-readiness"), {"checkpoint": collapsed.id, "dataset": dataset.id})
    html = panel.content.decode()
    assert html.lstrip().startswith('<div id="readiness-slot"') and 'id="readiness-collapsed"' in html
    assert "<script" not in html  # the fragment replaces the panel; the page already has the script


def test_the_command_computes_the_baselines_of_a_dataset_stored_before_them(alice, stored):
    from django.core.management import call_command

    dataset = make_dataset(alice, stored)
    Dataset.objects.filter(pk=dataset.pk).update(baselines={})
    call_command("dataset_baselines")
    dataset.refresh_from_db()
    assert dataset.baselines == stored[1]
