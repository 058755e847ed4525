"""Corpora of many files in any format (issue 28), on the web side: uploads of Parquet, jsonl.zst,
json.gz, several files and archives of shards, through the page and the API; the server-side import
and its path checks; who may see an imported corpus; the stage progress written to the row; the
files table, the removed-text examples and the tokenizer's sample on the pages."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import random
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from webapp.corpora import services
from webapp.corpora.models import Corpus, SourceKind, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

WORDS = (
    "river mountain quiet garden letter window morning evening forest silver harbor engine valley "
    "student teacher market village bridge lantern winter summer autumn spring orchard meadow castle "
    "painter sailor farmer doctor library kitchen candle mirror thunder shadow feather pocket ribbon "
    "walks carries finds builds paints writes reads opens closes watches follows remembers forgets"
).split()


def documents(n: int = 6, sentences: int = 6, seed: int = 0) -> list[str]:
    """Distinct documents of simple sentences (each line one sentence)."""
    rng = random.Random(seed)
    return ["\n".join(" ".join(rng.sample(WORDS, rng.randint(7, 11))).capitalize() + "." for _ in range(sentences))
            for _ in range(n)]


def jsonl(texts: list[str], field: str = "text") -> bytes:
    return "".join(json.dumps({"id": i, field: t}) + "\n" for i, t in enumerate(texts)).encode()


def parquet(texts: list[str], column: str = "text") -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(len(texts))), column: texts}), out)
    return out.getvalue()


def zst(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def zip_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def tar_gz_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


# Each a corpus of its own: (client's name, bytes, format, compression found).
KINDS = {
    "parquet": ("fineweb-000.parquet", lambda: parquet(documents(seed=1)), "parquet", "none"),
    "jsonl.zst": ("pile-00.jsonl.zst", lambda: zst(jsonl(documents(seed=2))), "jsonl", "zstd"),
    "json.gz": ("c4-train.00000-of-01024.json.gz", lambda: gzip.compress(jsonl(documents(seed=3))), "jsonl", "gzip"),
}


def page_upload(client, files: list[tuple[str, bytes]], *, xhr: bool = False, **fields):
    data = {"file": [SimpleUploadedFile(name, content) for name, content in files], "name": "", **fields}
    headers = {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"} if xhr else {}
    return client.post(reverse("corpora:upload"), data, **headers)


def api_upload(api, files: list[tuple[str, bytes]], **fields):
    return api.post("/api/corpora/", {"file": [SimpleUploadedFile(n, c) for n, c in files], **fields},
                    format="multipart")


def the_corpus(owner) -> Corpus:
    corpus = Corpus.objects.get(owner=owner)
    assert corpus.status == JobStatus.READY, corpus.error
    return corpus


def listed(corpus: Corpus) -> list[tuple[str, str, str]]:
    return [(f.name, f.format, f.compression) for f in corpus.files.order_by("position")]


# ------------------------------------------------------------------ the upload page


def test_the_upload_page_takes_several_files_of_every_format(alice_client):
    html = alice_client.get(reverse("corpora:upload")).content.decode()
    assert 'type="file" name="file"' in html and " multiple " in html
    for ending in (".parquet", ".zst", ".bz2", ".gz", ".arrow", ".zip", ".tar", ".jsonl", ".json", ".txt"):
        assert ending in html.split('accept="', 1)[1].split('"', 1)[0]
    assert 'name="text_field"' in html and 'value="text"' in html
    assert "js/corpora-import.js" in html and 'id="import-form"' in html


def test_the_import_form_says_an_administrator_must_set_the_roots(alice_client, settings):
    settings.CORPUS_IMPORT_ROOTS = []
    html = alice_client.get(reverse("corpora:upload")).content.decode()
    assert "an administrator must set CORPUS_IMPORT_ROOTS" in html
    assert "<fieldset class=\"split-field\" disabled>" in html
    response = alice_client.post(reverse("corpora:import"), {"import-path": "/tmp", "import-dry_run": "1"})
    assert "an administrator must set CORPUS_IMPORT_ROOTS" in response.content.decode()
    assert not Corpus.objects.exists()


# ------------------------------------------------------------------ uploads of the new kinds


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_file_of_each_new_kind_uploads_through_the_page(alice_client, alice, eager,
                                                         django_capture_on_commit_callbacks, kind):
    name, make, fmt, compression = KINDS[kind]
    with django_capture_on_commit_callbacks(execute=True):
        response = page_upload(alice_client, [(name, make())])
    corpus = the_corpus(alice)
    assert response.status_code == 302
    assert corpus.stats["documents"] == 6
    assert listed(corpus) == [(name, fmt, compression)]
    assert corpus.original_filename == name and corpus.source_kind == SourceKind.UPLOAD
    suffix = "." + kind
    assert (corpus.folder / f"raw{suffix}").is_file()  # the client's name is only shown
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert 'id="corpus-files"' in html and name in html


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_file_of_each_new_kind_uploads_through_the_api(alice_api, alice, eager,
                                                        django_capture_on_commit_callbacks, kind):
    name, make, fmt, compression = KINDS[kind]
    with django_capture_on_commit_callbacks(execute=True):
        response = api_upload(alice_api, [(name, make())], name="Shard")
    assert response.status_code == 201, response.content
    body = alice_api.get(f"/api/corpora/{response.json()['id']}/").json()
    assert body["status"] == "ready", body["error"]
    assert [(s["name"], s["format"], s["compression"]) for s in body["sources"]] == [(name, fmt, compression)]
    assert all("path" not in s for s in body["sources"])  # where the storage keeps an upload is its own business
    assert body["sources_summary"]["files"] == 1 and body["source_kind"] == "upload"
    assert body["progress_detail"]["text"]  # the last stage the ingest reported


def test_several_files_in_one_upload_are_one_corpus_in_their_order(alice_client, alice, eager,
                                                                   django_capture_on_commit_callbacks):
    files = [(name, make()) for name, make, _, _ in KINDS.values()]
    with django_capture_on_commit_callbacks(execute=True):
        response = page_upload(alice_client, files, xhr=True, name="Mixed shards")
    assert response.status_code == 201, response.content
    corpus = the_corpus(alice)
    assert corpus.stats["documents"] == 18
    assert listed(corpus) == [(name, fmt, compression) for name, _, fmt, compression in KINDS.values()]
    raw = corpus.folder / services.RAW_FOLDER
    assert sorted(p.name for p in raw.iterdir()) == ["0000.parquet", "0001.jsonl.zst", "0002.json.gz",
                                                     services.UPLOADS_MANIFEST]
    assert corpus.size_bytes == sum(len(content) for _, content in files)
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "3 files" in html and "1 Parquet" in html and "2 JSON lines" in html
    assert "compressed: 1 gzip, 1 zstd" in html  # the totals name compressions in one order (sources.COMPRESSIONS)


def test_the_api_takes_the_file_field_repeated(alice_api, alice, eager, django_capture_on_commit_callbacks):
    first = ("a.jsonl", jsonl(documents(seed=4)))
    second = ("b.txt.bz2", bz2.compress("\n\n".join(documents(seed=5)).encode()))
    with django_capture_on_commit_callbacks(execute=True):
        response = api_upload(alice_api, [first, second])
    assert response.status_code == 201, response.content
    corpus = the_corpus(alice)
    assert listed(corpus) == [("a.jsonl", "jsonl", "none"), ("b.txt.bz2", "txt", "bz2")]
    assert corpus.stats["documents"] == 12


@pytest.mark.parametrize("archive, pack", [("shards.zip", zip_of), ("shards.tar.gz", tar_gz_of)])
def test_an_archive_of_shards_is_unpacked_by_the_ingest(alice_api, alice, eager, django_capture_on_commit_callbacks,
                                                        archive, pack):
    members = {"data/part-00001.jsonl": jsonl(documents(seed=6)),
               "data/part-00000.parquet": parquet(documents(seed=7)),
               "data/part-00002.json.gz": gzip.compress(jsonl(documents(seed=8)))}
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = api_upload(alice_api, [(archive, pack(members))])
    assert response.status_code == 201, response.content
    corpus = Corpus.objects.get(owner=alice)
    # Before the ingest: the archive as it was uploaded, nothing unpacked in the request.
    assert [f.format for f in corpus.files.all()] == ["archive"]
    raw = corpus.folder / services.RAW_FOLDER
    stored = "0000" + archive[archive.index("."):]
    assert sorted(p.name for p in raw.iterdir()) == [stored, services.UPLOADS_MANIFEST]
    for callback in queued:
        callback()
    corpus = the_corpus(alice)
    assert listed(corpus) == [(f"{archive}/data/part-00000.parquet", "parquet", "none"),
                              (f"{archive}/data/part-00001.jsonl", "jsonl", "none"),
                              (f"{archive}/data/part-00002.json.gz", "jsonl", "gzip")]
    assert corpus.stats["documents"] == 18
    assert not (raw / stored).exists() and (raw / "0000" / "data" / "part-00000.parquet").is_file()


def test_an_archive_that_unpacks_past_the_limit_fails_with_a_sentence(alice_api, alice, eager, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    import trainer.prep.corpus

    monkeypatch.setattr(trainer.prep.corpus, "UPLOAD_MAX_DECOMPRESSED_BYTES", 1000)
    with django_capture_on_commit_callbacks(execute=True):
        api_upload(alice_api, [("big.zip", zip_of({"a.jsonl": jsonl(documents(n=20))}))])
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.FAILED and corpus.error.endswith(".") and "Traceback" not in corpus.error
    assert not (corpus.folder / services.RAW_FOLDER / "0000").exists()  # nothing half unpacked


def test_several_files_over_the_limit_in_all_are_refused(alice_client, alice_api, settings):
    settings.UPLOAD_MAX_BYTES = 1000
    files = [("a.txt", b"x" * 600), ("b.txt", b"y" * 600)]
    page = page_upload(alice_client, files)
    assert "The 2 files are 1.2 KB in all; the largest upload accepted is 1.0 KB." in page.content.decode()
    response = api_upload(alice_api, files)
    assert response.status_code == 400
    assert response.json()["error"] == ("file: The 2 files are 1.2 KB in all; the largest upload accepted "
                                         "is 1.0 KB.")
    assert not Corpus.objects.exists()


def test_one_bad_file_among_several_is_named(alice_client, alice_api):
    files = [("a.txt", b"Some text."), ("notes.pdf", b"%PDF-1.4"), ("c.txt", b"")]
    response = api_upload(alice_api, files)
    assert response.status_code == 400
    assert response.json()["error"].startswith("file: “notes.pdf” is not a file type LM Workbench reads.")
    response = api_upload(alice_api, [("a.txt", b"Some text."), ("c.txt", b"")])
    assert response.json()["error"] == "file: “c.txt” is empty (0 bytes). Choose files that contain text."
    assert not Corpus.objects.exists()


def test_a_text_field_of_its_own_is_read(alice_api, alice, eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api_upload(alice_api, [("dolma.parquet", parquet(documents(seed=9), column="content"))],
                              text_field="content")
    assert response.status_code == 201 and response.json()["text_field"] == "content"
    assert the_corpus(alice).stats["documents"] == 6


def test_a_missing_text_field_fails_with_a_sentence_naming_it(alice_api, alice, eager,
                                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        api_upload(alice_api, [("dolma.parquet", parquet(documents(seed=9), column="content"))])
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.FAILED
    assert "text" in corpus.error and "content" in corpus.error and "Traceback" not in corpus.error


# ------------------------------------------------------------------ the server-side import: path checks


@pytest.fixture
def roots(tmp_path, settings):
    """An allowed root holding a folder of mixed shards, and a folder beside it that is not allowed."""
    root = tmp_path / "allowed"
    shards = root / "web" / "shards"
    shards.mkdir(parents=True)
    (shards / "part-0.parquet").write_bytes(parquet(documents(seed=11)))
    (shards / "part-1.jsonl.zst").write_bytes(zst(jsonl(documents(seed=12))))
    (shards / "part-2.json.gz").write_bytes(gzip.compress(jsonl(documents(seed=13))))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_bytes(jsonl(documents(seed=14)))
    settings.CORPUS_IMPORT_ROOTS = [root]
    return {"root": root, "shards": shards, "outside": outside}


def import_api(api, path, **fields):
    return api.post("/api/corpora/import/", {"path": str(path), **fields}, format="json")


def refused(response) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["fields"]["path"] and body["error"] == "path: " + body["fields"]["path"][0]
    message = body["fields"]["path"][0]
    assert message.endswith(".") and "Traceback" not in message
    return message


def test_an_import_with_no_roots_configured_is_refused(alice_api, settings, tmp_path):
    settings.CORPUS_IMPORT_ROOTS = []
    for dry_run in (True, False):
        message = refused(import_api(alice_api, tmp_path, dry_run=dry_run))
        assert "CORPUS_IMPORT_ROOTS" in message
    assert not Corpus.objects.exists()


def test_an_import_path_with_dot_dot_is_refused(alice_api, roots):
    message = refused(import_api(alice_api, f"{roots['root']}/web/../../outside", dry_run=True))
    assert ".." in message
    refused(import_api(alice_api, f"{roots['shards']}/../shards"))
    assert not Corpus.objects.exists()


def test_a_relative_import_path_is_refused(alice_api, roots):
    message = refused(import_api(alice_api, "web/shards", dry_run=True))
    assert "relative" in message
    assert not Corpus.objects.exists()


def test_an_absolute_path_outside_the_roots_is_refused(alice_api, roots):
    for path in (roots["outside"], roots["outside"] / "secret.jsonl", f"{roots['outside']}/*.jsonl"):
        refused(import_api(alice_api, path, dry_run=True))
        refused(import_api(alice_api, path))
    assert not Corpus.objects.exists()


def test_a_symlink_out_of_a_root_is_refused(alice_api, roots):
    link = roots["root"] / "escape"
    link.symlink_to(roots["outside"], target_is_directory=True)
    refused(import_api(alice_api, link, dry_run=True))
    refused(import_api(alice_api, link / "secret.jsonl"))
    # A link met inside a folder that is itself allowed: named, and the whole import refused.
    (roots["shards"] / "part-3.jsonl").symlink_to(roots["outside"] / "secret.jsonl")
    message = refused(import_api(alice_api, roots["shards"], dry_run=True))
    assert "part-3.jsonl" in message
    assert not Corpus.objects.exists()


def test_the_storage_folder_and_another_users_corpus_are_never_reachable(alice_api, bob, settings):
    """Even with a root that holds the app's storage (another user's uploads are there)."""
    bobs = services.corpus_create_from_upload(owner=bob, name="Bob's diary", options={},
                                              uploaded_file=SimpleUploadedFile("diary.txt", b"Dear diary."),
                                              original_filename="diary.txt")
    storage = Path(django_settings.STORAGE_ROOT)
    settings.CORPUS_IMPORT_ROOTS = [storage.parent]
    for path in (storage, bobs.folder, bobs.folder / "raw.txt", f"{storage}/corpora/*/raw.*"):
        refused(import_api(alice_api, path, dry_run=True))
        refused(import_api(alice_api, path))
    assert list(Corpus.objects.values_list("name", flat=True)) == ["Bob's diary"]


def test_the_page_says_a_refusal_beside_the_path(alice_client, roots):
    response = alice_client.post(reverse("corpora:import"), {"import-path": str(roots["outside"]),
                                                             "import-text_field": "text"})
    html = response.content.decode()
    assert response.status_code == 200
    field = html.split('data-field="path"', 1)[1].split("</div>", 1)[0]
    assert '<ul class="errorlist"><li>' in field
    assert not Corpus.objects.exists()


# ------------------------------------------------------------------ the server-side import: a good folder


def test_a_folder_is_listed_then_imported_in_place(alice_api, alice, roots, eager,
                                                   django_capture_on_commit_callbacks):
    listing = import_api(alice_api, roots["shards"], dry_run=True)
    assert listing.status_code == 200, listing.content
    body = listing.json()
    assert [(f["name"], f["format"], f["compression"]) for f in body["files"]] == [
        ("part-0.parquet", "parquet", "none"), ("part-1.jsonl.zst", "jsonl", "zstd"),
        ("part-2.json.gz", "jsonl", "gzip")]
    assert body["summary"]["files"] == 3 and body["summary"]["formats"] == {"parquet": 1, "jsonl": 2}
    assert body["summary"]["bytes"] == sum(p.stat().st_size for p in roots["shards"].iterdir())
    assert not Corpus.objects.exists()  # a dry run imports nothing

    with django_capture_on_commit_callbacks(execute=True):
        response = import_api(alice_api, roots["shards"], name="Web", minhash=True)
    assert response.status_code == 201, response.content
    corpus = the_corpus(alice)
    assert corpus.name == "Web" and corpus.source_kind == SourceKind.IMPORT and corpus.options["minhash"] is True
    assert corpus.stats["documents"] == 18
    assert [f.path for f in corpus.files.order_by("position")] == [str((roots["shards"] / n).resolve()) for n in
                                                   ("part-0.parquet", "part-1.jsonl.zst", "part-2.json.gz")]
    stored = {p.name for p in corpus.folder.iterdir()}
    assert not any(name.startswith("part-") for name in stored) and "raw" not in stored  # nothing copied
    detail = alice_api.get(f"/api/corpora/{corpus.id}/").json()
    assert detail["sources"][0]["path"].endswith("part-0.parquet")  # the user's own path, shown


def test_a_glob_is_imported_through_the_page(alice_client, alice, roots, eager, django_capture_on_commit_callbacks):
    spec = f"{roots['root']}/**/*.json.gz"
    listing = alice_client.post(reverse("corpora:import"), {"import-path": spec, "import-dry_run": "1",
                                                            "import-text_field": "text"})
    html = listing.content.decode()
    assert "part-2.json.gz" in html and "part-0.parquet" not in html
    assert "Import 1 file (" in html
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("corpora:import"), {"import-path": spec, "import-text_field": "text",
                                                                 "import-terminal_punct": "on"})
    corpus = the_corpus(alice)
    assert response.status_code == 302 and response.url == reverse("corpora:detail", args=[corpus.id])
    assert corpus.name == "allowed"  # the last part of the path that is not a pattern
    assert corpus.options["terminal_punct"] is True and listed(corpus) == [("web/shards/part-2.json.gz", "jsonl",
                                                                            "gzip")]
    page = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "Imported from the server" in page and "read in place on the server, never copied" in page


def test_a_root_removed_since_the_import_is_refused_by_the_ingest(alice_api, alice, roots, settings,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = import_api(alice_api, roots["shards"])
    assert response.status_code == 201
    settings.CORPUS_IMPORT_ROOTS = [roots["outside"]]  # the administrator changed the roots
    services.corpus_process(corpus_id=response.json()["id"])
    corpus = Corpus.objects.get(owner=alice)
    assert corpus.status == JobStatus.FAILED and corpus.error.endswith(".")
    settings.CORPUS_IMPORT_ROOTS = []
    corpus.status = JobStatus.PENDING
    corpus.save()
    services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.FAILED and "CORPUS_IMPORT_ROOTS" in corpus.error


def test_an_imported_corpus_is_its_owners_alone(alice_api, alice, bob_api, bob_client, roots, eager,
                                                django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        corpus_id = import_api(alice_api, roots["shards"], name="Alice's shards").json()["id"]
    corpus = the_corpus(alice)
    assert corpus.owner == alice
    assert bob_api.get(f"/api/corpora/{corpus_id}/").status_code == 404
    assert bob_api.delete(f"/api/corpora/{corpus_id}/").status_code == 404
    assert all(c["id"] != corpus_id for c in bob_api.get("/api/corpora/").json())
    assert bob_api.post("/api/tokenizers/", {"corpus": corpus_id}, format="json").status_code == 404
    for url in (reverse("corpora:detail", args=[corpus_id]), reverse("corpora:delete", args=[corpus_id])):
        assert bob_client.get(url).status_code == 404
    assert bob_client.post(reverse("corpora:tokenizer-create", args=[corpus_id]),
                           {"algorithm": "wordpiece", "vocab_size": 500}).status_code == 404
    assert "Alice's shards" not in bob_client.get(reverse("corpora:list")).content.decode()
    assert Corpus.objects.filter(pk=corpus_id).exists() and not Tokenizer.objects.exists()


def test_deleting_an_imported_corpus_leaves_the_imported_files(alice_api, alice, roots, eager,
                                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        corpus_id = import_api(alice_api, roots["shards"]).json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/corpora/{corpus_id}/").status_code == 204
    assert sorted(p.name for p in roots["shards"].iterdir()) == ["part-0.parquet", "part-1.jsonl.zst",
                                                                 "part-2.json.gz"]


def test_anonymous_imports_are_refused(anon_api, roots):
    response = import_api(anon_api, roots["shards"], dry_run=True)
    assert response.status_code in (401, 403) and response.json()["error"].endswith(".")


# ------------------------------------------------------------------ progress, resume


def test_each_stage_is_written_to_the_row_as_it_runs(alice, monkeypatch):
    import trainer.prep.corpus

    seen = []
    real_ingest = trainer.prep.corpus.ingest

    def watching_ingest(*args, progress, **kwargs):
        class Spy:
            def __call__(self, percent):
                progress(percent)

            def stage(self, detail):
                progress.stage(detail)
                seen.append(Corpus.objects.get(pk=corpus.pk).progress_detail)

        return real_ingest(*args, progress=Spy(), **kwargs)

    corpus = services.corpus_create_from_upload(
        owner=alice, name="c", options={},
        uploaded_files=[SimpleUploadedFile("a.parquet", parquet(documents(seed=15))),
                        SimpleUploadedFile("b.jsonl.zst", zst(jsonl(documents(seed=16))))],
    )
    monkeypatch.setattr(trainer.prep.corpus, "ingest", watching_ingest)
    services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY, corpus.error
    stages = [d.get("stage") for d in seen if d]
    assert "read_clean" in stages and stages[-1] == "split"
    last = corpus.progress_detail
    assert last["stage"] == "split" and last["label"] and last["text"].startswith(last["label"])


def test_the_stage_progress_is_throttled_but_says_each_new_stage(alice):
    from webapp.jobs.lifecycle import StageProgress

    corpus = Corpus.objects.create(owner=alice, name="c")
    progress = StageProgress(Corpus, corpus.pk, interval=3600)
    detail = {"stage": "read_clean", "label": "Reading and cleaning", "done": 412.0, "total": 1024.0, "unit": "MB",
              "rate": 9.8, "eta_seconds": 62.0}
    progress.stage(detail)
    corpus.refresh_from_db()
    assert corpus.progress_detail["text"] == "Reading and cleaning · 412 of 1,024 MB · 9.8 MB/s · about 1 min left"
    progress.stage({**detail, "done": 500.0})  # within the interval: not written
    corpus.refresh_from_db()
    assert corpus.progress_detail["done"] == 412.0
    progress.stage({**detail, "done": 1024.0, "eta_seconds": 0.0})  # the stage's end: written
    corpus.refresh_from_db()
    assert corpus.progress_detail["done"] == 1024.0
    progress.stage({"stage": "dedup", "label": "Removing duplicates", "done": 0, "total": 1, "unit": "steps"})
    corpus.refresh_from_db()
    assert corpus.progress_detail["stage"] == "dedup" and corpus.progress_detail["text"] == "Removing duplicates"


def test_the_progress_card_shows_the_stage_line(alice_client, alice):
    corpus = Corpus.objects.create(owner=alice, name="Busy", status=JobStatus.PROCESSING, progress=30,
                                   progress_detail={"stage": "read_clean", "text": "Reading and cleaning · 4 of 10 MB"})
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert '<p class="muted small mono job-stage">Reading and cleaning · 4 of 10 MB</p>' in html
    body = alice_client.get(f"/api/corpora/{corpus.id}/").json()
    assert body["progress_detail"]["text"] == "Reading and cleaning · 4 of 10 MB"


def test_an_interrupted_ingest_resumes_with_the_files_it_had(alice, monkeypatch):
    """A worker killed mid-ingest: the task comes back (the row still says processing); the corpus
    folder, its unpacked archive and the trainer's work folder are kept, and it ends ready."""
    import trainer.prep.corpus

    corpus = services.corpus_create_from_upload(
        owner=alice, name="c", options={}, uploaded_file=SimpleUploadedFile(
            "shards.zip", zip_of({"a.jsonl": jsonl(documents(seed=17)), "b.jsonl": jsonl(documents(seed=18))})),
        original_filename="shards.zip")
    real_ingest = trainer.prep.corpus.ingest
    calls = []

    def killed_ingest(sources, out_dir, **kwargs):
        calls.append([s.name for s in sources])
        (Path(out_dir) / ".ingest-work").mkdir(exist_ok=True)
        raise KeyboardInterrupt  # as a SIGTERM'd worker: not a failure of the corpus

    monkeypatch.setattr(trainer.prep.corpus, "ingest", killed_ingest)
    with pytest.raises(KeyboardInterrupt):
        services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.PROCESSING
    assert (corpus.folder / ".ingest-work").is_dir() and (corpus.folder / "raw" / "0000" / "a.jsonl").is_file()

    def resumed_ingest(sources, out_dir, **kwargs):
        calls.append([s.name for s in sources])
        return real_ingest(sources, out_dir, **kwargs)

    monkeypatch.setattr(trainer.prep.corpus, "ingest", resumed_ingest)
    services.corpus_process(corpus_id=corpus.id)  # the redelivered task
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY, corpus.error
    assert calls == [["shards.zip/a.jsonl", "shards.zip/b.jsonl"]] * 2


