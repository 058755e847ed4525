"""T5 multi-task training, "then optionally fine-tuned on one of them" (issue 9, section 2; Raffel
et al. 2020, section 3.5.3): a multi-task run's page lists its datasets with "Fine-tune on it"
(one click) and a pre-filled form; POST /api/runs/<id>/finetune-on/ does the same in one call. The
new run starts from the multi-task run's checkpoint, trains that dataset alone with its task prefix
(a classification dataset as T5's label words, scored like the encoders), and the lineage shows it
both ways."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_runs_finetune_generative import FAST, ready_demo
from webapp.runs import services
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def _as_multi_task(checkpoint, main, extra, *, prefix="package: ", extra_prefix="summarize: "):
    """Make the checkpoint's run look like a finished multi-task run on `main` and `extra`
    (what finetune_create stores), without training it."""
    run = checkpoint.run
    run.kind, run.objectives, run.dataset, run.status = RunKind.FINETUNE, ["text_to_text"], main, RunStatus.SUCCEEDED
    run.name = "t5 mix"
    run.config = {**FAST, "task": "text_to_text", "source_prefix": prefix, "lr": 2e-3, "mixing": "temperature",
                  "extra_datasets": [{"dataset": str(extra.data_dir), "prefix": extra_prefix, "name": "",
                                      "id": str(extra.pk)}]}
    run.save()
    return run


@pytest.fixture
def mix(alice, eager, django_capture_on_commit_callbacks):
    summary = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    kinds = ready_demo(alice, django_capture_on_commit_callbacks, "classification")
    checkpoint = family_checkpoint(alice, "t5", run=True)
    return _as_multi_task(checkpoint, kinds, summary), summary, kinds, checkpoint  # kinds the main task


def test_one_api_call_fine_tunes_the_checkpoint_on_one_of_its_datasets(alice_api, alice_client, mix,
                                                                       django_capture_on_commit_callbacks):
    run, summary, kinds, checkpoint = mix
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(reverse("api-run-finetune-on", args=[run.id]),
                                  {"dataset": str(summary.id), "max_steps": 4}, format="json")
    assert response.status_code == 201, response.content
    child = Run.objects.get(id=response.json()["id"])
    assert child.status == RunStatus.SUCCEEDED, child.error
    assert child.base_checkpoint == checkpoint and child.dataset == summary
    assert child.name == f"t5 mix, then {summary.name}" and child.max_steps == 4
    assert child.objectives == ["text_to_text"] and child.config["task"] == "text_to_text"
    assert child.config["source_prefix"] == "summarize: " and child.config["mixing"] == "proportional"
    assert child.config["extra_datasets"] == [] and child.config["lr"] == 2e-3  # the run's settings, no mixing
    test = child.metrics.get(split="test").values
    assert {"exact_match", "rouge_l"} <= set(test) and not any("/" in key for key in test)  # that task alone

    html = alice_client.get(reverse("runs:detail", args=[child.id])).content.decode()
    assert f"fine-tuned from {checkpoint.label} on {summary.name}" in html
    assert f'id="base-run" href="{reverse("runs:detail", args=[run.id])}"' in html
    assert 'id="finetune-on-one"' not in html  # a single-task run has no tasks to pick from
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="follow-ups"' in html and reverse("runs:detail", args=[child.id]) in html


def test_the_api_says_which_runs_and_datasets_it_takes(alice, alice_api, bob_api, mix, enqueued):
    run, summary, kinds, checkpoint = mix
    url = reverse("api-run-finetune-on", args=[run.id])
    single = services.finetune_create(owner=alice, checkpoint=checkpoint, dataset=summary, training=FAST)
    response = alice_api.post(reverse("api-run-finetune-on", args=[single.id]), {"dataset": str(summary.id)},
                              format="json")
    assert response.status_code == 400 and "Only a multi-task run" in response.json()["error"]
    response = alice_api.post(url, {"dataset": str(single.id)}, format="json")  # not one of its datasets
    assert response.status_code == 400 and "is not one of this run's tasks" in response.json()["error"]
    assert summary.name in response.json()["error"] and kinds.name in response.json()["error"]
    assert bob_api.post(url, {"dataset": str(kinds.id)}, format="json").status_code == 404
    run.checkpoints.all().delete()
    response = alice_api.post(url, {"dataset": str(kinds.id)}, format="json")
    assert response.status_code == 409 and "has no checkpoint yet" in response.json()["error"]


def test_the_run_page_offers_each_dataset_in_one_click_or_a_pre_filled_form(alice, alice_client, mix, enqueued,
                                                                            django_capture_on_commit_callbacks):
    run, summary, kinds, checkpoint = mix
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="finetune-on-one"' in html and checkpoint.label in html
    for dataset in (summary, kinds):
        assert f'data-finetune-on="{dataset.id}"' in html
        assert f'?then={run.id}&amp;dataset={dataset.id}' in html

    form = alice_client.get(reverse("runs:finetune") + f"?then={run.id}&dataset={kinds.id}").content.decode()
    assert f'<option value="{checkpoint.id}" selected' in form and f'<option value="{kinds.id}" selected' in form
    assert 'value="package: "' in form and f"t5 mix, then {kinds.name}" in form

    with django_capture_on_commit_callbacks(execute=False):
        response = alice_client.post(reverse("runs:finetune-on", args=[run.id]), {"dataset": str(summary.id)})
    child = Run.objects.exclude(pk=run.pk).get(owner=alice, base_checkpoint=checkpoint)
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[child.id])
    assert child.config["source_prefix"] == "summarize: " and child.config["task"] == "text_to_text"
    assert child.config["mixing"] == "proportional"  # the mix's temperature is not handed on

    response = alice_client.post(reverse("runs:finetune-on", args=[run.id]), {"dataset": "not-an-id"}, follow=True)
    assert "is not one of this run&#x27;s tasks" in response.content.decode()
