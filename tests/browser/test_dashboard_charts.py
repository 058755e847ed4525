"""The dashboard draws whatever chart list the server hands it, in the system Chromium.

Django serves the pages from a thread of this process (pytest-django's live_server), so the
chart table can be monkeypatched; the run's websocket is a stand-in that plays a running run's
events. A toy metric added to the table gets a chart from the REST history, grows from a live
websocket event, and the numbers above the charts follow the embedded list too; ELECTRA's right
axis, colours and dotted validation lines and T5's exp-of-the-loss perplexity come from the list."""
from __future__ import annotations

import json
import math

import dataclasses

import pytest

from tests.webapp.runs_helpers import make_run
from trainer import charts
from trainer.objectives import encoder
from trainer.charts import ChartSpec, MetricSpec
from webapp.runs.models import MetricPoint, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRAIN = {"nsp_acc": 0.5, "grad_norm": 2.0, "memory_mb": 300.0, "eta_s": 30.0}


@pytest.fixture
def toy_table(monkeypatch):
    """NSP reports a made-up metric, drawn on a chart of its own (log scale)."""
    monkeypatch.setitem(charts.CHARTS, "toy", ChartSpec("toy", "Toy metric (made up)", order=85, scale="log"))
    monkeypatch.setattr(encoder, "NSP", dataclasses.replace(encoder.NSP, charts=encoder.NSP.charts + (
        MetricSpec("toy_metric", "toy", chart="toy"),)))


@pytest.fixture
def toy_run(alice):
    """A running MLM + NSP run with four logged training steps and one validation."""
    run = make_run(alice, objectives=["mlm", "nsp"], status=RunStatus.RUNNING, current_step=4, max_steps=20)
    for step in range(1, 5):
        MetricPoint.objects.create(run=run, step=step, split="train", values={
            **TRAIN, "loss": 8 - step, "mlm_acc": 0.1 * step, "toy_metric": 10.0 ** step, "lr": 1e-4 * step,
            "tokens_per_s": 1234.5})
    MetricPoint.objects.create(run=run, step=4, split="valid", values={
        "loss": 4.5, "mlm_acc": 0.42, "nsp_acc": 0.6, "perplexity": 90.0, "toy_metric": 5000.0})
    return run


def chart(page, chart_id: str) -> dict:
    return page.evaluate("""id => { const el = document.getElementById(id);
        return { title: el.layout.title.text, yaxis: el.layout.yaxis.type || null,
                 traces: el.data.map(t => ({ name: t.name, x: Array.from(t.x), y: Array.from(t.y) })) }; }""",
                         f"chart-{chart_id}")


def test_a_metric_added_to_the_table_is_charted_from_history_and_live(toy_table, toy_run, alice_cookie,
                                                                     live_server_page, shots):
    def socket(ws):  # the run's websocket: hello, then one live training step
        ws.send(json.dumps({"type": "hello", "status": "running", "status_label": "Running", "step": 4,
                            "max_steps": 20, "error": "", "cancel_requested": False, "finished": False}))
        ws.send(json.dumps({"type": "metrics", "step": 5, "split": "train", "values": {
            **TRAIN, "loss": 2.5, "mlm_acc": 0.55, "toy_metric": 1e5, "lr": 5e-4, "tokens_per_s": 2000.0,
            "mfu": 0.123, "fill": 0.94}}))

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.route_web_socket(f"**/ws/runs/{toy_run.id}/?after=*", socket)  # the page asks for a replay
    page.goto(f"/runs/{toy_run.id}/")

    page.wait_for_function("""() => { const el = document.getElementById('chart-toy');
        return el && el.data && el.data[0].x.length === 5; }""")
    toy = chart(page, "toy")
    assert toy["title"] == "Toy metric (made up)" and toy["yaxis"] == "log"
    assert toy["traces"] == [{"name": "train", "x": [1, 2, 3, 4, 5], "y": [10.0, 100.0, 1000.0, 10000.0, 1e5]},
                             {"name": "validation", "x": [4], "y": [5000.0]}]
    ids = page.eval_on_selector_all("#charts .chart", "els => els.map(e => e.id)")
    assert ids == [f"chart-{c}" for c in ("loss", "mlm_acc", "nsp_acc", "toy", "lr", "grad_norm", "tokens_per_s",
                                          "mfu", "fill", "memory_mb")]
    assert chart(page, "loss")["traces"][0]["y"] == [7, 6, 5, 4, 2.5]
    # the numbers: the newest point of the first split that has the metric
    assert page.inner_text('[data-stat="loss"]') == "2.5000"
    assert page.inner_text('[data-stat="valid_loss"]') == "4.5000"
    assert page.inner_text('[data-stat="perplexity"]') == "90.0"
    assert page.inner_text('[data-stat="mlm_acc"]') == "42.0%"
    assert page.inner_text('[data-stat="tokens_per_s"]') == "2,000"
    assert page.inner_text('[data-stat="mfu"]') == "12.3%"  # live, from the websocket's step 5
    assert chart(page, "mfu")["traces"][0]["y"] == [0.123]
    assert page.inner_text('[data-stat="fill"]') == "94%"  # real tokens / positions computed
    assert chart(page, "fill")["traces"][0]["y"] == [0.94]
    assert page.inner_text("#run-step") == "step 5 / 20"
    page.screenshot(path=str(shots / "dashboard-toy-metric.png"), full_page=True)