def test_a_corpus_made_before_issue_28_is_still_ingested(alice, eager):
    corpus = Corpus.objects.create(owner=alice, name="old", original_filename="old.jsonl.gz",
                                   options=services._cleaning_options({}).to_dict())
    corpus.folder.mkdir(parents=True)
    (corpus.folder / "raw.jsonl.gz").write_bytes(gzip.compress(jsonl(documents(seed=19))))
    assert not corpus.files.exists() and corpus.source_kind == SourceKind.UPLOAD
    services.corpus_process(corpus_id=corpus.id)
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY, corpus.error
    assert corpus.stats["documents"] == 6


# ------------------------------------------------------------------ the corpus page


def many_files(owner, n: int) -> Corpus:
    sources = [{"path": f"/x/{i}", "name": f"shard-{i:05d}.parquet", "format": "parquet", "compression": "none",
                "bytes": 1_000_000} for i in range(n)]
    corpus = Corpus.objects.create(owner=owner, name="Many", status=JobStatus.PENDING)
    services.store_files(corpus, sources)
    return corpus


def test_the_files_table_folds_past_twenty_rows(alice_client, alice):
    corpus = many_files(alice, 25)
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    visible, folded = html.split('class="split-files files-more"', 1)
    assert "shard-00019.parquet" in visible and "shard-00020.parquet" not in visible
    assert "Show the other 5 files" in folded and "shard-00024.parquet" in folded
    assert "25 files, 25.0 MB: 25 Parquet" in html
    assert "/x/1" not in html  # an upload's storage paths are not shown


