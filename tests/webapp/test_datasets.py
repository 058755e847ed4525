"""Dataset pages and services: the upload form (streamed, sniffed at once), the mapping page, the ingest job,
the ready page's charts and token lengths, demos, deletion, ownership; the navigation and the home page."""
from __future__ import annotations

import json
import logging
import re

import pytest
from django.conf import settings
from django.urls import reverse

from tests.webapp.datasets_helpers import conll, review_csv, upload
from tests.webapp.runs_helpers import make_data
from webapp.datasets import services
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db


def post_upload(client, filename: str, content: bytes, *, xhr: bool = False, **fields):
    headers = {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"} if xhr else {}
    return client.post(reverse("datasets:upload"), {"file": upload(filename, content), "name": "", **fields},
                       **headers)


def mapping_post(dataset: Dataset, task: str, roles: dict[str, str], **split) -> dict:
    """The mapping form's fields for `roles` ({column: role}), with the split's defaults."""
    data = {"task": task, "strategy": "random", "train": "0.8", "validation": "0.1", "test": "0.1", "seed": "0",
            **split}
    for i, column in enumerate(dataset.preview["columns"]):
        data[f"role_{i}"] = roles.get(column, "")
    return data


def script_data(html: str, element_id: str):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(match.group(1)) if match else None


# ---------------------------------------------------------------------------- upload
def test_the_upload_page_uses_the_streaming_upload_with_the_dataset_suffixes(alice_client, settings):
    settings.UPLOAD_MAX_BYTES = 5_000_000
    html = alice_client.get(reverse("datasets:upload")).content.decode()
    assert 'id="upload-form"' in html and "js/upload.js" in html and 'id="upload-progress"' in html
    assert 'data-max-bytes="5000000"' in html and 'data-max-human="5.0 MB"' in html
    assert 'data-suffixes=".csv.gz,.tsv.gz,.jsonl.gz,.json.gz,.conll.gz,.csv,.tsv,.jsonl,.json,.conll,.zip"' in html
    assert 'accept=".csv,.tsv,.jsonl,.json,.conll,.gz,.zip"' in html  # the file, or an archive of split files
    assert html.count('accept=".csv,.tsv,.jsonl,.json,.conll,.gz"') == 2  # the validation and test files
    assert "is not a file type the dataset upload reads" in html  # the script's own sentence, from the server


def test_an_upload_by_script_answers_with_the_mapping_page(alice_client, alice):
    response = post_upload(alice_client, "reviews.csv", review_csv(), xhr=True)
    assert response.status_code == 201
    dataset = Dataset.objects.get(owner=alice)
    assert response.json() == {"id": str(dataset.id), "redirect": reverse("datasets:detail", args=[dataset.id])}
    assert dataset.status == JobStatus.MAPPING and dataset.name == "reviews"


def test_an_upload_whose_rows_do_not_read_answers_the_row_and_keeps_nothing(alice_client):
    response = post_upload(alice_client, "short.csv", b"text,label\nfine,1\ntoo,many,fields\n", xhr=True)
    assert response.status_code == 400
    body = response.json()
    assert body["error"].startswith("Row 2 (line 3) has 3 fields but the header has 2")
    assert body["fields"] == {"file": [body["error"]]}
    assert not Dataset.objects.exists()
    page = post_upload(alice_client, "notes.txt", b"hello")  # without the script: the form again, with the sentence
    assert page.status_code == 400 and "“notes.txt” is not a file type the dataset upload reads." in \
        page.content.decode()


# ---------------------------------------------------------------------------- mapping
def test_the_mapping_page_shows_the_first_rows_and_the_suggestions_as_selects(alice_client, alice):
    post_upload(alice_client, "reviews.csv", review_csv())
    dataset = Dataset.objects.get(owner=alice)
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="mapping-form"' in html and 'id="preview-table"' in html
    assert html.count('<tr><td>The ') == 10  # the first ten rows
    assert re.search(r'<select name="role_0"[^>]*>.*?<option value="text" selected>', html, re.S)
    assert re.search(r'<select name="role_1"[^>]*>.*?<option value="label" selected>', html, re.S)
    assert re.search(r'<select name="task"[^>]*>.*?<option value="classification" selected>', html, re.S)
    assert re.search(r'value="random"[^>]* checked', html) and 'name="train" value="0.8"' in html
    assert script_data(html, "task-descriptions")["classification"]["needs"] == (
        "text and label, or sentence1, sentence2 and label")


def test_confirming_on_the_page_ingests_and_the_page_charts_the_labels(alice_client, alice, eager,
                                                                       django_capture_on_commit_callbacks):
    post_upload(alice_client, "reviews.csv", review_csv(40))
    dataset = Dataset.objects.get(owner=alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("datasets:mapping", args=[dataset.id]), mapping_post(
            dataset, "classification", {"review": "text", "label": "label"}, train="0.6", validation="0.2",
            test="0.2", seed="7"))
    assert response.status_code == 302 and response.url == reverse("datasets:detail", args=[dataset.id])
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    assert dataset.sizes == {"train": 24, "validation": 8, "test": 8} and dataset.seed == 7
    html = alice_client.get(response.url).content.decode()
    assert 'id="mapping-form"' not in html and 'id="label-chart"' in html and "plotly" in html
    assert script_data(html, "label-counts")["labels"] == ["calm", "mild", "storm"]
    assert ('<div class="stat" data-split="train"><b>24</b>train · 60%<span class="muted small origin">0.6 of '
            'reviews.csv, at random</span></div>') in html
    assert "Train a tokenizer on a corpus first" in html  # Alice has none yet
    # the fine-tune form, with the dataset chosen; no folder of the server on the page (issue 21)
    assert f'href="{reverse("runs:finetune")}?dataset={dataset.id}">Fine-tune a checkpoint on it</a>' in html
    assert "command line" not in html and str(dataset.data_dir) not in html and str(settings.STORAGE_ROOT) not in html


def test_the_ready_page_measures_token_lengths_with_a_chosen_tokenizer(alice_client, alice, eager,
                                                                       django_capture_on_commit_callbacks):
    post_upload(alice_client, "reviews.csv", review_csv(30))
    dataset = Dataset.objects.get(owner=alice)
    with django_capture_on_commit_callbacks(execute=True):
        services.dataset_confirm_mapping(dataset=dataset, task="classification",
                                         mapping={"review": "text", "label": "label"})
    _, tokenizer = make_data(alice, real=True)
    url = reverse("datasets:detail", args=[dataset.id])
    html = alice_client.get(url).content.decode()
    assert 'id="lengths-form"' in html and f'<option value="{tokenizer.id}" selected>' in html
    assert 'name="max_length" value="128"' in html and "length-data" not in html
    summary = html.split('id="lengths-summary"')[1].split("</p>")[0]  # the tokenizer is chosen: no "Choose" (issue 45)
    assert "Choose a tokenizer" not in summary and "Press Measure" in summary
    html = alice_client.get(url, {"tokenizer": tokenizer.id, "max_length": 4}).content.decode()
    lengths = script_data(html, "length-data")
    assert lengths["truncated"] == 30 and lengths["max_length"] == 4
    assert "<b>100%</b> of the 30 examples (30) are longer than 4 tokens and would be cut." in html
    html = alice_client.get(url, {"tokenizer": tokenizer.id, "max_length": 0}).content.decode()
    assert "Max length: Ensure this value is greater than or equal to 1." in html


def test_a_mapping_that_does_not_fit_is_shown_on_the_page(alice_client, alice):
    post_upload(alice_client, "reviews.csv", review_csv())
    dataset = Dataset.objects.get(owner=alice)
    response = alice_client.post(reverse("datasets:mapping", args=[dataset.id]),
                                 mapping_post(dataset, "classification", {"review": "text"}))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="mapping-errors"' in html
    assert ("Classification needs columns mapped to text and label, or sentence1, sentence2 and label; the mapping "
            "gives text.") in html
    response = alice_client.post(reverse("datasets:mapping", args=[dataset.id]), mapping_post(
        dataset, "classification", {"review": "text", "label": "label"}, train="0.9", validation="0.2", test="0"))
    assert response.status_code == 400
    assert "The split fractions must add up to 1 with some left for training; 0.9 + 0.2 + 0 = 1.1." in \
        response.content.decode()
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.MAPPING and dataset.task == ""


def test_a_failed_ingest_shows_the_row_and_offers_the_mapping_again(alice_client, alice, eager,
                                                                    django_capture_on_commit_callbacks):
    post_upload(alice_client, "ner.conll", conll(15, broken_line_in=12))
    dataset = Dataset.objects.get(owner=alice)
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("datasets:mapping", args=[dataset.id]),
                          mapping_post(dataset, "token_classification", {"tokens": "tokens", "tags": "tags"}))
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.FAILED
    line = 1 + sum(4 if i % 2 else 3 for i in range(1, 12)) + 11 + 1  # sentence 12's second line
    assert dataset.error == (f"Line {line} does not hold a token and a tag; each line of a CoNLL file holds a token "
                             "and its tag, separated by a tab or a space.")
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="dataset-error"' in html and f"Line {line} does not hold a token and a tag" in html
    assert "Nothing of it was stored." in html and 'id="mapping-form"' in html
    assert not dataset.data_dir.exists()


