"""A labelled dataset uploaded as a file per split (issue 23), on the JSON API and the upload page: a CoNLL
train file plus a test file gives exactly those splits, an archive of train/dev/test files likewise, the page
and the API say where each split's examples come from, and unknown fields are refused with a sentence."""
from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

from tests.webapp.datasets_helpers import conll, review_csv, upload
from tests.webapp.test_datasets_api import API, confirm, post_file, stored_folders  # noqa: F401 (confirm: a fixture)
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

TEST = b"Bob\tB-PER\nsaw\tO\nRome\tB-LOC\n\nOslo\tB-LOC\nis\tO\ncold\tO\n"
DEV = b"Eve\tB-PER\nleft\tO\nLima\tB-LOC\n"


def tokens(dataset_id, split) -> list[str]:
    from trainer.prep.labelled import iter_examples

    return [" ".join(e["tokens"]) for e in iter_examples(Dataset.objects.get(pk=dataset_id).data_dir, split)]


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buffer.getvalue()


def test_a_conll_train_file_and_a_test_file_are_exactly_those_splits(alice_api, confirm):  # noqa: F811
    response = post_file(alice_api, "wnut_train.conll", conll(20), test_file=upload("wnut_test.conll", TEST))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["files"] == {"train": "wnut_train.conll", "test": "wnut_test.conll"}
    assert body["preview"]["task"] == "token_classification" and body["split_origins"] == {}
    _, ready = confirm(body["id"], {}, method="patch")  # the suggestions, split by the files
    assert ready["status"] == "ready", ready["error"]
    assert ready["split_spec"]["strategy"] == "files" and ready["sizes"] == {"train": 18, "validation": 2, "test": 2}
    assert tokens(body["id"], "test") == ["Bob saw Rome", "Oslo is cold"]  # the test file, all of it, nothing else
    assert sorted(tokens(body["id"], "train") + tokens(body["id"], "validation")) == sorted(
        " ".join(line.split("\t")[0] for line in s.splitlines()) for s in conll(20).decode().strip().split("\n\n"))
    assert ready["split_origins"] == {"train": "from wnut_train.conll",
                                      "validation": "0.1 of wnut_train.conll, at random", "test": "from wnut_test.conll"}
    assert "The test split is empty" not in " ".join(ready["warnings"])


def test_a_zip_of_train_dev_and_test_files_is_split_by_them(alice_api, confirm):  # noqa: F811
    archive = zipped({"wnut16/train.conll": conll(8), "wnut16/dev.conll": DEV, "wnut16/test.conll": TEST})
    body = post_file(alice_api, "wnut16.zip", archive).json()
    assert body["files"] == {"train": "train.conll", "validation": "dev.conll", "test": "test.conll"}
    assert body["original_filename"] == "wnut16.zip" and body["format"] == "conll"
    _, ready = confirm(body["id"], {"task": "token_classification", "mapping": {"tokens": "tokens", "tags": "tags"},
                                    "split": {"strategy": "files"}})
    assert ready["status"] == "ready", ready["error"]
    assert ready["sizes"] == {"train": 8, "validation": 1, "test": 2}
    assert tokens(body["id"], "validation") == ["Eve left Lima"]
    assert ready["split_origins"]["validation"] == "from dev.conll"


@pytest.mark.parametrize("fields, message", [
    ({"dev_file": ("dev.conll", DEV)},
     "dev_file: Unknown field. The fields are: file, name, test_file, validation_file."),
    ({"test_file": ("test.csv", b"text,label\na,b\n")},
     "The test file test.csv is CSV but the train file train.conll is CONLL; give every split in one format."),
    ({"test_file": ("test.txt", TEST)}, "“test.txt” is not a file type the dataset upload reads."),
])
def test_a_split_upload_that_does_not_fit_is_refused_and_nothing_kept(alice_api, fields, message):
    before = stored_folders()
    response = post_file(alice_api, "train.conll", conll(6),
                         **{name: upload(*file) for name, file in fields.items()})
    assert response.status_code == 400 and message in response.json()["error"]
    assert stored_folders() == before and not Dataset.objects.exists()