def test_a_corpus_of_many_files_keeps_them_as_rows_and_lists_the_first_thousand(alice_client, alice, alice_api):
    from webapp.corpora import display

    corpus = many_files(alice, display.FILES_LISTED + 500)
    corpus.refresh_from_db()
    assert corpus.files.count() == 1500 and corpus.sources_summary["files"] == 1500
    assert list(corpus.files.values_list("position", flat=True)[:3]) == [0, 1, 2]
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    assert "1,500 files, 1.5 GB: 1,500 Parquet (the first 1,000 are listed)" in html
    assert "shard-00999.parquet" in html and "shard-01000.parquet" not in html
    listing = alice_api.get("/api/corpora/").json()
    entry = next(c for c in listing if c["id"] == str(corpus.id))
    assert entry["sources_summary"]["files"] == 1500 and len(entry["sources"]) == services.LISTED_FILES
    assert all("path" not in f for f in entry["sources"])  # an upload's storage paths stay private
    assert Corpus.objects.get(pk=corpus.pk).delete()[1]["corpora.CorpusFile"] == 1500


def test_the_admin_shows_a_corpus_with_its_first_files(alice, django_user_model, client):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")
    client.force_login(admin)
    corpus = many_files(alice, 150)
    html = client.get(f"/admin/corpora/corpus/{corpus.id}/change/").content.decode()
    assert "shard-00099.parquet" in html and "shard-00100.parquet" not in html
    assert client.get("/admin/corpora/corpus/").status_code == 200


