""""Compare with" in the system Chromium: with a second checkpoint chosen, the page's scripts ask
/api/explore/compare/ under the name each tool's Comparison gives (the page carries the tools'
endpoints and compare names as data, webapp.explorer.tools) and draw one column per checkpoint;
without one, they ask the tool's own endpoint and draw a single column."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pair(alice, eager):
    """(a pre-trained MLM + NSP checkpoint, another step of it, a classifier fine-tuned from it)."""
    from webapp.datasets.services import dataset_create_demo
    from webapp.jobs.models import JobStatus
    from webapp.runs import services

    run = make_run(alice, status=RunStatus.SUCCEEDED, name="tiny")
    first, second = make_checkpoint(run, step=10, real=True), make_checkpoint(run, step=20, real=True)
    dataset = dataset_create_demo(owner=alice, name="classification")
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    tuned = services.finetune_create(owner=alice, checkpoint=second, dataset=dataset, training=dict(
        max_length=32, max_steps=2, batch_size=8, lr=1e-3, warmup_ratio=0.0, eval_every=2))
    tuned.refresh_from_db()
    assert tuned.status == RunStatus.SUCCEEDED, tuned.error
    return first, second, tuned.checkpoints.order_by("step").last()


def _asked(page) -> None:
    """Record the JSON requests the page's scripts post (window.asked)."""
    page.evaluate("""() => { window.asked = []; const post = window.fetch;
        window.fetch = (url, init) => { window.asked.push({ url: String(url), body: init && init.body });
                                        return post(url, init); }; }""")


def _columns(page, box: str) -> list[str]:
    return page.eval_on_selector_all(f"{box} .explorer-column", "cells => cells.map(c => c.textContent)")


def test_compare_with_asks_the_compare_api_under_each_tools_name(pair, alice_cookie, live_server_page):
    import json

    from django.db import connections

    first, second, tuned = pair
    page = live_server_page
    page.context.add_cookies([alice_cookie])

    page.goto(f"/explore/?checkpoint={first.id}&compare={second.id}")
    _asked(page)
    page.fill("#id_text", "the [MASK] of the list .")
    page.click("button[value=fill_mask]")
    page.wait_for_selector("#fill-mask-results .explorer-columns.two")
    cells = _columns(page, "#fill-mask-results")
    assert len(cells) == 2 and cells[0].startswith("tiny @ step 10") and cells[1].startswith("tiny @ step 20")
    page.fill("#id_text_a", "The function returns a list.")
    page.fill("#id_text_b", "Each item is a string.")
    page.click("button[value=next_sentence]")
    page.wait_for_selector("#next-sentence-result:not([hidden]) .explorer-columns.two")
    asked = page.evaluate("() => window.asked")
    assert [a["url"] for a in asked] == ["/api/explore/compare/", "/api/explore/compare/"]
    assert [json.loads(a["body"])["task"] for a in asked] == ["fill-mask", "next-sentence"]

    page.select_option("#id_compare_with", "")  # one checkpoint: its own endpoint, one column
    page.click("button[value=sentence_order]")
    page.wait_for_selector("#sentence-order-result:not([hidden]) .explorer-column")
    assert len(_columns(page, "#sentence-order-result")) == 1
    assert page.evaluate("() => window.asked[2].url") == "/api/explore/sentence-order/"

    page.goto(f"/explore/?checkpoint={tuned.id}&compare={first.id}")  # explorer_downstream.js's classify
    _asked(page)
    page.fill("#id_classify_text", "Return the path of a file.")
    page.click("#classify-button")
    page.wait_for_selector("#classify-result:not([hidden]) .explorer-columns.two")
    cells = _columns(page, "#classify-result")
    assert "a pre-trained model without a task head" in cells[1]
    assert json.loads(page.evaluate("() => window.asked[0].body"))["task"] == "classify"
    connections.close_all()  # this test's own queries ran in Playwright's loop, on a connection of their own
