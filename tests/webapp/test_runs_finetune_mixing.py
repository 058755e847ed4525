"""T5 multi-task mixing from the web: POST /api/finetune/ with extra_datasets (each one of the
user's ready datasets, by id, with its task prefix) trains one text-to-text run and charts each
task's scores; another user's dataset, or one that cannot be written as text, is refused."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_runs_finetune_generative import FAST, ready_demo, script_data
from webapp.runs import services
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def test_a_multi_task_run_through_the_api_trains_scores_and_charts_each_task(
        alice, alice_api, alice_client, eager, django_capture_on_commit_callbacks):
    summary = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    kinds = ready_demo(alice, django_capture_on_commit_callbacks, "classification")
    base = family_checkpoint(alice, "t5", run=True)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(base.id), "dataset": str(summary.id), **FAST, "source_prefix": "summarize: ",
            "extra_datasets": [{"dataset": str(kinds.id), "prefix": "package: "}], "mixing": "proportional",
            "mixing_limit": 300}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.objectives == ["text_to_text"] and run.config["mixing_limit"] == 300
    assert run.config["extra_datasets"][0]["id"] == str(kinds.id)
    assert run.log_lines.filter(text__startswith="Multi-task mixing (proportional): summarize 50.0%").exists()
    test = run.metrics.get(split="test").values
    assert {"exact_match/summarize", "exact_match/package", "exact_match/mean", "rouge_l/mean"} <= set(test)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    charts = {c["id"]: c for c in script_data(html, "dashboard-charts")}
    assert [s["metric"] for s in charts["ft_mix_exact"]["series"]] == [
        "exact_match/summarize", "exact_match/package", "exact_match/mean"]
    with django_capture_on_commit_callbacks(execute=False):
        copy = services.run_clone(run=run, owner=alice)
    assert copy.config["extra_datasets"] == run.config["extra_datasets"]


def test_another_users_dataset_or_one_not_written_as_text_is_refused(
        alice, bob, alice_api, eager, django_capture_on_commit_callbacks):
    summary = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    tags = ready_demo(alice, django_capture_on_commit_callbacks, "token_classification")
    theirs = ready_demo(bob, django_capture_on_commit_callbacks, "classification")
    base = family_checkpoint(alice, "t5", run=False)
    url = reverse("api-finetune")
    body = {"checkpoint": str(base.id), "dataset": str(summary.id), **FAST}
    response = alice_api.post(url, {**body, "extra_datasets": [{"dataset": str(theirs.id)}]}, format="json")
    assert response.status_code == 400 and f"No extra_datasets of yours has the id {theirs.id}" in response.content.decode()
    response = alice_api.post(url, {**body, "extra_datasets": [{"dataset": str(tags.id), "prefix": "tag: "}]},
                              format="json")
    assert response.status_code == 400
    assert "is a token classification dataset; multi-task mixing trains" in response.json()["error"]
    assert not Run.objects.filter(owner=alice).exists()


def test_the_form_picks_several_of_your_datasets_with_their_prefixes(
        alice, bob, alice_client, eager, django_capture_on_commit_callbacks):
    summary = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    kinds = ready_demo(alice, django_capture_on_commit_callbacks, "classification")
    pairs = ready_demo(alice, django_capture_on_commit_callbacks, "pair_classification")
    theirs = ready_demo(bob, django_capture_on_commit_callbacks, "regression")
    base = family_checkpoint(alice, "t5", run=False)
    assert 'id="ft-multitask"' not in alice_client.get(reverse("runs:finetune")).content.decode()  # no T5 chosen
    page = alice_client.get(reverse("runs:finetune") + f"?checkpoint={base.id}").content.decode()
    assert 'id="ft-multitask"' in page and f'value="{kinds.id}"' in page and str(theirs.id) not in page
    form = {"checkpoint": base.id, "dataset": summary.id, "name": "", **FAST, "llrd": 1.0, "freeze_layers": 0,
            "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none",
            "source_prefix": "summarize: ", "mixing": "temperature", "mixing_temperature": 3.0}
    response = alice_client.post(reverse("runs:finetune"), {**form, "extra_datasets": [kinds.id, theirs.id]})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    response = alice_client.post(reverse("runs:finetune"), {**form, "extra_datasets": [kinds.id],
                                                            "extra_prefixes": "no such dataset = x:"})
    assert "Line 1 must be the name of one of the extra datasets chosen" in response.content.decode()
    with django_capture_on_commit_callbacks(execute=False):
        response = alice_client.post(reverse("runs:finetune"), {
            **form, "extra_datasets": [kinds.id, pairs.id], "extra_prefixes": f"{kinds.name} = package:"})
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get(owner=alice)
    assert sorted((e["id"], e["prefix"]) for e in run.config["extra_datasets"]) == sorted(
        [(str(kinds.id), "package: "), (str(pairs.id), f"{pairs.name}: ")])  # no line: the dataset's name
    assert run.config["mixing"] == "temperature" and run.config["mixing_temperature"] == 3.0
    again = alice_client.get(reverse("runs:finetune") + f"?from={run.id}").content.decode()
    assert f"{kinds.name} = package:" in again