def test_removed_text_examples_and_the_tokenizer_sample_are_shown(alice_client, alice):
    from trainer.prep.corpus import REMOVED_KEYS

    key = REMOVED_KEYS["gopher_quality"]
    corpus = Corpus.objects.create(
        owner=alice, name="Cleaned", status=JobStatus.READY, options={"gopher_quality": True},
        stats={"documents": 10, "sentences": 100, "words": 1000, "sample": {"bytes": 256_000_000, "share": 0.25}},
        removed={key: 4, "duplicate_pages": 1},
        examples={key: ["Buy buy buy now", "Click here", "### ### ###", "a fourth one"],
                  "duplicate_pages": ["The same page twice."]},
    )
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    row = html.split(f'data-removed="{key}"', 1)[1].split("</tr>", 1)[0]
    assert "Gopher quality rules" in row and "4 documents" in row
    assert "3 examples of removed text" in row and "Click here" in row and "a fourth one" not in row
    assert "1 example of removed text" in html and "The same page twice." in html
    assert "A tokenizer trains on a 256.0 MB sample: 25% of the corpus." in html


def test_the_tokenizer_page_says_what_it_was_trained_on(alice_client, alice):
    corpus = Corpus.objects.create(owner=alice, name="c", status=JobStatus.READY,
                                   stats={"sample": {"bytes": 256_000_000, "share": 0.25}})
    tokenizer = Tokenizer.objects.create(owner=alice, corpus=corpus, name="t", status=JobStatus.READY,
                                         stats={"vocab_size": 500, "sample": {"bytes": 256_000_000, "share": 0.25}})
    html = alice_client.get(reverse("corpora:tokenizer-detail", args=[tokenizer.id])).content.decode()
    assert "Trained on a 256.0 MB sample: 25% of the corpus." in html