def test_an_internal_error_is_logged_and_shown_as_a_generic_sentence(alice, monkeypatch, caplog):
    import trainer.prep.labelled

    dataset = services.dataset_create_from_upload(owner=alice, name="", uploaded_file=upload("r.csv", review_csv()),
                                                  original_filename="r.csv")
    services.dataset_confirm_mapping(dataset=dataset, task="classification",
                                     mapping={"review": "text", "label": "label"})

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(trainer.prep.labelled, "ingest", broken)
    with caplog.at_level(logging.ERROR):
        services.dataset_process(dataset_id=dataset.id)
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.FAILED and "internal error (not a problem with your data)" in dataset.error
    assert "disk on fire" not in dataset.error and "disk on fire" in caplog.text


def test_a_waiting_dataset_shows_its_progress_and_the_ingest_goes_to_the_jobs_queue(alice_client, alice,
                                                                                   monkeypatch,
                                                                                   django_capture_on_commit_callbacks):
    from webapp.datasets.tasks import ingest_dataset

    sent = []
    monkeypatch.setattr(ingest_dataset, "apply_async", lambda *a, **kw: sent.append((a, kw)))
    post_upload(alice_client, "reviews.csv", review_csv())
    dataset = Dataset.objects.get(owner=alice)
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("datasets:mapping", args=[dataset.id]),
                          mapping_post(dataset, "classification", {"review": "text", "label": "label"}))
    assert sent == [((), {"args": [str(dataset.id)], "queue": "jobs"})]
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert f'data-job-url="{reverse("api-dataset-detail", args=[dataset.id])}"' in html
    assert "Waiting for a worker" in html and "js/corpora.js" in html
    response = alice_client.post(reverse("datasets:mapping", args=[dataset.id]),
                                 mapping_post(dataset, "classification", {"review": "text", "label": "label"}),
                                 follow=True)
    assert "its mapping can no longer change" in response.content.decode() and len(sent) == 1


