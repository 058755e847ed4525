"""Comparing runs (issue 9, section 5): a labelled dataset's leaderboard of fine-tuning runs (its
page and the API, sortable, best first) and the compare view of two to six runs of any kind
(settings diff, curves overlaid), each only over the user's own runs."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs.models import MetricPoint, Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


def finetune_run(owner, dataset, base, name, *, lr, valid, test=None) -> Run:
    """A finished fine-tuning run row with validation accuracies `valid` (one per 10 steps) and test metrics."""
    config = {"checkpoint": "/x", "dataset": "/y", "task": "classification", "lr": lr, "max_steps": 30,
              "batch_size": 16, "llrd": 1.0}
    run = Run.objects.create(owner=owner, name=name, kind=RunKind.FINETUNE, dataset=dataset, base_checkpoint=base,
                             family="bert", preset="tiny", objectives=["classification"], config=config,
                             status=RunStatus.SUCCEEDED, max_steps=30, current_step=30)
    for i, accuracy in enumerate(valid, start=1):
        MetricPoint.objects.create(run=run, step=10 * i, split="valid", values={"loss": 1.0 / i, "accuracy": accuracy})
        MetricPoint.objects.create(run=run, step=10 * i, split="train", values={"loss": 1.2 / i, "lr": lr})
    if test is not None:
        MetricPoint.objects.create(run=run, step=30, split="test", values=test)
    return run


@pytest.fixture
def board(alice, bob):
    dataset = Dataset.objects.create(owner=alice, name="reviews", status=JobStatus.READY, task="classification",
                                     labels=["neg", "pos"])
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20)
    runs = {
        "low": finetune_run(alice, dataset, base, "low", lr=1e-4, valid=[0.5, 0.6], test={"accuracy": 0.55, "mcc": 0.1}),
        "high": finetune_run(alice, dataset, base, "high", lr=1e-3, valid=[0.7, 0.9, 0.8],
                             test={"accuracy": 0.85, "mcc": 0.7}),
        "running": finetune_run(alice, dataset, base, "running", lr=5e-4, valid=[0.65]),
    }
    other = Dataset.objects.create(owner=alice, name="other", status=JobStatus.READY, task="classification")
    finetune_run(alice, other, base, "elsewhere", lr=1e-3, valid=[0.99], test={"accuracy": 0.99})
    return dataset, runs


def test_the_leaderboard_ranks_the_dataset_runs_and_names_what_differs(alice_client, alice_api, board):
    dataset, runs = board
    body = alice_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).json()
    assert body["primary"] == "accuracy" and body["higher_is_better"] is True
    assert [r["name"] for r in body["rows"]] == ["high", "low", "running"]  # by test accuracy; none last
    high = body["rows"][0]
    assert high["best_valid"] == 0.9 and high["best_valid_step"] == 20 and high["test"]["mcc"] == 0.7
    assert high["checkpoint"] == "tiny bert @ step 20" and high["dashboard_url"] == reverse("runs:detail",
                                                                                            args=[runs["high"].id])
    assert body["settings"] == ["lr"] and high["settings"] == {"lr": 1e-3}  # max_steps etc. are the same
    assert body["test_metrics"] == ["accuracy", "mcc"]

    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="leaderboard-table"' in html and "js/sortable.js" in html and "elsewhere" not in html
    order = [html.index(f'data-run="{runs[n].id}"') for n in ("high", "low", "running")]
    assert order == sorted(order)
    assert 'data-test="accuracy"' in html and f'action="{reverse("runs:compare")}"' in html


def test_the_leaderboard_is_the_owners_only(alice, bob, bob_api, bob_client, board):
    dataset, runs = board
    assert bob_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).status_code == 404
    assert bob_client.get(reverse("datasets:detail", args=[dataset.id])).status_code == 404
    # bob's own dataset lists none of alice's runs, even one pointing at it
    his = Dataset.objects.create(owner=bob, name="his", status=JobStatus.READY, task="classification")
    runs["low"].dataset = his
    runs["low"].save()
    assert bob_api.get(reverse("api-dataset-leaderboard", args=[his.id])).json()["rows"] == []


def test_compare_overlays_the_shared_metrics_and_diffs_the_settings(alice, alice_client, alice_api, board):
    _, runs = board
    pretrain = make_run(alice, status=RunStatus.SUCCEEDED, name="pre")
    MetricPoint.objects.create(run=pretrain, step=10, split="train", values={"loss": 7.0, "lr": 1e-4})
    url = reverse("api-runs-compare") + f"?run={runs['high'].id}&run={runs['low'].id}"
    body = alice_api.get(url).json()
    assert [r["name"] for r in body["runs"]] == ["high", "low"]
    lr = next(row for row in body["settings"] if row["name"] == "lr")
    assert lr == {"name": "lr", "label": "lr", "values": [1e-3, 1e-4], "differs": True, "lead": False}
    assert body["settings"][len(LEAD)]["name"] == "lr"  # after the leading rows, the differing settings first
    assert not next(row for row in body["settings"] if row["name"] == "max_steps")["differs"]
    assert [row["name"] for row in body["settings"] if row["name"] in ("checkpoint", "dataset")] == ["dataset"]
    accuracy = next(m for m in body["metrics"] if m["metric"] == "accuracy" and m["split"] == "valid")
    assert [c["values"] for c in accuracy["curves"]] == [[0.7, 0.9, 0.8], [0.5, 0.6]]
    assert accuracy["curves"][0]["steps"] == [10, 20, 30]

    # any kind: a pre-training run shares only the training loss and lr with them
    mixed = alice_api.get(reverse("api-runs-compare") + f"?run={runs['high'].id}&run={pretrain.id}").json()
    assert {(m["split"], m["metric"]) for m in mixed["metrics"]} == {("train", "loss"), ("train", "lr")}

    page = alice_client.get(reverse("runs:compare") + f"?run={runs['high'].id}&run={runs['low'].id}")
    html = page.content.decode()
    assert page.status_code == 200 and 'id="compare-chart"' in html and "js/run_compare.js" in html
    assert '<tr data-setting="lr" class="differs">' in html and 'data-setting="max_steps"' not in html
    listing = alice_client.get(reverse("runs:list")).content.decode()
    assert f'name="run" value="{pretrain.id}"' in listing and 'id="compare-button"' in listing


def test_compare_refuses_with_sentences_and_only_over_your_runs(alice, bob, alice_client, alice_api, bob_api, board):
    _, runs = board
    one = alice_api.get(reverse("api-runs-compare") + f"?run={runs['high'].id}")
    assert one.status_code == 400 and "Choose from 2 to 6 runs to compare, not 1." in one.json()["error"]
    page = alice_client.get(reverse("runs:compare"))
    assert page.status_code == 400 and "Choose from 2 to 6 runs to compare, not 0." in page.content.decode()
    many = "&".join(f"run={make_run(alice, name=f'r{i}').id}" for i in range(7))
    assert "not 7" in alice_api.get(reverse("api-runs-compare") + "?" + many).json()["error"]
    url = reverse("api-runs-compare") + f"?run={runs['high'].id}&run={runs['low'].id}"
    assert bob_api.get(url).status_code == 404
    mine = make_run(bob, name="bob's")
    mixed = reverse("runs:compare") + f"?run={runs['high'].id}&run={mine.id}"
    from django.test import Client

    bob_client = Client()
    bob_client.force_login(bob)
    assert bob_client.get(mixed).status_code == 404
    assert alice_client.get(reverse("runs:compare") + "?run=not-a-uuid&run=x").status_code == 404


# ------------------------------------------------------------------- what changed (issue 21, point 5)
LEAD = ["family", "preset", "tokenizer", "corpus", "base_checkpoint", "dataset"]


def rows(html: str) -> list[str]:
    return re.findall(r'<tr data-setting="([^"]+)"', html)


@pytest.fixture
def two_pretraining(alice):
    """Two MLM runs on two tokenizers of one corpus, with every series the trainer logs."""
    first = make_run(alice, status=RunStatus.SUCCEEDED, name="first")
    corpus, tokenizer = make_data(alice, name="second")
    second = make_run(alice, status=RunStatus.SUCCEEDED, name="second", corpus=corpus, tokenizer=tokenizer)
    for run in (first, second):
        MetricPoint.objects.create(run=run, step=10, split="train", values={
            "loss": 7.0, "mlm_acc": 0.1, "lr": 1e-4, "tokens_per_s": 900.0, "eta_s": 12.0, "progress": 0.5})
        MetricPoint.objects.create(run=run, step=10, split="valid", values={"loss": 6.5, "perplexity": 665.1})
    return first, second


def compare_page(client, *runs, everything=False):
    url = reverse("runs:compare") + "?" + "&".join(f"run={r.id}" for r in runs) + ("&settings=all" if everything else "")
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_settings_start_with_what_the_model_is_and_what_it_read(alice_client, alice_api, board, two_pretraining):
    _, runs = board
    body = alice_api.get(reverse("api-runs-compare") + f"?run={runs['high'].id}&run={runs['low'].id}").json()
    assert [row["name"] for row in body["settings"][:6]] == LEAD and all(row["lead"] for row in body["settings"][:6])
    assert [row["label"] for row in body["settings"][:6]] == ["Family", "Preset", "Tokenizer", "Corpus",
                                                                 "Base checkpoint", "Dataset"]
    assert body["settings"][4]["values"] == ["tiny bert @ step 20"] * 2 and body["settings"][5]["values"] == ["reviews"] * 2
    html = compare_page(alice_client, runs["high"], runs["low"])
    assert rows(html)[:6] == LEAD and rows(html)[6:] == ["lr"]  # the six, then only what differs

    first, second = two_pretraining
    body = alice_api.get(reverse("api-runs-compare") + f"?run={first.id}&run={second.id}").json()
    lead = {row["name"]: row for row in body["settings"][:6]}
    assert lead["family"]["values"] == ["BERT", "BERT"] and not lead["family"]["differs"]
    assert lead["tokenizer"]["differs"] and lead["tokenizer"]["values"] == [first.tokenizer.name, second.tokenizer.name]
    assert lead["base_checkpoint"]["values"] == [None, None]


def test_identical_settings_are_hidden_until_asked_for(alice_client, board):
    _, runs = board
    html = compare_page(alice_client, runs["high"], runs["low"])
    assert "max_steps" not in rows(html) and "batch_size" not in rows(html)
    toggle = re.search(r'<a href="([^"]+)" id="settings-toggle">show all settings</a>', html)
    assert toggle and "settings=all" in toggle.group(1) and "4 more are the same in every run" in html
    everything = compare_page(alice_client, runs["high"], runs["low"], everything=True)
    assert rows(everything)[:6] == LEAD and {"lr", "max_steps", "batch_size", "llrd", "task"} <= set(rows(everything))
    assert rows(everything).index("lr") < rows(everything).index("max_steps")  # the differing ones first
    assert re.search(r'id="settings-toggle">Show only what differs</a>', everything)


def test_internal_series_are_not_offered_as_metrics(alice_client, alice_api, two_pretraining):
    first, second = two_pretraining
    body = alice_api.get(reverse("api-runs-compare") + f"?run={first.id}&run={second.id}").json()
    offered = {(m["split"], m["metric"]) for m in body["metrics"]}
    assert offered == {("train", "loss"), ("train", "mlm_acc"), ("train", "lr"), ("train", "tokens_per_s"),
                       ("valid", "loss"), ("valid", "perplexity")}
    html = compare_page(alice_client, first, second)
    assert "eta_s" not in html and "progress (training)" not in html
    # offered by the names the dashboard gives them, not their keys
    labels = {m["metric"]: m["label"] for m in body["metrics"]}
    assert labels["mlm_acc"] != "mlm_acc" and labels["tokens_per_s"] != "tokens_per_s"
    assert f'>{labels["mlm_acc"]} (training)</option>' in html and ">mlm_acc (training)<" not in html


def test_a_note_says_when_per_token_metrics_come_from_different_tokenizers(alice, alice_client, alice_api,
                                                                           two_pretraining):
    first, second = two_pretraining
    body = alice_api.get(reverse("api-runs-compare") + f"?run={first.id}&run={second.id}").json()
    assert "different tokenizers" in body["tokenizer_note"] and first.tokenizer.name in body["tokenizer_note"]
    per_token = {m["metric"]: m["per_token"] for m in body["metrics"] if m["split"] == "valid"}
    assert per_token == {"loss": True, "perplexity": True}
    assert not next(m for m in body["metrics"] if m["metric"] == "lr")["per_token"]
    html = compare_page(alice_client, first, second)
    assert 'id="compare-tokenizer-note"' in html and "do not compare like for like" in html

    same = make_run(alice, status=RunStatus.SUCCEEDED, name="same", tokenizer=first.tokenizer, corpus=first.corpus)
    MetricPoint.objects.create(run=same, step=10, split="valid", values={"loss": 6.0, "perplexity": 403.4})
    body = alice_api.get(reverse("api-runs-compare") + f"?run={first.id}&run={same.id}").json()
    assert body["tokenizer_note"] == "" and not any(m["per_token"] for m in body["metrics"])
    html = compare_page(alice_client, first, same)
    assert 'id="compare-tokenizer-note"' not in html and "different tokenizers" not in html