def test_a_tokenizer_reports_its_stages_and_sample(alice, eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        corpus = services.corpus_create_from_upload(
            owner=alice, name="c", options={},
            uploaded_file=SimpleUploadedFile("a.jsonl", jsonl(documents(n=10, seed=20))), original_filename="a.jsonl")
    corpus.refresh_from_db()
    assert corpus.status == JobStatus.READY, corpus.error
    with django_capture_on_commit_callbacks(execute=True):
        tokenizer = services.tokenizer_create(owner=alice, corpus=corpus, name="", algorithm="wordpiece",
                                              vocab_size=200, lowercase=True)
    tokenizer.refresh_from_db()
    assert tokenizer.status == JobStatus.READY, tokenizer.error
    assert tokenizer.progress_detail["stage"] == "encode" and tokenizer.progress_detail["text"]
    assert tokenizer.stats["sample"] == corpus.stats["sample"]


@pytest.mark.django_db(transaction=True)  # the thread's own connection must see the row
def test_progress_from_a_thread_of_the_trainer_leaves_no_connection_open(alice):
    """The tokenizers library pulls its training text, and so reports progress, from a thread it made:
    the connection the write opened there is closed (one was left open per tokenizer trained)."""
    import threading

    from django.db import connection

    from webapp.jobs.lifecycle import StageProgress

    corpus = Corpus.objects.create(owner=alice, name="c")
    progress = StageProgress(Corpus, corpus.pk)
    left_open = []

    def report():
        progress(50)
        progress.stage({"stage": "train_tokenizer", "label": "Training the tokenizer", "done": 1, "total": 2,
                        "unit": "MB"})
        left_open.append(connection.connection is not None)

    thread = threading.Thread(target=report)
    thread.start()
    thread.join()
    corpus.refresh_from_db()
    assert corpus.progress == 50 and corpus.progress_detail["stage"] == "train_tokenizer"
    assert left_open == [False]
