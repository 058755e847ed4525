"""The run page in the system Chromium (issue 21, point 6): a series of one point is drawn with a
marker, a legend never sits on its chart's title, the "queued" message goes once the run trains,
and a number a live update writes has the same thousands separators as the page's own.

Django serves the page from a thread of this process (pytest-django's live_server); the run's
websocket is a stand-in that says the run now trains."""
from __future__ import annotations

import json

import pytest

from tests.webapp.runs_helpers import make_run
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued_run(alice):
    """A run shown as queued, with one training point logged (its first) and one validation."""
    run = make_run(alice, objectives=["mlm", "nsp"], status=RunStatus.QUEUED, max_steps=20, tokens_seen=140031)
    MetricPoint.objects.create(run=run, step=1, split="train", values={
        "loss": 7.5, "mlm_acc": 0.1, "nsp_acc": 0.5, "lr": 1e-4, "grad_norm": 2.0, "tokens_per_s": 14269.4,
        "memory_mb": 300.0})
    MetricPoint.objects.create(run=run, step=1, split="valid", values={"loss": 7.0, "mlm_acc": 0.12, "nsp_acc": 0.5})
    return run


def boxes_overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_one_point_a_clear_legend_and_the_queued_message_going(queued_run, alice_cookie, live_server_page, shots,
                                                               monkeypatch):
    # The clone below stays queued whatever the broker does (this test is about the page, not the
    # queue): a clone that a worker or a broker error ended at once would rightly drop the message.
    monkeypatch.setattr("webapp.runs.services.enqueue", lambda run: None)
    sockets = []

    def socket(ws):  # the run's websocket: the run is still queued; the test says when it trains
        sockets.append(ws)
        ws.send(json.dumps({"type": "hello", "status": "queued", "status_label": "Queued", "step": 0,
                            "max_steps": 20, "error": "", "cancel_requested": False, "finished": False}))

    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.route_web_socket("**/ws/runs/**", socket)
    page.goto(f"/runs/{queued_run.id}/")
    page.wait_for_function("() => { const el = document.getElementById('chart-loss');"
                           " return el && el.data && el.data[0].x.length === 1; }")

    # one point a series: markers, so that the chart does not look empty
    modes = page.evaluate("() => document.getElementById('chart-loss').data.map(t => [t.x.length, t.mode])")
    assert modes == [[1, "lines+markers"], [1, "lines+markers"]]

    # the legend has a row of its own under the title: it covers no part of it
    title = page.locator("#chart-loss .gtitle").bounding_box()
    legend = page.locator("#chart-loss .legend").bounding_box()
    assert title and legend and not boxes_overlap(title, legend), (title, legend)

    # whole numbers with thousands separators, the page's own and the script's alike
    assert page.text_content('[data-stat="tokens_seen"]').strip() == "140,031"
    assert page.text_content('[data-stat="tokens_per_s"]').strip() == "14,269"
    page.screenshot(path=str(shots / "dashboard-one-point.png"), full_page=True)

    # "… queued …" stays while the run waits, and goes once it trains
    page.click("form[action$='/clone/'] button")
    page.wait_for_url(lambda url: str(queued_run.id) not in url)
    page.wait_for_function("() => document.getElementById('ws-state').textContent === 'Live.'")
    clone = Run.objects.exclude(pk=queued_run.pk).get()
    assert clone.status == RunStatus.QUEUED, (clone.status, clone.error)
    assert "queued on the" in page.text_content(".messages .msg.run-queued")
    sockets[-1].send(json.dumps({"type": "status", "status": "running", "status_label": "Running", "step": 0,
                                 "max_steps": 20, "error": "", "cancel_requested": False, "finished": False}))
    page.wait_for_function("() => !document.querySelector('.messages .msg.run-queued')")
    assert page.is_hidden("#run-note")
    sockets[-1].send(json.dumps({"type": "heartbeat", "step": 3, "tokens_seen": 1234567}))
    page.wait_for_function("() => document.querySelector('[data-stat=tokens_seen]').textContent === '1,234,567'")


