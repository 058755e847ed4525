"""Adding an objective takes its own module, its test and one registration line.

This file is all three: it defines a toy objective (its collator, step and chart entries are
real ones, reused), registers it with one patched line of trainer.objectives.REGISTRY, and sees
it in the launch form's schema, accepted by the run API's validation (and refused for a family
it does not declare), trained into a real batch and step, and charted on the run's dashboard.
"""
from __future__ import annotations

import json
import re

import pytest
import torch

from tests.webapp.runs_helpers import make_data, make_run
from trainer import objectives
from trainer.charts import ChartSpec, MetricSpec
from trainer.objectives.base import Objective
from trainer.objectives.encoder import ALL_UNITS, MaskedBatch, MLMCollator, PreTrainingStep
from trainer.objectives.examples import Example, SpecialIds
from webapp.runs import launch
from webapp.runs.models import Run, RunStatus


class ToyStep(PreTrainingStep):
    """MLM's step, plus a made-up metric: the share of masked positions in the batch."""

    def __call__(self, batch: MaskedBatch, *, train: bool):
        out = super().__call__(batch, train=train)
        masked = (batch.mlm_labels != -100).sum()
        out.ratios["toy_share"] = (masked, float(batch.attention_mask.sum()))
        return out


TOY = Objective(
    name="toy",
    label="Toy objective (a test's)",
    help="MLM, also reporting the share of masked tokens.",
    collator=MLMCollator, step=ToyStep, units=ALL_UNITS, requires=("mlm",), combines=("mlm",),
    metrics=("toy_share",),
    charts=(MetricSpec("toy_share", "masked share", chart="toy"),),
    chart_specs=(ChartSpec("toy", "Share of masked tokens (toy)", order=87, scale="percent"),),
    families=("bert",),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(objectives.REGISTRY, "toy", f"{__name__}:TOY")  # the one registration line
    launch.registry_json.cache_clear()
    yield
    launch.registry_json.cache_clear()


def test_the_launch_form_offers_it(registered):
    form = launch.registry_json()
    assert form["objectives"]["toy"] == {"label": "Toy objective (a test's)",
                                         "help": "MLM, also reporting the share of masked tokens.",
                                         "metrics": ["toy_share"]}
    bert = next(a for a in form["families"] if a["name"] == "bert")
    assert "toy" in bert["objectives"] and ["mlm", "toy"] in bert["allowed_objective_sets"]
    gpt = next(a for a in form["families"] if a["name"] == "gpt")
    assert "toy" not in gpt["objectives"]


def test_the_api_accepts_it_for_its_family_only(registered, alice, alice_api, enqueued):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "objectives": ["mlm", "toy"]},
                              format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["objectives"] == ["mlm", "toy"]
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "objectives": ["toy"]}, format="json")
    assert response.status_code == 400 and "needs the Masked language modelling (MLM) objective" in \
        response.json()["error"]
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "family": "roberta",
                                             "objectives": ["mlm", "toy"]}, format="json")
    assert response.status_code == 400 and "RoBERTa cannot be trained with Toy objective" in response.json()["error"]
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "objectives": ["mlm", "nsp", "toy"]},
                              format="json")  # NSP and the toy objective each extend MLM: no one trains both
    assert response.status_code == 400 and "cannot combine the objectives mlm, nsp, toy" in response.json()["error"]
    assert Run.objects.count() == 1


def test_it_trains_a_batch_through_its_own_collator_and_step(registered):
    from models_lib.families.bert import BertConfig, BertForPreTraining
    from trainer.config import RunConfig

    lead = objectives.resolve(["mlm", "toy"])
    assert lead is TOY
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=64, special=(1,))
    collator = lead.build_collator(special=special, seq_len=16, seed=1)
    batch = collator([Example(uid=i, variant=0, a=torch.arange(5, 17).numpy() + i) for i in range(3)])
    model = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=64, hidden_size=64, num_heads=2,
                                                      num_layers=1))
    out = lead.step(RunConfig(objectives=["mlm", "toy"]), model, "cpu")(batch, train=True)
    hits, total = out.ratios["toy_share"]
    assert out.loss.requires_grad and 0 < int(hits) < total


def test_the_dashboard_charts_it(registered, alice, alice_client):
    charts = objectives.charts_for(["mlm", "toy"])
    toy = next(c for c in charts if c["id"] == "toy")
    assert toy["title"] == "Share of masked tokens (toy)" and toy["scale"] == "percent"
    assert [(s["metric"], s["split"]) for s in toy["series"]] == [("toy_share", "train"), ("toy_share", "valid")]
    run = make_run(alice, objectives=["mlm", "toy"], status=RunStatus.RUNNING)
    html = alice_client.get(f"/runs/{run.id}/").content.decode()
    embedded = json.loads(re.search(r'<script id="dashboard-charts" type="application/json">(.*?)</script>',
                                    html, re.S).group(1))
    assert "toy" in [c["id"] for c in embedded] and 'id="chart-toy"' in html


def test_the_explorer_offers_a_pair_objectives_tools_by_its_head(monkeypatch, alice, alice_client):
    """A sentence-pair toy (tests/trainer/test_plugin_objective.py: SOP's head on pairs of its own) is
    offered the sentence-order tool through its head, not the next-sentence one, and fills masks
    through MLM."""
    from django.urls import reverse

    from tests.webapp.runs_helpers import make_checkpoint

    monkeypatch.setitem(objectives.REGISTRY, "toy_order", "tests.trainer.test_plugin_objective:TOY")
    run = make_run(alice, objectives=["mlm", "toy_order"], status=RunStatus.SUCCEEDED)
    checkpoint = make_checkpoint(run, step=10)
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    option = re.search(rf'<option value="{checkpoint.id}"[^>]*>', html).group(0)
    assert 'data-pair="sop"' in option and 'data-nsp="0"' in option and 'data-mlm="1"' in option
