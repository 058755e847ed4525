"""Fine-tuning from the web (issue 9): a Run of kind "finetune" launched from one of the user's
checkpoints and ready datasets (page and API), refused with sentences otherwise, executed eagerly
with the pre-training sink, its metrics and test table on the dashboard."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.datasets import services as dataset_services
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs import services
from webapp.runs.models import Checkpoint, Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)

FAST = dict(max_length=32, max_steps=6, batch_size=8, lr=1e-3, warmup_ratio=0.0, eval_every=3)


def ready_demo(owner, django_capture_on_commit_callbacks, demo: str = "classification") -> Dataset:
    with django_capture_on_commit_callbacks(execute=True):
        dataset = dataset_services.dataset_create_demo(owner=owner, name=demo)
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    return dataset


def tiny_checkpoint(owner) -> Checkpoint:
    """A real checkpoint (a 20-step tiny BERT) registered under a finished run of `owner`."""
    run = make_run(owner, status=RunStatus.SUCCEEDED, name="tiny bert")
    return make_checkpoint(run, step=20, real=True)


def family_stub(owner, family: str) -> Checkpoint:
    """A checkpoint row whose model_config.json names `family` (enough for the family check)."""
    ckpt = make_checkpoint(make_run(owner, status=RunStatus.SUCCEEDED, name=f"tiny {family}"), step=10)
    ckpt.folder.mkdir(parents=True, exist_ok=True)
    (ckpt.folder / "model_config.json").write_text(json.dumps({"family": family, "config": {}}))
    (ckpt.folder / "model.safetensors").write_bytes(b"")
    return ckpt


def script_data(html: str, element_id: str):
    start = html.index(f'id="{element_id}"')
    start = html.index(">", start) + 1
    return json.loads(html[start:html.index("</script>", start)])


# ---------------------------------------------------------------------------- execution
def test_a_finetune_run_trains_end_to_end_and_its_checkpoints_fine_tune_again(
        alice, alice_client, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.finetune_create(owner=alice, checkpoint=base, dataset=dataset, training=FAST)
    run.refresh_from_db()
    assert run.kind == RunKind.FINETUNE and run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["checkpoint"] == str(base.folder) and run.config["dataset"] == str(dataset.data_dir)
    assert run.current_step == 6 and run.objectives == ["classification"]
    splits = set(run.metrics.values_list("split", flat=True))
    assert {"train", "valid", "test"} <= splits
    test_point = run.metrics.get(split="test")
    assert 0.0 <= test_point.values["accuracy"] <= 1.0
    tuned = run.checkpoints.order_by("step").last()
    assert tuned is not None and tuned.owner_id == alice.pk and (tuned.folder / "model_config.json").is_file()
    assert run.lineage == f"fine-tuned from {base.label} on {dataset.name}"

    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert run.lineage in html
    explorer = alice_client.get(reverse("explorer:index") + f"?checkpoint={tuned.id}").content.decode()
    assert "Fine-tuned from tiny bert @ step 20 on" in explorer
    assert "Test split" in html and 'data-test-metric="accuracy"' in html
    chart_ids = [c["id"] for c in script_data(html, "dashboard-charts")]
    assert "ft_classification" in chart_ids and "ft_mcc" in chart_ids and "loss" in chart_ids

    # the fine-tuned checkpoint can itself be fine-tuned again
    with django_capture_on_commit_callbacks(execute=False):
        again = services.finetune_create(owner=alice, checkpoint=tuned, dataset=dataset, training=FAST)
    assert again.base_checkpoint_id == tuned.pk and again.status == RunStatus.QUEUED


# ---------------------------------------------------------------------------- launching
def test_the_page_launches_a_finetune_run_and_the_list_shows_both_kinds(
        alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    page = alice_client.get(reverse("runs:finetune") + f"?checkpoint={base.id}&dataset={dataset.id}")
    html = page.content.decode()
    assert page.status_code == 200 and "Layer-wise learning-rate decay" in html and "early_stopping_patience" in html
    assert f'value="{base.id}" selected' in html and f'value="{dataset.id}" selected' in html
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, "name": "", **FAST, "llrd": 0.9,
            "freeze_layers": 0, "gradual_unfreeze_every": 0, "early_stopping_patience": 2, "class_weights": "balanced",
        })
    run = Run.objects.get(owner=alice, kind=RunKind.FINETUNE)
    assert response.status_code == 302 and response.url == reverse("runs:detail", args=[run.id])
    assert run.config["llrd"] == 0.9 and run.config["class_weights"] == "balanced" and run.max_steps == 6
    assert len(enqueued) == 1
    listing = alice_client.get(reverse("runs:list")).content.decode()
    assert "fine-tune" in listing and dataset.name in listing and "tiny bert" in listing
    # a checkpoint's row offers fine-tuning
    detail = alice_client.get(reverse("runs:detail", args=[base.run_id])).content.decode()
    assert f"{reverse('runs:finetune')}?checkpoint={base.id}" in detail
    explorer = alice_client.get(reverse("explorer:index") + f"?checkpoint={base.id}").content.decode()
    assert f"{reverse('runs:finetune')}?checkpoint={base.id}" in explorer
    dataset_page = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert f"{reverse('runs:finetune')}?dataset={dataset.id}" in dataset_page


def test_the_page_shows_every_setting_the_service_takes_and_launches_with_them(
        alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    """A setting the form has but the page does not render would post as empty: an unticked box
    is False, so group_by_length (on by default) was silently off for every run launched here."""
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    html = alice_client.get(reverse("runs:finetune") + f"?checkpoint={base.id}&dataset={dataset.id}").content.decode()
    from trainer.catalog.finetune import fields_for

    shown = [s.name for s in fields_for("bert", "classification")]
    missing = [name for name in shown if f'name="{name}"' not in html]
    assert not missing and "class_weights" in shown, missing
    box = html[html.index('name="group_by_length"'):]
    assert box[:box.index(">")].endswith(" checked")  # on by default
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, "name": "seeded", **FAST, "llrd": 1.0, "freeze_layers": 0,
            "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none",
            "seed": 7, "num_threads": 1, "group_by_length": "on"})
        alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, "name": "defaults", **FAST, "llrd": 1.0,
            "freeze_layers": 0, "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none"})
    seeded, defaults = (Run.objects.get(owner=alice, name=n) for n in ("seeded", "defaults"))
    assert (seeded.config["seed"], seeded.config["num_threads"], seeded.config["group_by_length"]) == (7, 1, True)
    assert (defaults.config["seed"], defaults.config["num_threads"]) == (0, 0)  # left out: the defaults


T5_GPT_LORA = ("source_prefix", "max_target_length", "target_mask_prob", "num_beams", "samples_shown", "chat_template",
               "aux_lm_weight", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "adapter_size", "mixing",
               "extra_datasets", "doc_stride")


def test_the_form_for_a_bert_classifier_shows_only_what_applies_until_more_is_chosen(
        alice, alice_client, eager, django_capture_on_commit_callbacks):
    """No T5, GPT, QA or LoRA settings beside a BERT checkpoint and a classification dataset; human
    labels, defaults filled in, an advanced fold; LoRA's settings once LoRA is chosen (in the query,
    or posted back by the page's refresh button, which launches nothing)."""
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    url = reverse("runs:finetune") + f"?checkpoint={base.id}&dataset={dataset.id}"
    html = alice_client.get(url).content.decode()
    assert [n for n in T5_GPT_LORA if f'name="{n}"' in html] == []
    assert ">Learning rate</label>" in html and ">Lr</label>" not in html and ">Llrd<" not in html
    assert 'name="lr" value="5e-05"' in html and 'name="max_steps" value="300"' in html  # defaults filled in
    fold = html[html.index("<details"):]
    assert 'name="llrd"' in fold and 'name="lr"' not in fold[:fold.index("</details>")]
    lora = alice_client.get(url + "&technique=lora").content.decode()
    assert 'name="lora_r" value="8"' in lora and 'name="lora_targets"' in lora and 'name="source_prefix"' not in lora
    posted = alice_client.post(reverse("runs:finetune"), {"checkpoint": base.id, "dataset": dataset.id, "lr": "0.001",
                                                          "technique": "adapters", "refresh": "1",
                                                          "shown": "lr group_by_length"})  # the box unticked
    page = posted.content.decode()
    assert posted.status_code == 200 and 'name="adapter_size" value="64"' in page and 'name="lr" value="0.001"' in page
    box = page[page.index('name="group_by_length"'):]
    assert "checked" not in box[:box.index(">")]  # kept unticked, not back to its default
    assert 'name="lora_r"' not in page and not Run.objects.filter(owner=alice, kind="finetune").exists()


