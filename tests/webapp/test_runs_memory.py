"""Transformer-XL and XLNet from the launch form: their memory length (a model field) and
XLNet's K, a real run of each through the worker's code with a falling loss on the test corpus
(the demo corpus's docstrings), and the dashboard's chart of perplexity with and without memory."""
from __future__ import annotations

import numpy as np
import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_run
from tests.webapp.test_runs_seq import post_form, real_tokenizer
from webapp.runs import execution
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db

FORM = {"transfo_xl": dict(family="transfo_xl", preset="transfo-xl-tiny", objectives=["xl_lm"], mem_len=32),
        "xlnet": dict(family="xlnet", preset="xlnet-tiny", objectives=["plm"], mem_len=32, plm_k=7)}


@pytest.mark.parametrize("family", ["transfo_xl", "xlnet"])
def test_the_form_launches_a_run_that_trains_with_a_falling_loss(alice, alice_client, enqueued, family):
    tokenizer = real_tokenizer(alice, "wordpiece")
    steps = 40
    response = post_form(alice_client, tokenizer, name=f"{family} run", max_steps=steps, batch_size=8, seq_len=64,
                         lr=3e-3, warmup_steps=4, schedule="linear", optimizer="", betas="", eps="", eval_every=steps,
                         eval_batches=2, checkpoint_every=steps, log_every=1, num_threads=1, **FORM[family])
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get(name=f"{family} run")
    assert run.config["model_overrides"] == {"mem_len": 32}
    assert run.config["plm_k"] == (7 if family == "xlnet" else 6)
    execution.run_execute(run_id=run.id)  # what the Celery task does
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    losses = [p.values["loss"] for p in MetricPoint.objects.filter(run=run, split="train").order_by("step")]
    # 1000 tokens: ln 1000 = 6.9 at first. Calibrated on the stored tokenizers (2026-12-02, two processes):
    # the mean of the last 10 steps fell by 0.926 (Transformer-XL) and 0.821 (XLNet); the bound 0.5 leaves a
    # margin of at least 0.32 and still fails a model that does not learn.
    assert len(losses) == steps and np.mean(losses[-10:]) < losses[0] - 0.5, losses
    valid = MetricPoint.objects.get(run=run, split="valid", step=steps).values
    assert {"perplexity", "perplexity_no_memory"} <= set(valid)


def test_the_form_refuses_a_memory_out_of_bounds_on_its_field(alice, alice_client, enqueued):
    tokenizer = real_tokenizer(alice, "wordpiece")
    response = post_form(alice_client, tokenizer, **{**FORM["xlnet"], "mem_len": 10_000})
    assert response.status_code == 200
    assert "4096" in " ".join(response.context["form"].errors.get("mem_len", []))


@pytest.mark.parametrize("family,objectives", [("transfo_xl", ["xl_lm"]), ("xlnet", ["plm"])])
def test_the_dashboard_charts_perplexity_with_and_without_memory(alice, alice_client, family, objectives):
    run = make_run(alice, family=family, objectives=objectives, status=RunStatus.RUNNING)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="chart-memory_perplexity"' in html and 'data-stat="perplexity_no_memory"' in html
