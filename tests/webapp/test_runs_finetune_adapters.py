"""Bottleneck adapters from the web: adapter_size on the fine-tuning form and in the API, the run's
settings on its page, settings that cannot work refused with sentences, and the Hugging Face export
of an adapted checkpoint refused with one."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.datasets import services as dataset_services
from webapp.jobs.models import JobStatus
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)

FAST = dict(max_length=48, max_steps=4, batch_size=8, lr=1e-3, warmup_ratio=0.0, eval_every=4)
FORM = dict(FAST, name="", llrd=1.0, freeze_layers=0, gradual_unfreeze_every=0, early_stopping_patience=0,
            class_weights="none")


def ready_demo(owner, capture):
    with capture(execute=True):
        dataset = dataset_services.dataset_create_demo(owner=owner, name="classification")
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    return dataset


def test_adapters_through_the_api_train_show_on_the_run_page_and_refuse_the_hf_export(
        alice, alice_api, alice_client, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(base.id), "dataset": str(dataset.id), **FAST, "adapter_size": 8}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["adapter_size"] == 8
    assert run.log_lines.filter(text__startswith="Bottleneck adapters of size 8 after").exists()
    page = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert "adapter_size: 8" in page  # the run's settings
    checkpoint = run.checkpoints.order_by("step").last()
    refused = alice_api.post(reverse("api-checkpoint-export-job", args=[checkpoint.id]))  # before any job is queued
    assert refused.status_code == 400
    assert "cannot be written in the Hugging Face format: it carries bottleneck adapters (size 8)" \
        in refused.json()["error"]


def test_the_form_offers_adapter_size_and_settings_that_cannot_work_are_refused_with_sentences(
        alice, alice_api, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)
    page = alice_client.get(reverse("runs:finetune")).content.decode()
    assert 'name="adapter_size"' not in page and " Bottleneck adapters</label>" in page  # offered as a technique
    page = alice_client.get(reverse("runs:finetune") + "?technique=adapters").content.decode()
    assert 'name="adapter_size" value="64"' in page and "(Houlsby et al. 2019)" in page
    url = reverse("api-finetune")
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "adapter_size": 8,
                                   "lora_r": 4}, format="json")
    assert refused.status_code == 400
    assert "Adapters and LoRA both train a few added weights" in refused.json()["error"]
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "adapter_size": -1},
                             format="json")
    assert refused.status_code == 400 and "adapter_size" in refused.json()["fields"]
    response = alice_client.post(reverse("runs:finetune"), {
        "checkpoint": base.id, "dataset": dataset.id, **FORM, "adapter_size": 8, "gradual_unfreeze_every": 5})
    assert response.status_code == 200
    assert "set adapter_size or gradual_unfreeze_every to 0" in response.content.decode()
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists() and not enqueued
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, **FORM, "adapter_size": 32})
    assert response.status_code == 302
    assert Run.objects.get(owner=alice, kind=RunKind.FINETUNE).config["adapter_size"] == 32
