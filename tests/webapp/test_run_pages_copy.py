"""The words and numbers of the run pages (issue 21, point 6): no stat tile a run never fills, one
way of writing a whole number, what a run trains for in words, no server folder, the launch
button's refusal beside it, the queued message marked for the run page's script to take away."""
from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db


def page(client, url) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def classifier(alice) -> Run:
    """A fine-tuning run (text classification) of a pre-training run's checkpoint."""
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20)
    dataset = Dataset.objects.create(owner=alice, name="reviews", status=JobStatus.READY, task="classification",
                                     labels=["neg", "pos"])
    config = {"checkpoint": str(base.folder), "dataset": str(dataset.data_dir), "task": "classification",
              "lr": 1e-4, "max_steps": 30}
    return Run.objects.create(owner=alice, name="tuned", kind=RunKind.FINETUNE, dataset=dataset, base_checkpoint=base,
                              family="bert", preset="tiny", objectives=["token_classification"], config=config,
                              status=RunStatus.RUNNING, max_steps=30)


def stat_ids(html: str) -> list[str]:
    return re.findall(r'data-stat="([\w-]+)"', html)


def test_a_classifier_has_no_perplexity_tile_and_a_language_model_has(alice, alice_client, classifier):
    tuned = page(alice_client, reverse("runs:detail", args=[classifier.id]))
    assert "perplexity" not in stat_ids(tuned) and "validation perplexity" not in tuned
    assert "ft_entity_f1" in stat_ids(tuned) and "valid_loss" in stat_ids(tuned)
    pretraining = page(alice_client, reverse("runs:detail", args=[make_run(alice, objectives=["mlm"]).id]))
    assert "perplexity" in stat_ids(pretraining)


def test_whole_numbers_have_thousands_separators(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING, current_step=1200, max_steps=3000, tokens_seen=140031)
    make_checkpoint(run, step=1000)
    html = page(alice_client, reverse("runs:detail", args=[run.id]))
    assert '<b data-stat="tokens_seen">140,031</b>' in html and '<span id="run-step">step 1,200 / 3,000</span>' in html
    assert "<td>1,000</td>" in html and "140031" not in html
    listing = page(alice_client, reverse("runs:list"))
    assert 'data-role="steps">step 1,200 / 3,000</span>' in listing


def test_the_run_list_names_objectives_and_tasks_in_words(alice, alice_client, classifier):
    t5 = make_run(alice, name="t5", family="t5", objectives=["span_corruption"])
    make_run(alice, name="bert", objectives=["mlm", "nsp"])
    detail = page(alice_client, reverse("runs:detail", args=[t5.id]))
    assert "Span corruption (T5)" in detail and "SPAN_CORRUPTION" not in detail
    tuned = page(alice_client, reverse("runs:detail", args=[classifier.id]))
    assert '<p class="muted" id="run-lineage">Token classification · ' in tuned
    listing = page(alice_client, reverse("runs:list"))
    assert "SPAN_CORRUPTION" not in listing and "MLM + NSP" not in listing and "tokenclassification" not in listing
    assert "Span corruption (T5)" in listing and "Token classification" in listing
    assert "Masked language modelling (MLM) + Next sentence prediction (NSP)" in listing


def test_a_fine_tuning_runs_page_shows_no_server_folder(alice_client, classifier):
    html = page(alice_client, reverse("runs:detail", args=[classifier.id]))
    assert str(settings.STORAGE_ROOT) not in html
    assert "checkpoint: tiny bert @ step 20" in html and "dataset: reviews" in html
    # the download stays a config the command line reads
    download = alice_client.get(reverse("runs:config-yaml", args=[classifier.id])).content.decode()
    assert f"dataset: {classifier.dataset.data_dir}" in download


def test_the_launch_buttons_refusal_sits_beside_it(alice, alice_client):
    make_run(alice)  # a tokenizer to launch with
    html = page(alice_client, reverse("runs:new"))
    button = html.index('id="launch"')
    assert button < html.index('id="sentinel-warning"') < button + 400
    assert button < html.index('id="launch-blocked"') < button + 600


def test_the_queued_message_is_marked_for_the_run_page(alice, alice_client):
    run = make_run(alice, status=RunStatus.SUCCEEDED)
    response = alice_client.post(reverse("runs:clone", args=[run.id]), follow=True)
    html = response.content.decode()
    assert re.search(r'<li class="msg run-queued success">Cloned into “[^”]+”, queued on the \w+ queue.</li>', html)