def test_a_refusal_lands_on_its_field(alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    response = alice_client.post(reverse("runs:finetune"), {"checkpoint": base.id, "dataset": dataset.id,
                                                            "technique": "lora", "lora_r": "0", "llrd": "0"})
    form = response.context["form"]
    assert "with LoRA; choose full fine-tuning" in form.errors["lora_r"][0]
    response = alice_client.post(reverse("runs:finetune"), {"checkpoint": base.id, "dataset": dataset.id,
                                                            "llrd": "0"})
    assert response.context["form"].errors["llrd"] == ["llrd must be above 0 and at most 1, not 0."]
    assert not enqueued


def test_the_page_refuses_with_sentences(alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    xlnet = family_stub(alice, "xlnet")  # T5 writes the labels as words (test_runs_finetune_t5_classify.py)
    response = alice_client.post(reverse("runs:finetune"), {
        "checkpoint": xlnet.id, "dataset": dataset.id, **FAST, "llrd": 1.0, "freeze_layers": 0,
        "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none"})
    html = response.content.decode()
    assert response.status_code == 200 and "XLNet checkpoint cannot be fine-tuned for sequence classification" in html
    base = tiny_checkpoint(alice)
    response = alice_client.post(reverse("runs:finetune"), {
        "checkpoint": base.id, "dataset": dataset.id, **FAST, "llrd": 1.5, "freeze_layers": 0,
        "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none"})
    assert "llrd must be above 0 and at most 1, not 1.5." in response.content.decode()  # beside its field
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists() and not enqueued


def option_tag(html: str, select_id: str, value) -> str:
    """The <option ...> opening tag of `value` inside the select `select_id`."""
    start = html.index(f'id="{select_id}"')
    end = html.index("</select>", start)
    at = html.index(f'value="{value}"', start, end)
    return html[html.rindex("<option", start, at):html.index(">", at) + 1]


def test_the_form_offers_only_the_datasets_the_checkpoint_fine_tunes_on(alice, alice_client, bob):
    """The options say what fits (data-tasks, data-task); with a checkpoint given (or posted) the
    server disables the datasets it cannot fine-tune on, and those not ready always; the refusal stays."""
    bert, gpt, t5 = (family_stub(alice, f) for f in ("bert", "gpt", "t5"))
    make = lambda name, task, status=JobStatus.READY: Dataset.objects.create(  # noqa: E731
        owner=alice, name=name, task=task, status=status)
    labels, tags, chats = make("labels", "classification"), make("tags", "token_classification"), make("chats", "sft")
    waiting = make("half done", "classification", JobStatus.MAPPING)
    Dataset.objects.create(owner=bob, name="bob's", status=JobStatus.READY, task="sft")

    offer = services.finetune_choices(alice)
    assert offer["checkpoints"][str(bert.id)]["tasks"] == [
        "classification", "regression", "multilabel", "token_classification", "extractive_qa"]
    assert offer["checkpoints"][str(gpt.id)]["tasks"] == ["classification", "regression", "sft", "multiple_choice"]
    assert offer["checkpoints"][str(t5.id)]["tasks"] == ["classification", "regression", "text_to_text"]
    assert offer["datasets"] == {
        str(labels.id): {"task": "classification", "ready": True, "mixable": True},
        str(tags.id): {"task": "token_classification", "ready": True, "mixable": False},
        str(chats.id): {"task": "sft", "ready": True, "mixable": False},
        str(waiting.id): {"task": "classification", "ready": False, "mixable": True}}  # bob's is not there

    html = alice_client.get(reverse("runs:finetune")).content.decode()  # no checkpoint yet: every ready one
    assert 'data-tasks="classification regression sft multiple_choice"' in option_tag(html, "id_checkpoint", gpt.id)
    assert 'data-note="A GPT checkpoint fine-tunes on classification, regression, supervised fine-tuning or ' \
           'multiple choice datasets."' in option_tag(html, "id_checkpoint", gpt.id)
    for d in (labels, tags, chats):
        tag = option_tag(html, "id_dataset", d.id)
        assert f'data-task="{d.task}"' in tag and "disabled" not in tag
    assert "disabled" in option_tag(html, "id_dataset", waiting.id)
    assert "js/finetune_choices.js" in html

    html = alice_client.get(reverse("runs:finetune") + f"?checkpoint={gpt.id}").content.decode()
    assert "disabled" not in option_tag(html, "id_dataset", labels.id)
    assert "disabled" not in option_tag(html, "id_dataset", chats.id)
    assert "disabled" in option_tag(html, "id_dataset", tags.id)  # GPT has no token classification
    assert "disabled" in option_tag(html, "id_dataset", waiting.id)
    assert "2 of your ready datasets fit it." in html
    html = alice_client.get(reverse("runs:finetune") + f"?checkpoint={bert.id}").content.decode()
    assert "disabled" in option_tag(html, "id_dataset", chats.id) and "disabled" not in option_tag(
        html, "id_dataset", tags.id)

    # posted without JavaScript anyway: refused with the sentence, the chosen one left enabled to show it
    response = alice_client.post(reverse("runs:finetune"), {
        "checkpoint": bert.id, "dataset": chats.id, **FAST, "llrd": 1.0, "freeze_layers": 0,
        "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none"})
    html = response.content.decode()
    assert response.status_code == 200 and "BERT checkpoint cannot be fine-tuned for" in html
    assert "disabled" not in option_tag(html, "id_dataset", chats.id)
    assert "disabled" in option_tag(html, "id_dataset", waiting.id)
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists()


def test_the_api_refuses_a_setting_that_does_not_apply_but_takes_a_techniques_switch(
        alice, alice_api, eager, enqueued, django_capture_on_commit_callbacks):
    """A BERT classifier has no task prefix (the form does not show one): the API says so rather than
    carry it along unused. LoRA's rank chooses LoRA, so its alpha applies with it."""
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    url = reverse("api-finetune")
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **FAST,
                                   "source_prefix": "classify: "}, format="json")
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error.startswith("source_prefix does not apply to a BERT checkpoint fine-tuned for classification; "
                            "the settings that apply are ") and "class_weights" in error and "lora_alpha" not in error
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "lora_alpha": 32},
                             format="json")
    assert refused.status_code == 400 and refused.json()["error"].startswith("lora_alpha does not apply")
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists()
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **FAST, "lora_r": 4,
                                       "lora_alpha": 8, "source_prefix": ""}, format="json")  # the default: harmless
    assert created.status_code == 201, created.content
    assert (created.json()["config"]["lora_r"], created.json()["config"]["lora_alpha"]) == (4, 8)


