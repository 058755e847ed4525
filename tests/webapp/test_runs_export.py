"""Exports as jobs (issue 9, section 7), one per (checkpoint, format): started from the export page
or the API with a format and a license, made by a worker on the short-jobs queue with its progress
on the row (the format's writer: trainer.export.exporter), downloaded when ready, a sentence when
it fails or when the format cannot hold the checkpoint; kept in the checkpoint's own folder, so
deleting the checkpoint or its run deletes them; refused with a sentence when the storage is
nearly full."""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.jobs.models import JobStatus
from webapp.runs import exports
from webapp.runs.models import CheckpointExport, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def checkpoint(alice):
    return make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny pretraining"), real=True)


@pytest.fixture
def queued(monkeypatch):
    """Record the export task's apply_async calls instead of talking to the broker."""
    from webapp.runs import tasks

    calls = []
    monkeypatch.setattr(tasks.export_checkpoint, "apply_async", lambda *a, **kw: calls.append((a, kw)))
    return calls


def _zip(response) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_the_page_starts_the_export_and_downloads_it_when_ready(alice_client, checkpoint, eager,
                                                                 django_capture_on_commit_callbacks):
    page_url = reverse("runs:checkpoint-export", args=[checkpoint.id])
    download_url = reverse("runs:checkpoint-export-download", args=[checkpoint.id])
    html = alice_client.get(page_url).content.decode()
    assert 'id="export-start"' in html and 'id="export-download-hf"' not in html
    assert '<option value="hf" selected>' in html and 'value="mit"' in html
    early = alice_client.get(download_url, follow=True)
    assert "has not been exported as Hugging Face transformers yet" in early.content.decode()  # a sentence, no zip

    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(page_url, {"format": "hf", "license": "mit"})
    assert response.status_code == 302 and response["Location"] == page_url
    export = CheckpointExport.objects.get(checkpoint=checkpoint)
    assert export.status == JobStatus.READY and export.progress == 100.0, export.error
    assert export.format == "hf" and export.license == "mit"
    assert export.archive == checkpoint.folder / "exports" / "hf" / "hf.zip" and export.archive.is_file()
    assert [p.name for p in export.folder.iterdir()] == ["hf.zip"]  # only the zip is kept
    assert export.architecture == "BertForPreTraining" and export.size_bytes == export.archive.stat().st_size

    html = alice_client.get(page_url).content.decode()
    assert f"{download_url}?fmt=hf" in html and "BertForPreTraining" in html and "license mit" in html
    response = alice_client.get(download_url, {"fmt": "hf"})
    assert "tiny-pretraining-step-10-hf.zip" in response["Content-Disposition"]
    archive = _zip(response)
    names = {n.split("/", 1)[1] for n in archive.namelist()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= names
    top = archive.namelist()[0].split("/")[0]
    assert json.loads(archive.read(f"{top}/config.json"))["architectures"] == ["BertForPreTraining"]
    from huggingface_hub import ModelCard

    card = ModelCard(archive.read(f"{top}/README.md").decode())
    assert card.data.license == "mit" and card.data.library_name == "transformers"


def test_the_api_queues_the_export_on_the_jobs_queue_and_reports_it(alice_api, bob_api, checkpoint, queued,
                                                                    django_capture_on_commit_callbacks):
    job_url = reverse("api-checkpoint-export-job", args=[checkpoint.id])
    zip_url = reverse("api-checkpoint-export", args=[checkpoint.id])
    missing = alice_api.get(job_url)
    assert missing.status_code == 404 and "has not been exported as hf yet" in missing.json()["error"]

    with django_capture_on_commit_callbacks(execute=True):
        started = alice_api.post(job_url, {"format": "hf", "license": "apache-2.0"}, format="json")
    assert started.status_code == 202, started.content
    body = started.json()
    assert body["status"] == "pending" and body["download_url"] is None and body["progress"] == 0.0
    assert body["format"] == "hf" and body["license"] == "apache-2.0"
    assert len(queued) == 1 and queued[0][1]["queue"] == "jobs" and queued[0][1]["args"] == [body["id"]]
    early = alice_api.get(zip_url)
    assert early.status_code == 409 and "not ready yet" in early.json()["error"]
    with django_capture_on_commit_callbacks(execute=True):
        again = alice_api.post(job_url, {"license": "apache-2.0"}, format="json")  # under way: not queued twice
    assert again.status_code == 200 and again.json()["id"] == body["id"] and len(queued) == 1

    exports.export_process(export_id=body["id"])  # what the worker does
    done = alice_api.get(job_url).json()
    assert done["status"] == "ready" and done["progress"] == 100.0 and done["download_url"] == f"{zip_url}?fmt=hf"
    response = alice_api.get(done["download_url"])
    assert response.status_code == 200 and response["Content-Type"] == "application/zip", response.content
    assert "tiny-pretraining-step-10-hf.zip" in response["Content-Disposition"]
    with django_capture_on_commit_callbacks(execute=True):
        reused = alice_api.post(job_url, {"license": "apache-2.0"}, format="json")  # ready, same license: reused
    assert reused.status_code == 200 and len(queued) == 1
    with django_capture_on_commit_callbacks(execute=True):
        relicensed = alice_api.post(job_url, {"license": "mit"}, format="json")  # another license: made again
    assert relicensed.status_code == 202 and relicensed.json()["id"] == body["id"] and len(queued) == 2

    for url in (job_url, zip_url):
        assert bob_api.get(url).status_code == 404
    assert bob_api.post(job_url).status_code == 404


def test_a_stale_export_is_made_again(alice_api, checkpoint, queued, django_capture_on_commit_callbacks):
    job_url = reverse("api-checkpoint-export-job", args=[checkpoint.id])
    export, _ = exports.export_start(checkpoint=checkpoint)
    exports.export_process(export_id=export.id)
    weights = checkpoint.folder / "model.safetensors"
    later = export.archive.stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(later, later))  # the weights written again after the export
    stale = alice_api.get(reverse("api-checkpoint-export", args=[checkpoint.id]))
    assert stale.status_code == 409 and "out of date" in stale.json()["error"]
    with django_capture_on_commit_callbacks(execute=True):
        restarted = alice_api.post(job_url)
    assert restarted.status_code == 202 and restarted.json()["status"] == "pending"