# ---------------------------------------------------------------------------- list, demos, delete
def test_the_list_offers_one_demo_per_entry_with_its_description(alice_client):
    from trainer.prep.labelled import DEMOS

    html = alice_client.get(reverse("datasets:list")).content.decode()
    options = re.findall(r'<option value="([a-z_]+)"', html)
    assert options == list(DEMOS)
    assert script_data(html, "demo-descriptions") == {name: demo.how for name, demo in DEMOS.items()}
    assert "Create a demo dataset" in html and "command line" not in html
    assert f'<a href="{reverse("runs:finetune")}" id="finetune-form-link">' in html


def test_creating_a_demo_dataset_writes_and_ingests_it(alice_client, alice, eager,
                                                       django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("datasets:demo"), {"demo": "token_classification"})
    dataset = Dataset.objects.get(owner=alice)
    assert response.status_code == 302 and response.url == reverse("datasets:detail", args=[dataset.id])
    assert dataset.status == JobStatus.READY, dataset.error
    assert dataset.task == "token_classification" and dataset.labels[0] == "O" and "B-MOD" in dataset.labels
    html = alice_client.get(response.url).content.decode()
    assert "Demo: token classification (stdlib_identifiers.conll)" in html and 'data-unit="tokens"' in html
    list_html = alice_client.get(reverse("datasets:list")).content.decode()
    assert "Demo: token classification" in list_html


