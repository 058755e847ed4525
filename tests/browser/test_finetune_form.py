"""The fine-tuning form in the system Chromium offers only the pairs that fit: choosing a checkpoint
narrows the dataset list to the datasets its family fine-tunes on (a dataset not ready is never
offered), says what fits, and lets go of a chosen dataset the new checkpoint cannot take."""
from __future__ import annotations

import pytest

from tests.webapp.test_runs_finetune import family_stub

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def choices(alice):
    from webapp.datasets.models import Dataset, DatasetStatus

    checkpoints = {f: family_stub(alice, f) for f in ("bert", "gpt", "t5")}
    datasets = {name: Dataset.objects.create(owner=alice, name=name, task=task, status=status)
                for name, task, status in (("labels", "classification", DatasetStatus.READY),
                                           ("tags", "token_classification", DatasetStatus.READY),
                                           ("chats", "sft", DatasetStatus.READY),
                                           ("pairs", "text_to_text", DatasetStatus.READY),
                                           ("half done", "classification", DatasetStatus.MAPPING))}
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
    assert page.is_enabled(f"input[name=extra_datasets][value='{datasets['pairs'].id}']")  # T5 mixes tasks
    page.select_option("#id_checkpoint", str(checkpoints["gpt"].id))
    assert page.is_disabled(f"input[name=extra_datasets][value='{datasets['pairs'].id}']")  # GPT does not

    # a page opened on a checkpoint (?checkpoint=) starts filtered
    page.goto(f"/runs/finetune/?checkpoint={checkpoints['t5'].id}")
    assert page.evaluate(OFFERED) == ["labels", "pairs"]