@pytest.fixture
def electra_run(alice):
    run = make_run(alice, family="electra", preset="electra-small", objectives=["mlm", "rtd"],
                   status=RunStatus.SUCCEEDED, current_step=2, max_steps=2)
    for step in (1, 2):
        MetricPoint.objects.create(run=run, step=step, split="train", values={
            "loss": 9.0, "mlm_loss": 6.0 - step, "rtd_loss": 0.1 * step, "mlm_acc": 0.1, "rtd_precision": 0.5,
            "rtd_recall": 0.25, "rtd_acc": 0.9, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 10.0, "memory_mb": 5.0})
    MetricPoint.objects.create(run=run, step=2, split="valid", values={
        "loss": 8.0, "mlm_loss": 4.5, "rtd_loss": 0.3, "mlm_acc": 0.2, "rtd_precision": 0.6, "rtd_recall": 0.3})
    return run


@pytest.fixture
def t5_run(alice):
    run = make_run(alice, family="t5", preset="t5-tiny", objectives=["span_corruption"],
                   status=RunStatus.SUCCEEDED, current_step=2, max_steps=2)
    for step in (1, 2):
        MetricPoint.objects.create(run=run, step=step, split="train", values={
            "loss": 3.0, "lm_loss": float(step), "lm_acc": 0.1, "lr": 1e-2, "grad_norm": 1.0, "tokens_per_s": 10.0,
            "memory_mb": 5.0})
    MetricPoint.objects.create(run=run, step=2, split="valid", values={"loss": 2.5, "lm_acc": 0.2, "perplexity": 12.0})
    return run


def traces(page, chart_id: str) -> list[dict]:
    return page.evaluate("""id => document.getElementById(id).data.map(t => ({
        name: t.name, y: Array.from(t.y), axis: t.yaxis || "y", color: t.line.color,
        dash: t.line.dash || "solid" }))""",
                         f"chart-{chart_id}")


def test_electra_charts_the_discriminator_on_its_own_axis(electra_run, alice_cookie, live_server_page):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{electra_run.id}/")
    page.wait_for_function("() => { const el = document.getElementById('chart-rtd'); return el && el.data"
                           " && el.data[0].y.length === 2; }")
    assert traces(page, "electra_loss") == [
        {"name": "generator (train)", "y": [5.0, 4.0], "axis": "y", "color": charts.BLUE, "dash": "solid"},
        {"name": "generator (validation)", "y": [4.5], "axis": "y", "color": charts.BLUE, "dash": "dot"},
        {"name": "discriminator (train)", "y": [0.1, 0.2], "axis": "y2", "color": charts.GREEN, "dash": "solid"},
        {"name": "discriminator (validation)", "y": [0.3], "axis": "y2", "color": charts.GREEN, "dash": "dot"}]
    assert page.evaluate("() => document.getElementById('chart-electra_loss').layout.yaxis2.title.text") == \
        "discriminator loss"
    assert [t["name"] for t in traces(page, "rtd")] == [
        "precision", "recall", "accuracy", "precision (validation)", "recall (validation)"]
    assert page.evaluate("() => document.getElementById('chart-rtd').layout.yaxis.tickformat") == ".2~%"


def test_t5_charts_training_perplexity_as_exp_of_the_logged_loss(t5_run, alice_cookie, live_server_page):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{t5_run.id}/")
    page.wait_for_function("() => { const el = document.getElementById('chart-perplexity'); return el && el.data"
                           " && el.data[0].y.length === 2; }")
    train, valid = traces(page, "perplexity")
    assert train["name"] == "train" and train["y"] == pytest.approx([math.e, math.e ** 2])
    assert valid == {"name": "validation", "y": [12.0], "axis": "y", "color": "#e0692b", "dash": "solid"}
    assert page.evaluate("() => document.getElementById('chart-perplexity').layout.yaxis.type") == "log"
    assert page.inner_text('[data-stat="lm_acc"]') == "20.0%"
    assert page.inner_text("#ws-state") == "The run has finished."