def test_delete_asks_then_removes_the_files(alice_client, alice, django_capture_on_commit_callbacks):
    post_upload(alice_client, "reviews.csv", review_csv())
    dataset = Dataset.objects.get(owner=alice)
    page = alice_client.get(reverse("datasets:delete", args=[dataset.id]))
    assert "Delete the dataset “reviews”?" in page.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("datasets:delete", args=[dataset.id]))
    assert response.status_code == 302 and response.url == reverse("datasets:list")
    assert not Dataset.objects.exists() and not dataset.folder.exists()


# ---------------------------------------------------------------------------- ownership
def test_other_users_get_404_on_every_dataset_page(alice_client, bob_client, alice):
    post_upload(alice_client, "reviews.csv", review_csv())
    dataset = Dataset.objects.get(owner=alice)
    for response in (bob_client.get(reverse("datasets:detail", args=[dataset.id])),
                     bob_client.post(reverse("datasets:mapping", args=[dataset.id]),
                                     mapping_post(dataset, "classification", {"review": "text", "label": "label"})),
                     bob_client.get(reverse("datasets:delete", args=[dataset.id])),
                     bob_client.post(reverse("datasets:delete", args=[dataset.id]))):
        assert response.status_code == 404
    assert "reviews" not in bob_client.get(reverse("datasets:list")).content.decode()
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.MAPPING


def test_the_pages_need_a_login(client):
    for name in ("datasets:list", "datasets:upload"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and response.url.startswith(reverse("login"))


# ---------------------------------------------------------------------------- navigation and home
def test_the_navigation_and_the_home_page_present_both_halves(alice_client, alice):
    from django.test import Client

    landing = Client().get(reverse("home")).content.decode()
    assert "fine-tune" in landing and "5 · Dataset" in landing and "command line" not in landing
    assert f'<a href="{reverse("runs:finetune")}">fine-tune form</a>' in landing
    home = alice_client.get(reverse("home")).content.decode()
    assert f'<a href="{reverse("datasets:list")}">Datasets</a>' in home
    assert "Getting started" in home and 'id="fine-tuning"' in home and "Recent datasets" in home
    assert "command line" not in home and "python -m trainer finetune" not in home
    assert f'href="{reverse("runs:finetune")}">Fine-tune</a>' in home
    Dataset.objects.create(owner=alice, name="Ready one", status=JobStatus.READY)
    home = alice_client.get(reverse("home")).content.decode()
    assert "Ready one" in home and "Add a labelled dataset</b> <span class=\"muted\">— done" in home


def test_the_label_chart_and_the_in_context_card_come_from_the_task_spec():
    """The dataset page names no task: each TaskSpec says its chart's heading, sentence and unit, and
    whether the prompt builder evaluates it in context."""
    from trainer.inference.incontext import DATASET_TASK
    from webapp.datasets import display

    assert display.label_chart("token_classification", {"kind": "classes"}, ["O", "B-X", "I-X"]) == {
        "heading": "Tags", "sentence": "3 tags, counted per token", "unit": "tokens"}
    assert display.label_chart("multiple_choice", {"kind": "classes"}, ["0", "1"]) == {
        "heading": "The right choice", "unit": "examples",
        "sentence": "Where the right choice stands (choice 0 is the first), counted per example"}
    assert display.label_chart("classification", {"kind": "classes"}, ["a", "b"]) == {
        "heading": "Labels", "sentence": "2 labels, counted per example", "unit": "examples"}
    assert display.label_chart("regression", {"kind": "bins", "labels": ["0-1", "1-2"]}, []) == {
        "heading": "Scores", "sentence": "The scores in 2 equal-width bins", "unit": "examples"}
    assert [t for t in ("classification", "regression", "token_classification", "") if display.in_context(t)] == [
        DATASET_TASK] == ["classification"]