def test_the_api_launches_and_refuses_with_sentences(alice, alice_api, bob, eager, enqueued, settings,
                                                     django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    url = reverse("api-finetune")

    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **FAST}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["kind"] == "finetune" and body["base_checkpoint"] == str(base.id) and body["dataset"] == str(dataset.id)
    assert body["config"]["checkpoint"] == str(base.folder) and len(enqueued) == 1

    # the run's seed and CPU threads are settings like the others, bounds included
    with django_capture_on_commit_callbacks(execute=True):
        seeded = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **FAST, "seed": 3,
                                      "num_threads": 1}, format="json")
    assert seeded.status_code == 201, seeded.content
    assert (seeded.json()["config"]["seed"], seeded.json()["config"]["num_threads"]) == (3, 1)
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), "seed": -1}, format="json")
    assert refused.status_code == 400 and "seed" in refused.content.decode()
    Run.objects.filter(pk=seeded.json()["id"]).delete()

    # someone else's checkpoint or dataset: not found among yours
    bobs_dataset = Dataset.objects.create(owner=bob, name="bob's", status=JobStatus.READY, task="classification")
    bobs_base = make_checkpoint(make_run(bob, status=RunStatus.SUCCEEDED), step=10)
    refused = alice_api.post(url, {"checkpoint": str(bobs_base.id), "dataset": str(dataset.id)}, format="json")
    assert refused.status_code == 400 and f"No checkpoint of yours has the id {bobs_base.id}" in refused.json()["error"]
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(bobs_dataset.id)}, format="json")
    assert refused.status_code == 400 and "No dataset of yours" in refused.json()["error"]

    # an XLNet checkpoint, a dataset still being mapped: a sentence each
    refused = alice_api.post(url, {"checkpoint": str(family_stub(alice, "xlnet").id), "dataset": str(dataset.id)},
                             format="json")
    assert refused.status_code == 400 and "XLNet checkpoint cannot be fine-tuned" in refused.json()["error"]
    waiting = Dataset.objects.create(owner=alice, name="half done", status=JobStatus.MAPPING)
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(waiting.id)}, format="json")
    assert refused.status_code == 400
    assert "The dataset 'half done' is not ready yet" in refused.json()["error"]

    # the user's run limit applies
    settings.MAX_ACTIVE_RUNS_PER_USER = 1
    limited = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id)}, format="json")
    assert limited.status_code == 429 and "the most one user may have" in limited.json()["error"]
    assert Run.objects.filter(kind=RunKind.FINETUNE).count() == 1