def test_the_progress_bar_follows_an_export_under_way(alice_client, checkpoint, queued):
    exports.export_start(checkpoint=checkpoint)
    html = alice_client.get(reverse("runs:checkpoint-export", args=[checkpoint.id])).content.decode()
    assert f'data-job-url="{reverse("api-checkpoint-export-job", args=[checkpoint.id])}?fmt=hf"' in html
    assert 'data-job-badge="#export-status-hf"' in html and 'id="export-status-hf"' in html
    assert "js/corpora.js" in html and 'id="export-download-hf"' not in html


def test_a_failed_export_says_why_and_leaves_nothing(alice_client, alice_api, checkpoint, queued, monkeypatch):
    from trainer import export as trainer_export

    def refuse(*args, **kwargs):
        raise trainer_export.ExportError("This model cannot be written in the Hugging Face format: no such class.")

    monkeypatch.setattr(trainer_export, "export_checkpoint", refuse)
    export, _ = exports.export_start(checkpoint=checkpoint)
    exports.export_process(export_id=export.id)
    export.refresh_from_db()
    assert export.status == JobStatus.FAILED and "no such class" in export.error
    assert not any((checkpoint.folder / "exports").glob("*"))
    body = alice_api.get(reverse("api-checkpoint-export-job", args=[checkpoint.id])).json()
    assert body["status"] == "failed" and body["error"] == export.error and body["download_url"] is None
    html = alice_client.get(reverse("runs:checkpoint-export", args=[checkpoint.id])).content.decode()
    assert "The export failed: This model cannot be written" in html and 'id="export-start"' in html

    def crash(*args, **kwargs):
        raise RuntimeError("an internal bug, not for the user's eyes")

    monkeypatch.setattr(trainer_export, "export_checkpoint", crash)
    export, started = exports.export_start(checkpoint=checkpoint)
    assert started
    exports.export_process(export_id=export.id)
    export.refresh_from_db()
    assert export.status == JobStatus.FAILED and "internal error" in export.error and "bug" not in export.error


def test_a_checkpoint_without_files_cannot_be_exported(alice, alice_client, alice_api, queued):
    gone = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED), step=10)  # a row without files
    api = alice_api.post(reverse("api-checkpoint-export-job", args=[gone.id]))
    assert api.status_code == 400 and "no longer on disk, so it cannot be exported" in api.json()["error"]
    page = alice_client.post(reverse("runs:checkpoint-export", args=[gone.id]))
    assert page.status_code == 400 and "no longer on disk" in page.content.decode()
    assert not CheckpointExport.objects.exists() and not queued


