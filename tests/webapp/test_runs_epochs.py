"""Runs given in epochs from the web app: the forms and APIs take epochs or steps (a sentence for
both), the worker puts the steps they take on the run row, and the run page shows the epoch beside
the step."""
from __future__ import annotations

import math

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_data, make_run
from tests.webapp.test_runs_finetune import ready_demo, tiny_checkpoint
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def test_a_fine_tuning_run_in_epochs_counts_its_steps_and_shows_the_epoch(
        alice, alice_api, alice_client, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    url = reverse("api-finetune")
    both = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "epochs": 1,
                                "max_steps": 10}, format="json")
    assert both.status_code == 400 and "not both" in both.json()["error"]
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists()

    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "epochs": 1,
                                       "batch_size": 64, "max_length": 32, "eval_every": 1000}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    n = dataset.sizes["train"]
    train = run.metrics.filter(split="train").order_by("step").last()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["epochs"] == 1 and run.config["max_steps"] == 0  # as launched: the steps were unknown
    assert run.max_steps == run.current_step == train.step == math.ceil(n / 64)  # the worker counted them
    assert train.values["epoch"] == pytest.approx(run.max_steps * 64 / n)  # the last batch runs into epoch 2
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert f'<span id="run-step">step {run.max_steps} / {run.max_steps}</span>' in html
    assert '<span id="run-epoch">epoch 1.0 / 1</span>' in html


def test_the_run_page_shows_the_epoch_while_it_trains(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING, current_step=30, max_steps=40,
                   config={"epochs": 2, "max_steps": 0})
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert '<span id="run-epoch">epoch 1.5 / 2</span>' in html
    waiting = make_run(alice, status=RunStatus.QUEUED, current_step=0, max_steps=0, config={"epochs": 3})
    html = alice_client.get(reverse("runs:detail", args=[waiting.id])).content.decode()
    assert '<span id="run-step">step 0</span>' in html and "epoch 0.0 / 3" in html
    plain = make_run(alice, status=RunStatus.RUNNING, current_step=3, max_steps=9)
    assert 'id="run-epoch"' not in alice_client.get(reverse("runs:detail", args=[plain.id])).content.decode()


def test_the_sink_puts_the_counted_steps_on_the_run(alice):
    from webapp.runs.sink import DatabaseChannelsSink

    run = make_run(alice, status=RunStatus.RUNNING, max_steps=0, config={"epochs": 2})
    DatabaseChannelsSink(run.id, claimed_by="test").run_length(26, 2.0)
    run.refresh_from_db()
    assert run.max_steps == 26


def test_a_pre_training_launch_takes_epochs_or_steps(alice, alice_api, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "epochs": 3}, format="json")
    assert response.status_code == 201, response.json()
    config = response.json()["config"]
    assert (config["epochs"], config["max_steps"]) == (3, 0) and response.json()["max_steps"] == 0
    both = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "epochs": 3, "max_steps": 50},
                          format="json")
    assert both.status_code == 400 and "not both" in both.json()["error"]

    form = {"corpus": str(tokenizer.corpus_id), "tokenizer": str(tokenizer.id), "family": "bert",
            "preset": "bert-tiny", "objectives": ["mlm", "nsp"], "batch_size": 8, "seq_len": 64, "lr": 1e-3,
            "warmup_steps": 0, "grad_accum": 1, "eval_every": 10, "checkpoint_every": 10, "masking": "dynamic",
            "seed": 0, "device": "cpu", "mask_prob": 0.15, "schedule": "linear", "weight_decay": 0.01,
            "clip_grad": 1.0, "eval_batches": 2, "log_every": 1, "precision": "auto", "num_threads": 0}
    page = alice_client.post(reverse("runs:new"), {**form, "max_steps": 20, "epochs": 2})
    assert page.status_code == 200 and "not both" in page.content.decode()
    page = alice_client.post(reverse("runs:new"), form)
    assert page.status_code == 200 and "Give the run&#x27;s length" in page.content.decode()
    before = Run.objects.count()
    page = alice_client.post(reverse("runs:new"), {**form, "epochs": 2})
    assert page.status_code == 302 and Run.objects.count() == before + 1
    assert Run.objects.order_by("-created_at").first().config["epochs"] == 2


