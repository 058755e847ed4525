"""A text-to-text run's Samples panel follows the run's websocket in the system Chromium: a
validation's samples replace the ones the page was rendered with, as text (markup in a sample is
shown, never run)."""
from __future__ import annotations

import json

import pytest

from tests.webapp.runs_helpers import make_run
from webapp.runs.models import RunKind, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<img src=x onerror="window.hacked=1"><b>bold</b>'


@pytest.fixture
def t2t_run(alice):
    run = make_run(alice, kind=RunKind.FINETUNE, objectives=["text_to_text"], status=RunStatus.RUNNING,
                   current_step=10, max_steps=20, name="summaries")
    run.folder.mkdir(parents=True, exist_ok=True)
    (run.folder / "samples.json").write_text(json.dumps({"validations": [
        {"step": 10, "samples": [{"input": "rendered input", "generated": "rendered output", "reference": "ref"}]}]}))
    return run


def test_live_samples_replace_the_rendered_ones_as_text(t2t_run, alice_cookie, live_server_page):
    def socket(ws):  # the run's websocket: hello, then the next validation's samples
        ws.send(json.dumps({"type": "hello", "status": "running", "status_label": "Running", "step": 10,
                            "max_steps": 20, "error": "", "cancel_requested": False, "finished": False}))
        ws.send(json.dumps({"type": "samples", "step": 20, "samples": [
            {"input": HOSTILE, "generated": "a new summary", "reference": "the summary"},
            {"input": "second", "generated": "", "reference": "two"}]}))

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.route_web_socket(f"**/ws/runs/{t2t_run.id}/?after=*", socket)  # the page asks for a replay
    page.goto(f"/runs/{t2t_run.id}/")
    page.wait_for_function("() => document.getElementById('samples-step').textContent.includes('20')")
    rows = page.eval_on_selector_all("#samples-body tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert rows == [[HOSTILE, "a new summary", "the summary"], ["second", "", "two"]]
    assert page.eval_on_selector_all("#samples-body img, #samples-body b", "els => els.length") == 0
    assert page.evaluate("() => window.hacked === undefined")
    assert page.is_hidden("#samples-empty")