def test_the_storage_guard_refuses_an_export_before_anything_is_written(alice_client, alice_api, checkpoint, queued,
                                                                        monkeypatch, settings):
    from webapp.server import storage

    settings.STORAGE_MIN_FREE_BYTES = 10**9
    monkeypatch.setattr(storage, "free_bytes", lambda: 10**9 + 1000)  # less than twice the weights above the floor
    api = alice_api.post(reverse("api-checkpoint-export-job", args=[checkpoint.id]))
    assert api.status_code == 507 and "storage is nearly full" in api.json()["error"]
    assert "exporting this checkpoint cannot start now" in api.json()["error"]
    page = alice_client.post(reverse("runs:checkpoint-export", args=[checkpoint.id]))
    assert page.status_code == 507 and "storage is nearly full" in page.content.decode()
    assert not CheckpointExport.objects.exists() and not queued

    monkeypatch.setattr(storage, "free_bytes", lambda: 10**12)
    export, _ = exports.export_start(checkpoint=checkpoint)
    monkeypatch.setattr(storage, "free_bytes", lambda: 10**9 + 1000)  # the disk filled while it waited
    exports.export_process(export_id=export.id)
    export.refresh_from_db()
    assert export.status == JobStatus.FAILED and "storage is nearly full" in export.error
    assert not (checkpoint.folder / "exports").exists() or not any((checkpoint.folder / "exports").iterdir())


@pytest.mark.parametrize("delete", ["checkpoint", "run"])
def test_deleting_the_checkpoint_or_its_run_deletes_its_export(delete, checkpoint, queued,
                                                               django_capture_on_commit_callbacks):
    export, _ = exports.export_start(checkpoint=checkpoint)
    exports.export_process(export_id=export.id)
    export.refresh_from_db()
    folder = export.folder
    assert export.archive.is_file() and folder.is_relative_to(checkpoint.folder)
    with django_capture_on_commit_callbacks(execute=True):
        (checkpoint if delete == "checkpoint" else checkpoint.run).delete()
    assert not CheckpointExport.objects.filter(pk=export.pk).exists()
    assert not folder.exists()
    assert (checkpoint.folder / "model.safetensors").is_file()  # only the export's own files go


@pytest.mark.parametrize("change, sentence", [
    ({"adapters": {"size": 8}}, "it carries bottleneck adapters (size 8)"),
    ({"family": "elmo"}, "ELMo has no transformers class"),
])
def test_what_transformers_cannot_hold_is_refused_before_a_job_is_queued(alice_api, checkpoint, queued, change,
                                                                        sentence):
    path = checkpoint.folder / "model_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    response = alice_api.post(reverse("api-checkpoint-export-job", args=[checkpoint.id]))
    assert response.status_code == 400 and sentence in response.json()["error"]
    assert not CheckpointExport.objects.exists() and not queued


@pytest.fixture
def fake_formats(monkeypatch):
    """An ONNX writer that writes a stand-in file (trainer.export_onnx may not exist yet, and the
    dispatch is what is tested here), and a GGUF module that refuses this BERT checkpoint."""
    import sys
    import types

    from trainer.export import ExportError, ExportResult
    from trainer.model_card import write_model_card

    calls = []

    def export_onnx(checkpoint_dir, out_dir, *, name="", license="other", progress=lambda p: None):
        calls.append({"checkpoint": checkpoint_dir, "name": name, "license": license})
        out = Path(out_dir)
        out.mkdir(parents=True)
        (out / "model.onnx").write_bytes(b"onnx stand-in")
        write_model_card(checkpoint_dir, out, fmt="onnx", architecture="BertModel", name=name, license=license,
                         files=["model.onnx"])
        return ExportResult(out, "BertModel", sorted(p.name for p in out.iterdir()))

    def refuse(checkpoint_dir):
        raise ExportError("A GGUF export is made of GPT-2 checkpoints only; this one is a bert model.")

    onnx = types.ModuleType("trainer.export_onnx")
    onnx.export_onnx, onnx.check_exportable = export_onnx, lambda checkpoint_dir: None
    gguf = types.ModuleType("trainer.export_gguf")
    gguf.export_gguf, gguf.check_exportable = export_onnx, refuse
    monkeypatch.setitem(sys.modules, "trainer.export_onnx", onnx)
    monkeypatch.setitem(sys.modules, "trainer.export_gguf", gguf)
    return calls