def test_a_multi_device_runs_count_reaches_the_run_through_rank_0s_json_lines():
    import io

    from trainer.training.sinks import JsonLinesSink
    from webapp.runs.multiproc import _Relay

    told = []

    class Sink:
        def run_length(self, max_steps, epochs):
            told.append((max_steps, epochs))

    lines = io.StringIO()
    JsonLinesSink(lines).run_length(26, 2.0)  # what `python -m trainer train --events` writes on rank 0
    _Relay(Sink(), step=0, tokens_seen=0).line(lines.getvalue())
    assert told == [(26, 2.0)]


def test_the_fine_tune_form_takes_epochs_and_trackers_from_the_schema(
        alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    """epochs and report_to are settings of the fine-tuning schema: the generated form shows them,
    epochs typed beside the steps it filled in launch a run in epochs, and ticked trackers reach
    the config; both lengths changed by hand are refused on the form."""
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    html = alice_client.get(reverse("runs:finetune") + f"?checkpoint={base.id}&dataset={dataset.id}").content.decode()
    assert 'name="epochs"' in html and 'name="report_to" value="tensorboard"' in html
    form = {"checkpoint": base.id, "dataset": dataset.id, "max_steps": 300, "epochs": 2,
            "report_to": ["tensorboard", "mlflow"]}
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("runs:finetune"), form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    run = Run.objects.filter(kind=RunKind.FINETUNE).get()
    assert (run.config["epochs"], run.config["max_steps"]) == (2, 0)
    assert run.config["report_to"] == ["tensorboard", "mlflow"]
    refused = alice_client.post(reverse("runs:finetune"), {**form, "max_steps": 50})
    assert refused.status_code == 200 and "not both" in refused.content.decode()
    assert Run.objects.filter(kind=RunKind.FINETUNE).count() == 1


def test_epochs_that_mean_too_many_steps_are_refused_at_launch_naming_epochs(
        alice, alice_api, eager, enqueued, django_capture_on_commit_callbacks):
    """Issue 29, point 1: refused with a 400 that names epochs and the steps they mean, before any
    run exists, on both APIs; and the worker's own count says the same, never max_steps' bound."""
    from trainer.config import RunConfig, resolve_epochs
    from trainer.errors import ConfigError

    _, tokenizer = make_data(alice)
    tokenizer.stats = {**(tokenizer.stats or {}), "shards": {"train": {"n_tokens": 856_800}}}
    tokenizer.save()
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "epochs": 100000, "seq_len": 128,
                                             "batch_size": 16}, format="json")
    assert response.status_code == 400, response.content
    # 856,800 tokens hold at least 6,693 sequences of 128: 100,000 passes of 16 a step
    assert response.json()["error"] == ("epochs 100000 would take at least 41,831,250 steps (6,693 training "
                                        "sequences or more, 16 a step), more than the 10,000,000 a run may have; "
                                        "lower epochs.")
    assert "max_steps" not in response.content.decode()
    fine = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "epochs": 10, "seq_len": 128,
                                         "batch_size": 16}, format="json")
    assert fine.status_code == 201, fine.content

    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    n = dataset.sizes["train"]
    tuned = alice_api.post(reverse("api-finetune"), {"checkpoint": str(tiny_checkpoint(alice).id),
                                                     "dataset": str(dataset.id), "epochs": 100000, "batch_size": 8},
                           format="json")
    assert tuned.status_code == 400, tuned.content
    assert tuned.json()["error"].startswith(f"epochs 100000 would take {math.ceil(100000 * n / 8):,} steps "
                                            f"({n:,} training examples, 8 a step), more than the 10,000,000")
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists()

    with pytest.raises(ConfigError, match=r"^epochs 100000 would take 12,500,000 steps \(1,000 training examples"):
        resolve_epochs(RunConfig(epochs=100000, batch_size=8, warmup_steps=0), 1000, 8)
