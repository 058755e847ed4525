"""Text to text (T5, UniLM), SFT and GPT-1's classifier (GPT), and LoRA, from the web: launched by
the API and the page with their settings and an editable chat template, refused with sentences
for a family the task does not train, executed eagerly, their metrics on the dashboard."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.datasets import services as dataset_services
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)

FAST = dict(max_length=48, max_steps=4, batch_size=8, lr=1e-3, warmup_ratio=0.0, eval_every=4,
            max_target_length=6, samples_shown=1)
# A classifier head generates nothing: the API refuses the generation settings for it.
HEAD_FAST = {k: v for k, v in FAST.items() if k not in ("max_target_length", "samples_shown")}


def ready_demo(owner, capture, demo: str) -> Dataset:
    with capture(execute=True):
        dataset = dataset_services.dataset_create_demo(owner=owner, name=demo)
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    return dataset


def script_data(html: str, element_id: str):
    start = html.index(f'id="{element_id}"')
    start = html.index(">", start) + 1
    return json.loads(html[start:html.index("</script>", start)])


def test_text_to_text_on_t5_through_the_api_trains_and_charts_rouge_and_bleu(
        alice, alice_api, alice_client, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    base = family_checkpoint(alice, "t5", run=True)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(base.id), "dataset": str(dataset.id), **FAST, "source_prefix": "summarize: ",
            "num_beams": 2}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["source_prefix"] == "summarize: " and run.config["num_beams"] == 2
    assert run.family == "t5" and run.objectives == ["text_to_text"]
    test = run.metrics.get(split="test").values
    assert {"rouge1", "rouge2", "rouge_l", "bleu", "exact_match"} <= set(test)
    assert run.log_lines.filter(text__startswith="Sample 1: input «").exists()
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    charts = {c["id"]: c for c in script_data(html, "dashboard-charts")}
    assert {"ft_text", "ft_bleu", "loss"} <= set(charts)
    assert {s["metric"] for s in charts["ft_text"]["series"]} == {"rouge1", "rouge2", "rouge_l", "exact_match"}
    assert 'data-test-metric="rouge_l"' in html

    # The explorer's text-to-text box starts with the run's task prefix (the page says so); not for the base.
    tuned = run.checkpoints.order_by("-step").first()
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={tuned.id}").content.decode()
    assert '<textarea name="prompt"' in page and ">\nsummarize: </textarea>" in page
    assert '<p class="helptext" id="run-prefix">' in page and "<code data-prefix>summarize: </code>" in page
    assert f'value="{tuned.id}"' in page and 'data-prefix="summarize: "' in page
    base_page = alice_client.get(reverse("explorer:index") + f"?checkpoint={base.id}").content.decode()
    assert '<p class="helptext" id="run-prefix" hidden>' in base_page


def test_sft_on_gpt_through_the_page_keeps_the_chat_template_as_typed(
        alice, alice_client, alice_api, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks, "sft")
    base = family_checkpoint(alice, "gpt", run=True)
    page = alice_client.get(reverse("runs:finetune") + f"?checkpoint={base.id}&dataset={dataset.id}")
    html = page.content.decode()
    assert page.status_code == 200 and 'id="chat-preview"' in html and "js/finetune_chat.js" in html
    assert "&lt;|{role}|&gt;\n{content}\n</textarea>" in html  # the default template, shown to edit
    template = "### {role}:\n{content}\n\n"
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, "name": "", **FAST, "llrd": 1.0, "freeze_layers": 0,
            "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none",
            "chat_template": template})
    run = Run.objects.get(owner=alice, kind=RunKind.FINETUNE)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert run.config["chat_template"] == template  # spaces and line breaks kept
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.metrics.get(split="test").values["perplexity"] > 1
    assert run.log_lines.filter(text__startswith="Sample 1: prompt «").exists()
    detail = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    series = {s["metric"] for c in script_data(detail, "dashboard-charts") for s in c["series"]}
    assert "perplexity" in series

    # The explorer chats with the fine-tuned checkpoint in the run's template: offered (ticked) on the page,
    # by the API on request, and refused with a sentence for a checkpoint that learnt no template.
    tuned = run.checkpoints.order_by("-step").first()
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={tuned.id}").content.decode()
    assert 'name="gen_chat"' in page and 'data-tool="chat">' in page
    ask = {"checkpoint": str(tuned.id), "prompt": "Name the object.", "max_new_tokens": 3}
    chatted = alice_api.post(reverse("api-explore-generate"), {**ask, "chat": True}, format="json")
    plain = alice_api.post(reverse("api-explore-generate"), ask, format="json")
    assert chatted.status_code == plain.status_code == 200, chatted.content
    assert chatted.json()["chat"] is True and plain.json()["chat"] is False
    assert chatted.json()["prompt_tokens"] > plain.json()["prompt_tokens"]  # "### user:" ... "### assistant:"
    refused = alice_api.post(reverse("api-explore-generate"), {**ask, "checkpoint": str(base.id), "chat": True},
                             format="json")
    assert refused.status_code == 400
    assert "Chat needs a GPT checkpoint of a supervised fine-tuning (SFT) run" in refused.json()["error"]
    answered = alice_client.post(reverse("explorer:index"), {
        "checkpoint": tuned.id, "action": "generate", "gen_prompt": "Name the object.", "gen_chat": "on",
        "strategy": "greedy", "max_new_tokens": 3}).content.decode()
    assert "A reply in the chat template;" in answered


def test_a_classifier_form_posted_without_the_generation_fields_keeps_their_defaults(
        alice, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    from trainer.finetune.chat import DEFAULT_CHAT_TEMPLATE

    dataset = ready_demo(alice, django_capture_on_commit_callbacks, "sft")
    base = family_checkpoint(alice, "gpt", run=True)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("runs:finetune"), {
            "checkpoint": base.id, "dataset": dataset.id, "max_length": 48, "max_steps": 4, "batch_size": 8,
            "lr": 1e-3, "warmup_ratio": 0.0, "eval_every": 4, "llrd": 1.0, "freeze_layers": 0,
            "gradual_unfreeze_every": 0, "early_stopping_patience": 0, "class_weights": "none"})
    assert response.status_code == 302
    run = Run.objects.get(owner=alice, kind=RunKind.FINETUNE)
    assert run.config["chat_template"] == DEFAULT_CHAT_TEMPLATE and run.config["max_target_length"] == 64


def test_families_the_task_does_not_train_and_bad_templates_are_refused_with_sentences(
        alice, alice_api, alice_client, eager, enqueued, django_capture_on_commit_callbacks):
    text = ready_demo(alice, django_capture_on_commit_callbacks, "text_to_text")
    sft = ready_demo(alice, django_capture_on_commit_callbacks, "sft")
    bert = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)
    gpt = family_checkpoint(alice, "gpt", run=True)
    url = reverse("api-finetune")
    refused = alice_api.post(url, {"checkpoint": str(bert.id), "dataset": str(text.id)}, format="json")
    assert refused.status_code == 400
    assert "A BERT checkpoint cannot be fine-tuned for text to text: that task trains a T5 or UniLM model" \
        in refused.json()["error"]
    refused = alice_api.post(url, {"checkpoint": str(gpt.id), "dataset": str(text.id)}, format="json")
    assert refused.status_code == 400 and "A GPT checkpoint cannot be fine-tuned for text to text" \
        in refused.json()["error"]
    refused = alice_api.post(url, {"checkpoint": str(bert.id), "dataset": str(sft.id)}, format="json")
    assert refused.status_code == 400 and "that task trains a GPT model" in refused.json()["error"]
    refused = alice_api.post(url, {"checkpoint": str(gpt.id), "dataset": str(sft.id),
                                   "chat_template": "{role}: no content"}, format="json")
    assert refused.status_code == 400 and "chat_template must hold {content} exactly once" in refused.json()["error"]
    response = alice_client.post(reverse("runs:finetune"), {
        "checkpoint": gpt.id, "dataset": sft.id, **FAST, "llrd": 1.0, "freeze_layers": 0, "gradual_unfreeze_every": 0,
        "early_stopping_patience": 0, "class_weights": "none", "chat_template": "{content}{content}"})
    assert response.status_code == 200 and "chat_template must hold {content} exactly once" in response.content.decode()
    assert not Run.objects.filter(kind=RunKind.FINETUNE).exists() and not enqueued


def test_gpt_classification_through_the_api_uses_gpt1s_head_and_auxiliary_loss(
        alice, alice_api, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks, "classification")
    base = family_checkpoint(alice, "gpt", run=True)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(base.id), "dataset": str(dataset.id), **HEAD_FAST, "aux_lm_weight": 0.25}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["aux_lm_weight"] == 0.25 and run.family == "gpt"
    valid = run.metrics.filter(split="valid").last().values
    assert valid["loss"] == pytest.approx(valid["task_loss"] + 0.25 * valid["lm_loss"], rel=1e-6)
    assert 0.0 <= run.metrics.get(split="test").values["accuracy"] <= 1.0


def test_lora_through_the_api_trains_adapters_and_writes_them_for_peft(
        alice, alice_api, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks, "classification")
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {
            "checkpoint": str(base.id), "dataset": str(dataset.id), **HEAD_FAST, "lora_r": 4, "lora_alpha": 8,
            "lora_targets": "query, key, value"}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(id=created.json()["id"])
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.config["lora_r"] == 4 and run.config["lora_targets"] == "query, key, value"
    assert run.log_lines.filter(text__startswith="LoRA r=4, alpha=8").exists()
    config = json.loads((run.folder / "peft" / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4 and len(config["target_modules"]) == 3 * 2  # query, key and value of two layers
    refused = alice_api.post(reverse("api-finetune"), {
        "checkpoint": str(base.id), "dataset": str(dataset.id), "lora_r": 4, "lora_targets": "everything"},
        format="json")
    assert refused.status_code == 400 and "lora_targets must name some of query" in refused.json()["error"]


@pytest.mark.parametrize("family", ["gpt", "elmo"])
def test_the_explorer_opens_a_checkpoint_of_gpt1s_classifier_or_elmos_task_model(alice, alice_client, family):
    from models_lib.checkpoint import load_model, save_model
    from models_lib.families.downstream import TaskConfig
    from models_lib.families.elmo_tasks import ElmoForTask
    from models_lib.families.gpt_tasks import GPTForSequenceClassification

    checkpoint = family_checkpoint(alice, family, run=True)
    lm = load_model(checkpoint.folder)
    task = TaskConfig("sequence_classification", 2, ["no", "yes"])
    tuned = (GPTForSequenceClassification if family == "gpt" else ElmoForTask).from_lm(lm, task)
    save_model(tuned, checkpoint.folder)
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}")
    assert page.status_code == 200
    if family == "gpt":  # GPT-1's classifier keeps its LM head: it still writes text
        ask = {"action": "generate", "gen_prompt": "the dog ran", "max_new_tokens": 4}
    else:  # the biLM's layers are still there to compare words by
        ask = {"action": "word_similarity", "sentence_a": "i ate an apple", "sentence_b": "the apple pie",
               "word": "apple"}
    page = alice_client.post(reverse("explorer:index"), {"checkpoint": checkpoint.id, **ask})
    assert page.status_code == 200 and page.context["result"], page.context.get("error")