def test_a_second_format_has_its_own_row_and_zip_beside_the_hf_one(alice_api, alice_client, checkpoint, queued,
                                                                   fake_formats):
    from huggingface_hub import ModelCard

    job_url = reverse("api-checkpoint-export-job", args=[checkpoint.id])
    hf, _ = exports.export_start(checkpoint=checkpoint)
    exports.export_process(export_id=hf.id)
    started = alice_api.post(job_url, {"format": "onnx", "license": "cc-by-4.0"}, format="json")
    assert started.status_code == 202, started.content
    exports.export_process(export_id=started.json()["id"])
    rows = {e.format: e for e in CheckpointExport.objects.filter(checkpoint=checkpoint)}
    assert set(rows) == {"hf", "onnx"} and all(e.status == JobStatus.READY for e in rows.values())
    assert fake_formats == [{"checkpoint": checkpoint.folder, "name": checkpoint.label, "license": "cc-by-4.0"}]
    assert rows["onnx"].archive == checkpoint.folder / "exports" / "onnx" / "onnx.zip"
    assert rows["hf"].archive.is_file()  # the ONNX export left the HF one as it was

    onnx = alice_api.get(job_url, {"fmt": "onnx"}).json()
    assert onnx["format"] == "onnx" and onnx["architecture"] == "BertModel"
    response = alice_api.get(onnx["download_url"])
    assert response.status_code == 200 and "tiny-pretraining-step-10-onnx.zip" in response["Content-Disposition"]
    archive = _zip(response)
    top = archive.namelist()[0].split("/")[0]
    assert {f"{top}/model.onnx", f"{top}/README.md"} == set(archive.namelist())
    card = ModelCard(archive.read(f"{top}/README.md").decode())
    assert card.data.library_name == "onnx" and card.data.license == "cc-by-4.0" and "onnx" in card.data.tags
    assert "InferenceSession" in card.text
    assert alice_api.get(job_url).json()["format"] == "hf"  # no format: the HF export, as before

    html = alice_client.get(reverse("runs:checkpoint-export", args=[checkpoint.id])).content.decode()
    assert 'id="export-download-hf"' in html and 'id="export-download-onnx"' in html
    # GGUF refuses this checkpoint: its sentence on the page, and it is not offered
    assert "GGUF export is made of GPT-2 checkpoints only" in html and '<option value="gguf"' not in html


def test_a_format_that_cannot_hold_the_checkpoint_is_refused_with_its_sentence(alice_api, alice_client, bob_api,
                                                                            checkpoint, queued, fake_formats,
                                                                            monkeypatch):
    from trainer import export as trainer_export

    job_url = reverse("api-checkpoint-export-job", args=[checkpoint.id])
    refused = alice_api.post(job_url, {"format": "gguf"}, format="json")
    assert refused.status_code == 400 and "GPT-2 checkpoints only" in refused.json()["error"]
    unknown = alice_api.post(job_url, {"format": "tflite"}, format="json")
    assert unknown.status_code == 400 and 'There is no "tflite" export; the formats are hf, onnx, gguf.' in \
        unknown.json()["error"]
    bad_license = alice_api.post(job_url, {"format": "hf", "license": "beerware"}, format="json")
    assert bad_license.status_code == 400 and '"beerware" is not a license an export can name' in \
        bad_license.json()["error"]
    page = alice_client.post(reverse("runs:checkpoint-export", args=[checkpoint.id]), {"format": "gguf"})
    assert page.status_code == 400 and "GPT-2 checkpoints only" in page.content.decode()
    page = alice_client.post(reverse("runs:checkpoint-export", args=[checkpoint.id]), {"license": "beerware"})
    assert page.status_code == 400 and "is not a license an export can name" in page.content.decode()
    assert bob_api.post(job_url, {"format": "onnx"}, format="json").status_code == 404
    assert not CheckpointExport.objects.exists() and not queued

    # a format whose module is not installed: a sentence for it, and HF goes on working
    monkeypatch.setitem(trainer_export.EXPORTERS, "onnx", ("trainer.no_such_exporter", "export_onnx"))
    missing = alice_api.post(job_url, {"format": "onnx"}, format="json")
    assert missing.status_code == 400 and "The ONNX export is not available on this installation" in \
        missing.json()["error"]
    assert alice_api.post(job_url, {"format": "hf"}, format="json").status_code == 202


def test_an_export_made_before_the_formats_is_an_hf_export(checkpoint, queued):
    """The migration's rows: format "hf", their zip still at exports/hf.zip."""
    export, _ = exports.export_start(checkpoint=checkpoint)
    exports.export_process(export_id=export.id)
    old = checkpoint.folder / "exports" / "hf.zip"
    export.refresh_from_db()
    export.archive.rename(old)
    CheckpointExport.objects.filter(pk=export.pk).update(path=str(Path(export.path).parent))
    export.refresh_from_db()
    assert export.format == "hf" and export.archive == old and exports.is_fresh(export)
    assert exports.ready_archive(checkpoint) == old