def test_an_archive_comes_alone_and_holds_only_split_files(alice_api):
    response = post_file(alice_api, "data.zip", zipped({"train.conll": conll(6)}), test_file=upload("t.conll", TEST))
    assert response.status_code == 400 and "A .zip archive holds every split itself" in response.json()["error"]
    response = post_file(alice_api, "data.zip", zipped({"train.conll": conll(6), "notes.md": b"hi"}))
    assert response.status_code == 400 and 'The archive holds "notes.md", which is not a split file' in \
        response.json()["error"]
    assert not Dataset.objects.exists()


def test_the_mapping_of_split_files_is_checked_and_unknown_keys_refused(alice_api):
    dataset_id = post_file(alice_api, "train.conll", conll(6), test_file=upload("test.conll", TEST)).json()["id"]
    url = f"{API}{dataset_id}/mapping/"
    mapping = {"tokens": "tokens", "tags": "tags"}
    for split, message in (
            ({"strategy": "random"}, "The dataset was uploaded as 2 files, one per split (train, test), so it is "
                                     "split by its files, not at random."),
            ({"strategy": "files", "shares": 0.2}, "split: shares: Unknown field. The fields are: strategy, test, "
                                                   "train, validation.")):
        response = alice_api.post(url, {"task": "token_classification", "mapping": mapping, "split": split},
                                  format="json")
        assert response.status_code == 400 and message in response.json()["error"], response.json()
    response = alice_api.post(url, {"task": "token_classification", "mapping": mapping, "splits": {}}, format="json")
    assert response.status_code == 400 and response.json()["error"] == (
        "splits: Unknown field. The fields are: mapping, seed, split, task.")
    assert Dataset.objects.get(pk=dataset_id).status == JobStatus.MAPPING


# ---------------------------------------------------------------------------- the pages
def test_the_upload_page_takes_a_file_per_split_and_the_page_says_where_each_split_comes_from(
        alice_client, alice, eager, django_capture_on_commit_callbacks):
    response = alice_client.post(reverse("datasets:upload"), {
        "file": upload("train.conll", conll(10)), "validation_file": upload("dev.conll", DEV),
        "test_file": upload("test.conll", TEST), "name": ""})
    dataset = Dataset.objects.get(owner=alice)
    assert response.status_code == 302 and dataset.files == {"train": "train.conll", "validation": "dev.conll",
                                                             "test": "test.conll"}
    html = alice_client.get(response.url).content.decode()
    assert 'value="files"' in html and 'value="random"' not in html and 'value="column"' not in html
    assert 'name="validation"' not in html and 'name="train"' not in html  # every split has its file
    assert '<span class="mono" data-split-file="test">test.conll</span>' in html
    form = {"task": "token_classification", "strategy": "files", "role_0": "tokens", "role_1": "tags"}
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("datasets:mapping", args=[dataset.id]), form)
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert dataset.status == JobStatus.READY, dataset.error
    assert dataset.sizes == {"train": 10, "validation": 1, "test": 2}
    html = alice_client.get(response.url).content.decode()
    assert "split by the files uploaded, one per split" in html
    assert '<b>2</b>test · 15%<span class="muted small origin">from test.conll</span>' in html


def test_the_upload_page_refuses_split_files_in_another_format_with_a_sentence(alice_client):
    page = alice_client.post(reverse("datasets:upload"), {"file": upload("reviews.csv", review_csv(10)),
                                                          "test_file": upload("test.conll", TEST), "name": ""})
    assert page.status_code == 400 and not Dataset.objects.exists()
    assert ("The test file test.conll is CONLL but the train file reviews.csv is CSV; give every split in one "
            "format.") in page.content.decode()


def test_without_a_validation_file_the_form_asks_for_the_share_of_train(alice_client, alice):
    alice_client.post(reverse("datasets:upload"), {"file": upload("train.conll", conll(10)),
                                                   "test_file": upload("test.conll", TEST), "name": ""})
    html = alice_client.get(reverse("datasets:detail", args=[Dataset.objects.get(owner=alice).id])).content.decode()
    assert "Validation share of the train file" in html and 'name="seed"' in html and 'name="test"' not in html
    assert "without a validation file, this share of the train file is set aside for validation" in html
