"""A fine-tuning run's results on its page and in the API (issue 9, section 4): the confusion
matrix and per-class table of the test split, and its predictions as CSV and JSONL downloads,
each only for the run's owner; a checkpoint row added live links to fine-tuning as the rendered
rows do."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from tests.webapp.test_runs_finetune import FAST, ready_demo, script_data, tiny_checkpoint
from webapp.runs import services
from webapp.runs.models import RunKind, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def tuned_run(alice, eager, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.finetune_create(owner=alice, checkpoint=tiny_checkpoint(alice), dataset=dataset,
                                       training=FAST)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run


def test_the_page_shows_the_confusion_matrix_the_per_class_table_and_the_downloads(alice_client, tuned_run):
    test = tuned_run.metrics.get(split="test").values
    html = alice_client.get(reverse("runs:detail", args=[tuned_run.id])).content.decode()
    assert 'id="confusion-matrix"' in html and "js/run_results.js" in html and 'id="per-class-table"' in html
    confusion = script_data(html, "confusion-data")
    labels, matrix = confusion["labels"], confusion["matrix"]
    assert labels == tuned_run.dataset.labels[:len(labels)] and len(matrix) == len(labels)
    total, right = sum(map(sum, matrix)), sum(matrix[i][i] for i in range(len(labels)))
    assert right / total == pytest.approx(test["accuracy"])
    for label in labels:
        assert f'data-class="{label}"' in html

    csv_url, jsonl_url = (reverse("runs:predictions", args=[tuned_run.id, fmt]) for fmt in ("csv", "jsonl"))
    assert csv_url in html and jsonl_url in html
    response = alice_client.get(csv_url)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == total and set(rows[0]) == {"input", "gold", "predicted", "score", "correct"}
    assert sum(r["correct"] == "True" for r in rows) == right
    flags = [r["correct"] == "True" for r in rows]
    assert flags == sorted(flags)  # the errors first
    lines = b"".join(alice_client.get(jsonl_url).streaming_content).decode().splitlines()
    assert [json.loads(line)["input"] for line in lines] == [r["input"] for r in rows]


def test_the_api_serves_the_report_and_the_predictions(alice_api, tuned_run):
    body = alice_api.get(reverse("api-run-test-report", args=[tuned_run.id])).json()
    assert body["level"] == "class" and body["metrics"]["accuracy"] == tuned_run.metrics.get(split="test").values[
        "accuracy"]
    assert sum(row["support"] for row in body["per_class"]) == sum(map(sum, body["confusion"]["matrix"]))
    assert set(body["predictions"]) == {"csv", "jsonl"}
    response = alice_api.get(body["predictions"]["jsonl"])
    first = b"".join(response.streaming_content).decode().splitlines()[0]
    assert response.status_code == 200 and json.loads(first)["predicted"]
    bad = alice_api.get(reverse("api-run-predictions", args=[tuned_run.id, "xlsx"]))
    assert bad.status_code == 404 and "as .csv or .jsonl, not .xlsx" in bad.json()["error"]


def test_only_the_owner_sees_the_results(bob_client, bob_api, tuned_run):
    for url in (reverse("runs:predictions", args=[tuned_run.id, "csv"]),
                reverse("runs:predictions", args=[tuned_run.id, "jsonl"])):
        assert bob_client.get(url).status_code == 404
    for url in (reverse("api-run-predictions", args=[tuned_run.id, "csv"]),
                reverse("api-run-test-report", args=[tuned_run.id])):
        response = bob_api.get(url)
        assert response.status_code == 404 and "not yours" in response.json()["error"]


def test_a_run_without_predictions_says_so(alice, alice_client, alice_api):
    run = make_run(alice, status=RunStatus.RUNNING, kind=RunKind.FINETUNE, name="unfinished")
    page = alice_client.get(reverse("runs:predictions", args=[run.id, "csv"]))
    assert page.status_code == 404 and "writes them when it scores its test split" in page.content.decode()
    api = alice_api.get(reverse("api-run-predictions", args=[run.id, "jsonl"]))
    assert api.status_code == 404 and "writes them when it scores its test split" in api.json()["error"]
    report = alice_api.get(reverse("api-run-test-report", args=[run.id]))
    assert report.status_code == 404 and "has not scored a test split" in report.json()["error"]
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="confusion-matrix"' not in html and 'id="predictions-links"' not in html


def test_checkpoints_added_live_link_to_fine_tuning(alice, alice_api):
    from webapp.runs.sink import checkpoint_event

    ckpt = make_checkpoint(make_run(alice, status=RunStatus.RUNNING), step=10)
    assert checkpoint_event(ckpt)["finetune_url"] == f"{reverse('runs:finetune')}?checkpoint={ckpt.id}"
    body = alice_api.get(reverse("api-run-checkpoints", args=[ckpt.run_id])).json()
    assert body[0]["finetune_url"] == f"{reverse('runs:finetune')}?checkpoint={ckpt.id}"


def test_a_checkpoint_exports_to_the_hugging_face_format_for_its_owner(alice_client, bob_client, bob_api, tuned_run,
                                                                        eager, django_capture_on_commit_callbacks):
    import zipfile

    checkpoint = tuned_run.checkpoints.order_by("step").last()
    url = reverse("runs:checkpoint-export", args=[checkpoint.id])
    html = alice_client.get(reverse("runs:detail", args=[tuned_run.id])).content.decode()
    assert url in html
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(url)  # the export job (webapp.runs.exports), run in-process here
    response = alice_client.get(reverse("runs:checkpoint-export-download", args=[checkpoint.id]))
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    folder = archive.namelist()[0].split("/")[0]
    config = json.loads(archive.read(f"{folder}/config.json"))
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert sorted(config["id2label"].values()) == sorted(tuned_run.dataset.labels)
    assert bob_client.get(url).status_code == 404
    assert bob_api.get(reverse("api-checkpoint-export", args=[checkpoint.id])).status_code == 404


def test_a_failed_fine_tuning_run_resumes_from_its_last_checkpoint(alice_client, alice_api, tuned_run,
                                                                  django_capture_on_commit_callbacks):
    # as if it had stopped at its step-6 checkpoint on the way to 9 steps
    tuned_run.status, tuned_run.max_steps = RunStatus.FAILED, 9
    tuned_run.config = {**tuned_run.config, "max_steps": 9}
    tuned_run.save()
    html = alice_client.get(reverse("runs:detail", args=[tuned_run.id])).content.decode()
    assert '<form method="post" action="' + reverse("runs:resume", args=[tuned_run.id]) + '" class="inline" ' \
        'id="resume-form">' in html  # shown, not hidden
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(reverse("api-run-resume", args=[tuned_run.id]))
    assert response.status_code == 200, response.content
    tuned_run.refresh_from_db()
    assert tuned_run.status == RunStatus.SUCCEEDED and tuned_run.current_step == 9, tuned_run.error
    log = "\n".join(tuned_run.log_lines.values_list("text", flat=True))
    assert "Resuming on" in log and "from the checkpoint at step 6" in log and "Resuming from step-" in log
    assert sorted(tuned_run.checkpoints.values_list("step", flat=True)) == [6, 9]


def test_fine_tuning_offers_the_gpu_queue(alice, alice_client, alice_api, eager, enqueued,
                                          django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    page = alice_client.get(reverse("runs:finetune")).content.decode()
    assert 'name="device"' in page and '<option value="cuda">CUDA GPU</option>' in page
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(reverse("api-finetune"), {"checkpoint": str(base.id), "dataset": str(dataset.id),
                                                           **FAST, "device": "cuda"}, format="json")
    assert created.status_code == 201 and created.json()["queue"] == "gpu" and created.json()["config"]["device"] == "cuda"
    assert enqueued[-1][1]["queue"] == "gpu"
    with django_capture_on_commit_callbacks(execute=True):
        cpu = alice_api.post(reverse("api-finetune"), {"checkpoint": str(base.id), "dataset": str(dataset.id),
                                                       **FAST, "device": "cpu"}, format="json")
    assert cpu.json()["queue"] == "cpu" and enqueued[-1][1]["queue"] == "cpu"


def test_a_qa_run_on_a_dataset_with_unanswerable_questions_charts_them(alice, alice_client, eager,
                                                                       django_capture_on_commit_callbacks):
    from webapp.runs.models import Run

    dataset = ready_demo(alice, django_capture_on_commit_callbacks, demo="extractive_qa")
    run = Run.objects.create(owner=alice, name="qa", kind=RunKind.FINETUNE, dataset=dataset, family="bert",
                             preset="tiny", objectives=["extractive_qa"], config={"dataset": str(dataset.data_dir)},
                             max_steps=10)
    charts = [c["id"] for c in script_data(alice_client.get(reverse("runs:detail", args=[run.id])).content.decode(),
                                           "dashboard-charts")]
    assert "ft_squad" in charts and "ft_squad_split" in charts
    run.config = {"dataset": str(run.folder / "nowhere")}  # no dataset on disk: SQuAD 1.1's charts only
    run.save()
    charts = [c["id"] for c in script_data(alice_client.get(reverse("runs:detail", args=[run.id])).content.decode(),
                                           "dashboard-charts")]
    assert "ft_squad" in charts and "ft_squad_split" not in charts
