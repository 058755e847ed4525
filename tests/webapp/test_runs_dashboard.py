"""The run page hands the dashboard its charts and numbers as data (trainer.charts): the page
embeds charts_for / stats_for of the run's objectives and renders one element per chart and
number from the same lists, so a metric added to the table shows up with no page change."""
from __future__ import annotations

import dataclasses

import html as html_lib
import json
import re

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_run
from trainer import charts
from trainer import objectives
from trainer.charts import ChartSpec, MetricSpec
from trainer.objectives import charts_for, encoder, stats_for
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db


def embedded(html: str, element_id: str):
    """The JSON of a {{ value|json_script:element_id }} element."""
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.DOTALL)
    assert match, f"no #{element_id} on the page"
    return json.loads(html_lib.unescape(match.group(1)))


def page(client, run) -> str:
    response = client.get(reverse("runs:detail", args=[run.id]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("family, objectives", [
    ("bert", ["mlm", "nsp"]),
    ("electra", ["mlm", "rtd"]),
    ("t5", ["span_corruption"]),
    ("elmo", ["bilm"]),
])
def test_the_page_embeds_the_charts_and_numbers_of_the_runs_objectives(alice, alice_client, family,
                                                                       objectives):
    run = make_run(alice, family=family, objectives=objectives, status=RunStatus.RUNNING)
    html = page(alice_client, run)
    assert embedded(html, "dashboard-charts") == charts_for(objectives)
    assert embedded(html, "dashboard-stats") == stats_for(objectives)
    # one element per chart, in the list's order, and one per number
    assert re.findall(r'<div class="chart" id="chart-([\w-]+)"', html) == [c["id"] for c in charts_for(objectives)]
    assert re.findall(r'data-stat="([\w-]+)"', html) == [s["id"] for s in stats_for(objectives)] + ["tokens_seen"]


def test_the_page_script_names_no_metric():
    """run_dashboard.js reads every metric key from the embedded lists (a guard against a chart
    list creeping back into the script)."""
    from django.conf import settings

    script = (settings.BASE_DIR / "static" / "js" / "run_dashboard.js").read_text()
    keys = {m.name for m in charts.COMMON_METRICS}
    keys |= {m.name for o in objectives.all() for m in o.charts}
    keys |= {s.metric for s in charts.COMMON_STATS} | {s.metric for o in objectives.all() for s in o.stats}
    keys -= {"loss"}  # the checkpoint table's train/valid loss columns: every run's total loss
    named = sorted(k for k in keys if re.search(rf"\b{k}\b", script))
    assert named == []


def test_a_metric_added_to_the_table_reaches_the_page(alice, alice_client, monkeypatch):
    """Data-driven: a toy metric on a toy chart, added to NSP's entry, is in the page's list
    and gets its element, with no change to the template or the script."""
    monkeypatch.setitem(charts.CHARTS, "toy", ChartSpec("toy", "Toy metric (made up)", order=85, scale="log"))
    monkeypatch.setattr(encoder, "NSP", dataclasses.replace(encoder.NSP, charts=encoder.NSP.charts + (
        MetricSpec("toy_metric", "toy", chart="toy", splits=("valid",), color="#123456"),)))
    run = make_run(alice, objectives=["mlm", "nsp"], status=RunStatus.RUNNING)
    html = page(alice_client, run)
    toy = next(c for c in embedded(html, "dashboard-charts") if c["id"] == "toy")
    assert toy == {"id": "toy", "title": "Toy metric (made up)", "unit": "", "scale": "log",
                   "y2_title": "", "per_token": False, "series": [{"metric": "toy_metric", "label": "validation", "split": "valid",
                                               "unit": "", "color": "#123456", "axis": "y", "transform": ""}]}
    assert 'id="chart-toy"' in html
    # ... and only for runs with that objective
    other = make_run(alice, objectives=["mlm"], status=RunStatus.RUNNING)
    assert 'id="chart-toy"' not in page(alice_client, other)


def test_a_run_of_an_objective_the_table_no_longer_knows_still_opens(alice, alice_client):
    run = make_run(alice, objectives=["mlm", "retired_objective"], status=RunStatus.SUCCEEDED)
    html = page(alice_client, run)
    assert embedded(html, "dashboard-charts") == charts_for(["mlm"])
