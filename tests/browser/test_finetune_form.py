"""The fine-tuning form in the system Chromium offers only the pairs that fit: choosing a checkpoint
narrows the dataset list to the datasets its family fine-tunes on (a dataset not ready is never
offered), says what fits, and lets go of a chosen dataset the new checkpoint cannot take. Its
settings follow the choices: a BERT classifier shows no T5, GPT or LoRA settings until they apply,
choosing LoRA brings LoRA's in (values typed so far kept), and the rest waits in an "advanced" fold."""
from __future__ import annotations

import pytest

from tests.browser.conftest import SHOTS
from tests.webapp.test_runs_finetune import family_stub

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def choices(alice):
    from webapp.datasets.models import Dataset
    from webapp.jobs.models import JobStatus

    checkpoints = {f: family_stub(alice, f) for f in ("bert", "gpt", "t5")}
    datasets = {name: Dataset.objects.create(owner=alice, name=name, task=task, status=status)
                for name, task, status in (("labels", "classification", JobStatus.READY),
                                           ("tags", "token_classification", JobStatus.READY),
                                           ("chats", "sft", JobStatus.READY),
                                           ("pairs", "text_to_text", JobStatus.READY),
                                           ("half done", "classification", JobStatus.MAPPING))}
    return checkpoints, datasets


OFFERED = """() => Array.from(document.querySelectorAll('#id_dataset option'))
    .filter(o => o.value && !o.disabled && !o.hidden).map(o => o.textContent.split(' (')[0]).sort()"""


def test_choosing_a_checkpoint_narrows_the_datasets_to_those_it_fine_tunes_on(choices, alice_cookie,
                                                                              live_server_page):
    checkpoints, datasets = choices
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/runs/finetune/")
    assert page.evaluate(OFFERED) == ["chats", "labels", "pairs", "tags"]  # no checkpoint yet: every ready one
    assert page.is_disabled(f"#id_dataset option[value='{datasets['half done'].id}']")

    page.select_option("#id_checkpoint", str(checkpoints["gpt"].id))
    assert page.evaluate(OFFERED) == ["chats", "labels"]
    assert "A GPT checkpoint fine-tunes on classification, regression, supervised fine-tuning or multiple " \
           "choice datasets. 2 of your ready datasets fit it." == page.text_content("#ft-fit-note").strip()
    page.select_option("#id_dataset", str(datasets["chats"].id))

    page.select_option("#id_checkpoint", str(checkpoints["bert"].id))
    assert page.evaluate(OFFERED) == ["labels", "tags"]
    assert page.input_value("#id_dataset") == ""  # the SFT dataset does not fit a BERT checkpoint: let go
    assert page.is_disabled(f"#id_dataset option[value='{datasets['half done'].id}']")

    page.select_option("#id_checkpoint", str(checkpoints["t5"].id))
    assert page.evaluate(OFFERED) == ["labels", "pairs"]
    page.wait_for_selector("#ft-multitask")  # the settings follow the checkpoint: T5 mixes tasks
    assert page.is_enabled(f"input[name=extra_datasets][value='{datasets['pairs'].id}']")
    page.select_option("#id_checkpoint", str(checkpoints["gpt"].id))
    page.wait_for_selector("#ft-multitask", state="detached")  # GPT does not

    # a page opened on a checkpoint (?checkpoint=) starts filtered
    page.goto(f"/runs/finetune/?checkpoint={checkpoints['t5'].id}")
    assert page.evaluate(OFFERED) == ["labels", "pairs"]


SHOWN = """() => Array.from(document.querySelectorAll('#ft-settings [name]')).map(e => e.name)"""
T5_GPT_LORA = {"source_prefix", "max_target_length", "num_beams", "chat_template", "aux_lm_weight", "lora_r",
               "lora_alpha", "lora_targets", "adapter_size", "extra_datasets", "mixing"}


def test_the_settings_follow_the_checkpoint_the_dataset_and_the_technique(choices, alice_cookie, live_server_page):
    checkpoints, datasets = choices
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/finetune/?checkpoint={checkpoints['bert'].id}&dataset={datasets['labels'].id}")
    assert not T5_GPT_LORA & set(page.evaluate(SHOWN))
    assert page.text_content("label[for=id_lr]") == "Learning rate" and page.input_value("#id_lr") == "5e-05"
    assert not page.is_visible("#id_llrd")  # in the closed "advanced" fold
    page.click("#ft-techniques summary")
    assert page.is_visible("#id_llrd") and page.text_content("label[for=id_llrd]") == "Layer-wise learning-rate decay"
    assert page.query_selector("#ft-refresh") is None  # the script refreshes the settings itself

    page.fill("#id_max_steps", "42")
    page.check("input[name=technique][value=lora]")
    page.wait_for_selector("#id_lora_r")
    assert page.input_value("#id_lora_r") == "8" and page.input_value("#id_max_steps") == "42"
    assert "Low-rank adapters" in page.text_content("#ft-technique-note")
    assert page.is_visible("#id_llrd")  # the fold opened before stays open
    page.check("input[name=technique][value=full]")
    page.wait_for_selector("#id_lora_r", state="detached")

    page.select_option("#id_checkpoint", str(checkpoints["t5"].id))
    page.wait_for_selector("#id_source_prefix")
    assert "chat_template" not in page.evaluate(SHOWN)
    page.screenshot(path=str(SHOTS / "finetune_form.png"), full_page=True)

    # GPT on a chat dataset: SFT's chat template, previewed live in the swapped-in settings
    page.select_option("#id_checkpoint", str(checkpoints["gpt"].id))
    page.select_option("#id_dataset", str(datasets["chats"].id))
    page.wait_for_selector("#id_chat_template")
    page.wait_for_function("() => document.getElementById('chat-preview').textContent.includes('<end-of-text>')")
    assert "source_prefix" not in page.evaluate(SHOWN)