def test_the_dashboard_charts_come_from_the_task_metrics():
    from trainer import finetune
    from trainer.finetune.metrics import METRICS

    ids = [c["id"] for c in finetune.charts_for("token_classification")]
    assert "ft_entities" in ids and "loss" in ids and "lr" in ids
    series = {s["metric"] for c in finetune.charts_for("regression") for s in c["series"]}
    assert {m.name for m in METRICS["regression"].metrics} <= series
    assert "ft_entity_f1" in [s["id"] for s in finetune.stats_for("token_classification")]
    from trainer.charts import charts_for as common_charts

    assert finetune.charts_for("no longer offered") == common_charts(())  # an old run still opens


def test_the_masking_inspector_answers_a_finetune_run_with_a_sentence(alice, alice_api, eager, enqueued,
                                                                      django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):
        run = services.finetune_create(owner=alice, checkpoint=tiny_checkpoint(alice), dataset=dataset,
                                       training=FAST)
    response = alice_api.post("/api/explore/inspect/", {"run": str(run.id), "seed": 0, "n_examples": 2},
                              format="json")
    assert response.status_code == 400
    assert response.json()["error"].startswith("The masking inspector shows pre-training batches; this is a "
                                               "fine-tuning run.")


def test_a_launch_builds_and_validates_its_config_once(alice, alice_client, eager, enqueued, monkeypatch,
                                                       django_capture_on_commit_callbacks):
    """The form validates the config (so a refusal lands on its field) and hands it to the service."""
    from trainer.finetune.config import FinetuneConfig

    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    built, real = [], FinetuneConfig.__post_init__
    monkeypatch.setattr(FinetuneConfig, "__post_init__", lambda self: (built.append(self), real(self))[1])
    response = alice_client.post(reverse("runs:finetune"), {"checkpoint": base.id, "dataset": dataset.id, **FAST})
    assert response.status_code == 302 and len(built) == 1
