"""The explorer's "Choose" panel in the system Chromium, on a GPT-1 multiple-choice checkpoint (a
tiny GPT fine-tuned for a few steps on the demo dataset): a context and its choices typed in give
one probability bar per choice, the ones the service computes, the most likely marked; a question
it cannot answer gets the API's sentence in place of the bars."""
from __future__ import annotations

import pytest

from tests.webapp.test_finetune_multiple_choice import tiny_gpt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHOICES = ["getcwd", "chdir", "listdir"]
CONTEXT = "Return the current working directory."


@pytest.fixture
def chooser(alice, eager):
    """A GPT-1 multiple-choice checkpoint of alice's: 4 steps on the demo dataset (the run runs at once)."""
    from webapp.datasets.services import dataset_create_demo
    from webapp.jobs.models import JobStatus
    from webapp.runs import services
    from webapp.runs.models import RunStatus

    dataset = dataset_create_demo(owner=alice, name="multiple_choice")
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    run = services.finetune_create(owner=alice, checkpoint=tiny_gpt(alice), dataset=dataset, training=dict(
        max_length=32, max_steps=4, batch_size=8, lr=3e-3, warmup_ratio=0.0, eval_every=4))
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run.checkpoints.order_by("step").last()


def test_choose_shows_each_choices_probability(chooser, alice_cookie, live_server_page, shots):
    from django.db import connections

    from webapp.explorer import services

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={chooser.id}")
    assert page.is_visible("#choose") and page.is_hidden("#classify") and page.is_hidden("#choose-result")
    page.fill("#id_choose_context", CONTEXT)
    page.fill("#id_choose_choices", "\n".join(CHOICES))
    page.evaluate("() => { window.samePage = true; }")
    page.click("#choose-button")
    page.wait_for_selector("#choose-result:not([hidden]) .explorer-prob")
    assert page.evaluate("() => window.samePage === true")  # asked by the script: the form was not posted
    shown = page.eval_on_selector_all("#choose-result .explorer-prob", """rows => rows.map(r => ({
        label: r.dataset.label, percent: r.querySelector('b').textContent, width: r.querySelector('.explorer-meter > div').style.width,
        predicted: r.classList.contains('predicted')}))""")
    expected = services.choose(checkpoint=chooser, context=CONTEXT, choices=CHOICES)
    assert [row["label"] for row in shown] == [x["label"] for x in expected["labels"]]  # most likely first
    assert sorted(row["label"] for row in shown) == sorted(CHOICES)
    for row, want in zip(shown, expected["labels"]):
        assert row["percent"] == f"{100 * want['probability']:.1f}%"
        assert float(row["width"].rstrip("%")) == pytest.approx(float(row["percent"].rstrip("%")))  # its bar
        assert row["predicted"] == (want["label"] in expected["predicted"])
    assert sum(float(row["percent"].rstrip("%")) for row in shown) == pytest.approx(100, abs=0.2)
    assert f"Predicted: {expected['predicted'][0]}." in page.text_content("#choose-result")
    page.screenshot(path=str(shots / "explorer-choose.png"), full_page=True)

    page.fill("#id_choose_choices", "getcwd\ngetcwd")
    page.click("#choose-button")
    page.wait_for_function("document.querySelector('[data-error=choose]').textContent.includes("
                           "'Two of the choices are the same')")
    assert page.is_hidden("#choose-result")
    connections.close_all()  # this test's own queries ran in Playwright's loop, on a connection of their own
