"""The labelled-dataset JSON API: upload (sniffed at once) -> mapping -> ingest -> statistics, for CSV and
CoNLL; every bad-data case as a sentence with nothing half-stored; demos; other users get 404 everywhere;
the OpenAPI schema documents every endpoint with its error bodies."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.webapp.datasets_helpers import conll, review_csv, scores_jsonl, upload
from tests.webapp.runs_helpers import make_data
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

API = "/api/datasets/"
NOT_FOUND = {"error": "Not found. It does not exist, or it is not yours."}


def post_file(api, filename: str, content: bytes, **fields):
    return api.post(API, {"file": upload(filename, content), **fields}, format="multipart")


def stored_folders() -> set[str]:
    root = Path(django_settings.STORAGE_ROOT) / "datasets"
    return {p.name for p in root.iterdir()} if root.exists() else set()


@pytest.fixture
def confirm(alice_api, eager, django_capture_on_commit_callbacks):
    """POST (or PATCH) a mapping with the ingest run in-process; returns (response, dataset as the API shows it)."""
    def run(dataset_id, body, method="post"):
        with django_capture_on_commit_callbacks(execute=True):
            response = getattr(alice_api, method)(f"{API}{dataset_id}/mapping/", body, format="json")
        return response, alice_api.get(f"{API}{dataset_id}/").json()
    return run


# ---------------------------------------------------------------------------- CSV, end to end
def test_a_csv_upload_waits_for_its_mapping_with_the_first_rows_and_suggestions(alice_api):
    response = post_file(alice_api, "reviews.csv", review_csv(), name="Reviews")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "mapping" and body["name"] == "Reviews" and body["format"] == "csv"
    assert body["task"] == "" and body["mapping"] == {}  # nothing confirmed yet
    preview = body["preview"]
    assert preview["columns"] == ["review", "label"] and len(preview["rows"]) == 10
    assert preview["mapping"] == {"review": "text", "label": "label"} and preview["task"] == "classification"
    dataset = Dataset.objects.get(pk=body["id"])
    assert (dataset.folder / "raw.csv").read_bytes() == review_csv() and not dataset.data_dir.exists()


def test_confirming_a_csv_mapping_ingests_it_and_the_stats_chart_it(alice_api, alice, confirm):
    dataset_id = post_file(alice_api, "reviews.csv.gz", gzip.compress(review_csv(40))).json()["id"]
    response, body = confirm(dataset_id, {"task": "classification", "mapping": {"review": "text", "label": "label"},
                                          "split": {"strategy": "random", "train": 0.5, "validation": 0.25,
                                                    "test": 0.25}, "seed": 3})
    assert response.status_code == 200 and response.json()["status"] == "pending"
    assert body["status"] == "ready" and body["progress"] == 100, body["error"]
    assert body["sizes"] == {"train": 20, "validation": 10, "test": 10}
    assert body["labels"] == ["calm", "mild", "storm"] and body["split_spec"]["train"] == 0.5 and body["seed"] == 3
    assert body["preview"]["details"]["compressed"] is True
    assert body["examples"][0]["text"].startswith("The ") and body["examples"][0]["label"] in body["labels"]
    counts = body["label_counts"]
    assert counts["kind"] == "classes" and counts["labels"] == body["labels"]
    assert sum(sum(counts["counts"][s]) for s in ("train", "validation", "test")) == 40

    stats = alice_api.get(f"{API}{dataset_id}/stats/")
    assert stats.status_code == 200
    assert stats.json() == {"sizes": body["sizes"], "labels": counts, "label_stats": {}, "lengths": None}

    _, tokenizer = make_data(alice, real=True)
    lengths = alice_api.get(f"{API}{dataset_id}/stats/", {"tokenizer": str(tokenizer.id), "max_length": 8}).json()
    lengths = lengths["lengths"]
    assert lengths["examples"] == 40 and lengths["max_length"] == 8 and lengths["sampled"] is False
    assert lengths["tokenizer"] == str(tokenizer.id) and sum(lengths["counts"]) == 40
    assert lengths["truncated"] == 40 and lengths["truncated_share"] == 1.0  # every review is longer than 8
    query = {"tokenizer": str(tokenizer.id), "max_length": lengths["median"]}
    at_median = alice_api.get(f"{API}{dataset_id}/stats/", query).json()["lengths"]
    assert 0 < at_median["truncated"] <= 20 and at_median["truncated_share"] == at_median["truncated"] / 40
    longer = alice_api.get(f"{API}{dataset_id}/stats/", {"tokenizer": str(tokenizer.id), "max_length": 512}).json()
    assert longer["lengths"]["truncated"] == 0


def test_a_split_column_splits_the_rows_by_default(alice_api, confirm):
    body = post_file(alice_api, "reviews.csv", review_csv(35, split=True)).json()
    assert body["preview"]["mapping"] == {"review": "text", "label": "label", "split": "split"}
    _, body = confirm(body["id"], {}, method="patch")  # the suggestions as they are
    assert body["status"] == "ready", body["error"]
    assert body["split_spec"]["strategy"] == "column" and body["task"] == "classification"
    assert body["sizes"] == {"train": 24, "validation": 7, "test": 4}


# ---------------------------------------------------------------------------- CoNLL, end to end
def test_a_conll_upload_is_suggested_token_classification_and_ingests_its_tags(alice_api, confirm):
    body = post_file(alice_api, "ner.conll", conll(20)).json()
    assert body["format"] == "conll" and body["preview"]["columns"] == ["tokens", "tags"]
    assert body["preview"]["task"] == "token_classification"
    assert body["preview"]["rows"][0] == {"tokens": ["Ada1", "visited", "Paris1", "."],
                                          "tags": ["B-PER", "O", "B-LOC", "O"]}
    response, body = confirm(body["id"], {"task": "token_classification",
                                          "mapping": {"tokens": "tokens", "tags": "tags"}})
    assert response.status_code == 200
    assert body["status"] == "ready", body["error"]
    assert body["labels"] == ["O", "B-LOC", "B-PER"]  # O first, then by entity type
    assert body["sizes"] == {"train": 16, "validation": 2, "test": 2}  # the default 0.8 / 0.1 / 0.1
    tokens = {split: sum(c) for split, c in body["label_counts"]["counts"].items()}
    assert sum(tokens.values()) == 20 * 3 + 10  # counted per token


# ---------------------------------------------------------------------------- bad data: a sentence each
@pytest.mark.parametrize("name, content, message", [
    ("notes.pdf", b"%PDF-1.4", "file: “notes.pdf” is not a file type the dataset upload reads."),
    ("empty.csv", b"", "file: The file is empty (0 bytes)."),
    ("short.csv", b"text,label\nfine,1\ntoo,many,fields\n",
     "Row 2 (line 3) has 3 fields but the header has 2; check the delimiter"),
    ("only.csv", b"text,label\n", "The file has a header (line 1) but no rows."),
    ("broken.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", "label"\n', "Line 2 is not valid JSON"),
    ("latin.csv", "text,label\ncaf\u00e9,1\n".encode("latin-1"),
     "The file is not valid UTF-8: the byte 0xE9 at byte offset 14 (line 2) cannot be decoded."),
    ("ner.conll", b"Ada\tB-PER\nalone\n", "Line 2 does not hold a token and a tag"),
    ("qa.json", b'{"version": "v2.0", "data": [{"title": "x"}]}', 'Article 1 has no "paragraphs" list'),
])
def test_an_upload_whose_first_rows_do_not_read_is_refused_with_a_sentence_and_nothing_kept(
        alice_api, name, content, message):
    before = stored_folders()  # earlier tests' files stay in the session's storage folder
    response = post_file(alice_api, name, content)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert not Dataset.objects.exists() and stored_folders() == before


def test_a_file_over_the_size_limit_is_refused(alice_api, settings):
    settings.UPLOAD_MAX_BYTES = 100
    response = post_file(alice_api, "big.csv", review_csv())
    assert response.status_code == 400
    assert "the largest upload accepted is 100 bytes" in response.json()["error"]


@pytest.mark.parametrize("filename, content, body, message", [
    ("reviews.csv", review_csv(30, bad_row=14, bad=""), {"task": "classification"},
     'Row 14 (line 15) has an empty label (column "label").'),
    ("scores.jsonl", scores_jsonl(20, bad_row=17), {"task": "regression"},
     'Line 17 has the label "lots", which is not a number; regression needs a number in every row.'),
    ("ner.conll", conll(15, broken_line_in=13), {"task": "token_classification"},
     "does not hold a token and a tag"),
    ("reviews.csv", review_csv(30).replace(b",storm\n", b",calm\n").replace(b",mild\n", b",calm\n"),
     {"task": "classification"}, 'Every one of the 30 examples has the label "calm" and no other'),
    ("reviews.csv", review_csv(30, split=True).replace(b",test\n", b",holdout\n"), {"task": "classification"},
     'has the split "holdout"; use train, validation (or valid, dev) or test.'),
])
def test_bad_rows_past_the_preview_fail_the_ingest_with_the_row_and_keep_nothing(
        alice_api, confirm, filename, content, body, message):
    dataset_id = post_file(alice_api, filename, content).json()["id"]
    response, dataset = confirm(dataset_id, body, method="patch")
    assert response.status_code == 200
    assert dataset["status"] == "failed" and message in dataset["error"]
    assert dataset["sizes"] == {} and dataset["labels"] == [] and dataset["label_counts"] == {}
    row = Dataset.objects.get(pk=dataset_id)
    assert not row.data_dir.exists() and {p.name for p in row.folder.iterdir()} == {"raw" + Path(filename).suffix}
    assert alice_api.get(f"{API}{dataset_id}/stats/").status_code == 409


def test_a_failed_dataset_can_be_mapped_again(alice_api, confirm):
    content = review_csv(30, split=True).replace(b",test\n", b",holdout\n")
    dataset_id = post_file(alice_api, "reviews.csv", content).json()["id"]
    _, failed = confirm(dataset_id, {}, method="patch")  # by the split column, which says "holdout"
    assert failed["status"] == "failed" and 'has the split "holdout"' in failed["error"]
    _, body = confirm(dataset_id, {"task": "classification", "mapping": {"review": "text", "label": "label"}})
    assert body["status"] == "ready" and body["error"] == "", body["error"]
    assert body["split_spec"]["strategy"] == "random" and sum(body["sizes"].values()) == 30


@pytest.mark.parametrize("body, message", [
    ({"task": "classification", "mapping": {"review": "text"}},
     "Classification needs columns mapped to text and label, or sentence1, sentence2 and label; the mapping gives "
     "text."),
    ({"task": "classification", "mapping": {"review": "text", "stars": "label"}},
     'The column "stars" (mapped to label) is not in the file; its columns are "review", "label".'),
    ({"task": "classification", "mapping": {"review": "text", "label": "label"},
      "split": {"train": 0.8, "validation": 0.3, "test": 0.1}},
     "The split fractions must add up to 1 with some left for training; 0.8 + 0.3 + 0.1 = 1.2."),
    ({"task": "classification", "mapping": {"review": "text", "label": "label"}, "split": {"strategy": "column"}},
     "Splitting by a column needs a column mapped to the role split."),
    ({"task": "classification", "mapping": {"review": "text", "label": "label"}, "split": {"strategy": "files"}},
     "A dataset uploaded as one file is split at random or by its split column, not by files; upload a file per "
     "split (or a .zip of them) to split by files."),
    ({"task": "classification", "mapping": {"review": "text", "label": "label"}, "split": {"strategy": "shuffle"}},
     "split: strategy:"),
    ({"task": "summarise", "mapping": {"review": "text"}}, "task:"),
    ({"task": "classification", "mapping": {"review": "txt", "label": "label"}},
     'The column "review" is mapped to "txt", which is not a role'),
    ({"task": "classification", "mapping": ["review"]}, "mapping:"),
])
def test_a_mapping_that_does_not_fit_is_refused_with_a_sentence(alice_api, body, message):
    dataset_id = post_file(alice_api, "reviews.csv", review_csv()).json()["id"]
    response = alice_api.post(f"{API}{dataset_id}/mapping/", body, format="json")
    assert response.status_code == 400
    assert message in response.json()["error"]
    dataset = Dataset.objects.get(pk=dataset_id)
    assert dataset.status == JobStatus.MAPPING and dataset.task == ""


# ---------------------------------------------------------------------------- states
def test_a_ready_dataset_keeps_its_mapping_and_a_waiting_one_has_no_stats(alice_api, confirm):
    dataset_id = post_file(alice_api, "reviews.csv", review_csv()).json()["id"]
    assert alice_api.get(f"{API}{dataset_id}/stats/").status_code == 409
    response, _ = confirm(dataset_id, {})  # POST needs the task and the mapping
    assert response.status_code == 400 and response.json()["error"].startswith("task: This field is required.")
    _, body = confirm(dataset_id, {}, method="patch")
    assert body["status"] == "ready"
    response = alice_api.post(f"{API}{dataset_id}/mapping/", {"task": "classification",
                                                               "mapping": {"review": "text", "label": "label"}},
                              format="json")
    assert response.status_code == 409
    assert "is ready, so its mapping can no longer change" in response.json()["error"]


def test_stats_need_a_ready_tokenizer_of_your_own(alice_api, alice, bob, confirm):
    dataset_id = post_file(alice_api, "reviews.csv", review_csv()).json()["id"]
    confirm(dataset_id, {}, method="patch")
    _, bobs = make_data(bob, name="bob's")
    response = alice_api.get(f"{API}{dataset_id}/stats/", {"tokenizer": str(bobs.id)})
    assert response.status_code == 404 and response.json() == NOT_FOUND
    _, training = make_data(alice, status="processing", name="busy")
    response = alice_api.get(f"{API}{dataset_id}/stats/", {"tokenizer": str(training.id)})
    assert response.status_code == 409 and "is not ready" in response.json()["error"]
    for query, message in (({"max_length": 0}, "max_length:"), ({"tokenizer": "nope"}, "tokenizer:")):
        response = alice_api.get(f"{API}{dataset_id}/stats/", query)
        assert response.status_code == 400 and message in response.json()["error"]


def test_delete_removes_the_dataset_and_its_files(alice_api, confirm, django_capture_on_commit_callbacks):
    dataset_id = post_file(alice_api, "reviews.csv", review_csv()).json()["id"]
    confirm(dataset_id, {}, method="patch")
    folder = Dataset.objects.get(pk=dataset_id).folder
    assert (folder / "data" / "dataset.json").exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"{API}{dataset_id}/").status_code == 204
    assert not folder.exists() and alice_api.get(f"{API}{dataset_id}/").status_code == 404


# ---------------------------------------------------------------------------- demos
def test_the_demos_are_listed_and_one_is_written_and_ingested_in_one_go(alice_api, eager, tmp_path,
                                                                        django_capture_on_commit_callbacks):
    from trainer.prep.labelled import DEMOS, write_demo_dataset

    listed = alice_api.get(f"{API}demos/").json()
    assert [d["name"] for d in listed] == list(DEMOS)
    assert listed[0]["description"] == DEMOS["classification"].how and listed[0]["label"] == "Classification"
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(f"{API}demos/", {"name": "pair_classification"}, format="json")
    assert response.status_code == 201 and response.json()["status"] == "pending"
    body = alice_api.get(f"{API}{response.json()['id']}/").json()
    assert body["status"] == "ready", body["error"]
    assert body["demo"] == "pair_classification" and body["original_filename"] == "stdlib_paragraph_order.tsv"
    assert body["mapping"] == {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label", "split": "split"}
    assert body["labels"] == ["in_order", "swapped"]
    split_column = [line.split("\t")[3] for line in
                    write_demo_dataset("pair_classification", tmp_path).read_text().splitlines()[1:]]
    assert body["sizes"] == {split: split_column.count(split) for split in ("train", "validation", "test")}


def test_an_unknown_demo_is_refused(alice_api):
    response = alice_api.post(f"{API}demos/", {"name": "chess"}, format="json")
    assert response.status_code == 400 and response.json()["error"].startswith('name: "chess" is not a valid choice')
    assert not Dataset.objects.exists()


# ---------------------------------------------------------------------------- ownership
def test_other_users_get_404_everywhere(alice_api, bob_api, confirm):
    dataset_id = post_file(alice_api, "reviews.csv", review_csv()).json()["id"]
    confirm(dataset_id, {}, method="patch")
    url = f"{API}{dataset_id}/"
    mapping = {"task": "classification", "mapping": {"review": "text", "label": "label"}}
    for response in (bob_api.get(url), bob_api.delete(url), bob_api.get(url + "stats/"),
                     bob_api.post(url + "mapping/", mapping, format="json"),
                     bob_api.patch(url + "mapping/", mapping, format="json")):
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    assert bob_api.get(API).json() == []
    assert [d["id"] for d in alice_api.get(API).json()] == [dataset_id]
    assert Dataset.objects.get(pk=dataset_id).status == JobStatus.READY


def test_anonymous_calls_are_refused_with_a_sentence(anon_api, alice):
    dataset = Dataset.objects.create(owner=alice, name="Alice's")
    for response in (anon_api.get(API), anon_api.get(f"{API}{dataset.id}/"), anon_api.get(f"{API}demos/"),
                     anon_api.post(f"{API}demos/", {"name": "classification"}, format="json")):
        assert response.status_code in (401, 403)
        assert "Authorization: Token" in response.json()["error"]


# ---------------------------------------------------------------------------- OpenAPI
def test_the_schema_documents_every_dataset_endpoint_with_its_error_bodies():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    paths = schema["paths"]
    # Besides its own: 401 everywhere; on writes 403 (CSRF), 415 where a body is read, 413 (a body too
    # large) and 507 (the disk full), as webapp.api.schema adds them to every write.
    writes = {"401", "403", "413", "415", "507"}
    expected = {
        "/api/datasets/": {"get": {"200", "401"}, "post": {"201", "400", "413", "507"} | writes},
        "/api/datasets/demos/": {"get": {"200", "401"}, "post": {"201", "400"} | writes},
        "/api/datasets/{id}/": {"get": {"200", "401", "404"}, "delete": {"204", "401", "403", "404", "507"}},
        "/api/datasets/{id}/mapping/": {"post": {"200", "400", "404", "409"} | writes,
                                        "patch": {"200", "400", "404", "409"} | writes},
        "/api/datasets/{id}/stats/": {"get": {"200", "400", "401", "404", "409"}},
    }
    for path, methods in expected.items():
        for method, codes in methods.items():
            responses = paths[path][method]["responses"]
            assert set(responses) == codes, (path, method)
            for code in codes - {"200", "201", "204"}:
                assert responses[code]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/Error"}, (path, method, code)
                assert responses[code]["description"].startswith('{"error": ')
    assert {p["name"] for p in paths["/api/datasets/{id}/stats/"]["get"]["parameters"]} >= {"tokenizer", "max_length"}
    components = schema["components"]["schemas"]
    assert set(components["Error"]["properties"]) == {"error", "fields"}
    assert set(components["Mapping"]["properties"]) == {"task", "mapping", "split", "seed"}
    assert components["DatasetStatusEnum"]["enum"] == ["mapping", "pending", "processing", "ready", "failed"]
    assert "lengths" in components["Stats"]["properties"]