def test_no_legend_sits_on_its_charts_title(alice, alice_cookie, live_server_page, shots):
    """ELECTRA's loss chart has four long legend names ("discriminator (validation)", ...): beside
    the title they ran over it; in their own row they cover no title."""
    run = make_run(alice, family="electra", objectives=["mlm", "rtd"], status=RunStatus.SUCCEEDED, max_steps=20)
    for step in (5, 10):
        MetricPoint.objects.create(run=run, step=step, split="train", values={
            "loss": 8.0 / step, "mlm_loss": 7.0, "rtd_loss": 0.5, "mlm_acc": 0.1, "rtd_precision": 0.5,
            "rtd_recall": 0.4, "rtd_acc": 0.9, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 900.0})
        MetricPoint.objects.create(run=run, step=step, split="valid", values={
            "loss": 7.5, "mlm_loss": 7.1, "rtd_loss": 0.6, "mlm_acc": 0.1, "rtd_precision": 0.5, "rtd_recall": 0.4})
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.route_web_socket("**/ws/runs/**", lambda ws: None)
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => { const el = document.getElementById('chart-electra_loss');"
                           " return el && el.data && el.data[0].x.length === 2; }")
    checked = 0
    for chart in page.locator("#charts .chart").all():
        title, legend = chart.locator(".gtitle"), chart.locator(".legend")
        if not legend.count() or not title.count():
            continue
        a, b = title.bounding_box(), legend.bounding_box()
        assert not boxes_overlap(a, b), (chart.get_attribute("id"), a, b)
        step = chart.locator(".xtitle")  # nor the x axis's title
        assert not step.count() or not boxes_overlap(step.bounding_box(), b), (chart.get_attribute("id"), b)
        checked += 1
    assert checked >= 3  # loss, the generator/discriminator losses, the RTD scores
    page.screenshot(path=str(shots / "dashboard-legends.png"), full_page=True)


def test_compare_shows_the_tokenizer_note_only_for_per_token_metrics(alice, alice_cookie, live_server_page):
    from tests.webapp.runs_helpers import make_data

    first = make_run(alice, status=RunStatus.SUCCEEDED, name="first")
    corpus, tokenizer = make_data(alice, name="second")
    second = make_run(alice, status=RunStatus.SUCCEEDED, name="second", corpus=corpus, tokenizer=tokenizer)
    for run in (first, second):
        MetricPoint.objects.create(run=run, step=10, split="train", values={"loss": 7.0, "lr": 1e-4, "eta_s": 3.0})
        MetricPoint.objects.create(run=run, step=10, split="valid", values={"loss": 6.5, "perplexity": 665.1})
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/compare/?run={first.id}&run={second.id}")
    page.wait_for_function("() => { const el = document.getElementById('compare-chart'); return el && el.data; }")
    options = page.eval_on_selector_all("#compare-metric option", "els => els.map(e => e.textContent)")
    assert "perplexity (validation)" in options and not any("eta_s" in o for o in options)
    assert page.is_visible("#compare-tokenizer-note")  # the first choice: the validation perplexity
    assert page.evaluate("() => document.getElementById('compare-chart').data[0].mode") == "lines+markers"
    page.select_option("#compare-metric", label="Learning rate (training)")
    assert page.is_hidden("#compare-tokenizer-note")
    modes = page.evaluate("() => document.getElementById('compare-chart').data.map(t => t.mode)")
    assert modes == ["lines+markers", "lines+markers"]  # one training point each: markers
    page.select_option("#compare-metric", label="Loss (training)")
    assert page.is_visible("#compare-tokenizer-note")


def test_the_confusion_matrix_never_covers_the_per_class_header(alice, alice_cookie, live_server_page):
    """Issue 31, point 5: with five classes the matrix is 340 px tall; its box grows with it, and the
    per-class table's header stays below it, visible."""
    from django.conf import settings
    from pathlib import Path

    from webapp.runs.models import RunKind

    labels = ["calm", "mild", "storm", "gale", "fog"]
    run = make_run(alice, status=RunStatus.SUCCEEDED, kind=RunKind.FINETUNE, objectives=["classification"],
                   max_steps=10, current_step=10)
    folder = Path(settings.STORAGE_ROOT) / "runs" / str(run.id)
    folder.mkdir(parents=True, exist_ok=True)
    matrix = [[5 if i == j else 1 for j in range(5)] for i in range(5)]
    (folder / "test_report.json").write_text(json.dumps({
        "level": "label", "confusion": {"labels": labels, "matrix": matrix},
        "per_class": [{"label": c, "precision": 0.6, "recall": 0.6, "f1": 0.6, "support": 9} for c in labels]}))
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{run.id}/")
    page.wait_for_function("() => { const el = document.getElementById('confusion-matrix'); "
                           "return el && el.data && el.data.length; }")
    seen = page.evaluate("""() => {
        const chart = document.getElementById('confusion-matrix'), head = document.querySelector('#per-class-table thead');
        const svg = chart.querySelector('.main-svg').getBoundingClientRect(), box = chart.getBoundingClientRect();
        const top = head.getBoundingClientRect().top;
        head.scrollIntoView();
        const at = head.getBoundingClientRect();
        const hit = document.elementFromPoint(at.left + 20, at.top + at.height / 2);
        return { svgHeight: svg.height, svgBottom: svg.bottom, boxBottom: box.bottom, headTop: top,
                 covered: !head.contains(hit) }; }""")
    assert seen["svgHeight"] >= 340 and seen["svgBottom"] <= seen["boxBottom"] + 1, seen
    assert seen["boxBottom"] <= seen["headTop"] and not seen["covered"], seen
