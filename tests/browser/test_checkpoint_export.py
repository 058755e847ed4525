"""A checkpoint's exports in the system Chromium: "Export" on the run's checkpoint row opens the
export page, which offers the formats that can hold the checkpoint (Hugging Face here; a format
that refuses it shows its sentence instead) and the license; "Export" queues the chosen format's
job and the page follows its progress (the worker's part is run by the test, first a progress
report, then the export itself) until the download link appears; the zip it downloads is a folder
transformers loads (config.json and the weights) with a model card naming the license."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
import safetensors.torch

from tests.webapp.runs_helpers import make_checkpoint, make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def checkpoint(alice):
    from webapp.runs.models import RunStatus

    return make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)


def test_export_shows_its_progress_then_the_download_of_a_loadable_zip(checkpoint, alice_cookie, live_server_page,
                                                                        monkeypatch, shots):
    from django.db import connections

    from webapp.jobs.models import JobStatus
    from webapp.runs import exports
    from webapp.runs.models import CheckpointExport
    from webapp.runs.tasks import export_checkpoint

    queued = []
    monkeypatch.setattr(export_checkpoint, "apply_async", lambda *a, **kw: queued.append(a))  # no worker
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{checkpoint.run_id}/")
    page.click(f"#checkpoints-body tr[data-step='{checkpoint.step}'] a:has-text('Export')")
    page.wait_for_selector("#export-start")
    assert page.is_hidden("#export-download-hf")
    offered = page.eval_on_selector_all("#export-format option", "options => options.map(o => o.value)")
    refused = {f: page.text_content(f"#export-refusal-{f}") for f in ("onnx", "gguf")
               if page.query_selector(f"#export-refusal-{f}")}
    assert "hf" in offered and not set(refused) & set(offered)  # a refused format is not offered...
    assert all(text.strip().endswith(".") for text in refused.values())  # ...and says why in a sentence
    page.select_option("#export-format", "hf")
    page.select_option("#export-license", "apache-2.0")

    page.click("#export-start")
    page.wait_for_selector(".job[data-job-url] .progress")
    assert "Waiting for a worker" in page.text_content(".job-label") and len(queued) == 1

    export = CheckpointExport.objects.get(checkpoint=checkpoint, format="hf")  # the worker takes it, half way
    assert export.license == "apache-2.0"
    CheckpointExport.objects.filter(pk=export.pk).update(status=JobStatus.PROCESSING, progress=50.0)
    page.wait_for_function("() => document.querySelector('.job-percent').textContent.trim() === '50 %'")
    assert page.text_content(".job-label").strip() == "Processing…"
    # the heading's badge follows the bar: no "Waiting for a worker" above a bar at 50% (issue 21)
    page.wait_for_function("() => document.getElementById('export-status-hf').textContent.trim() === 'Processing'")
    assert "processing" in page.get_attribute("#export-status-hf", "class")
    assert page.get_attribute(".progress > div", "style").replace(" ", "") == "width:50%;"

    exports.export_process(export_id=export.pk)  # and finishes: the page reloads with the download
    page.wait_for_selector("#export-download-hf")
    assert "BertForPreTraining" in page.text_content("#export-ready-hf")
    assert "license apache-2.0" in page.text_content("#export-ready-hf")
    page.screenshot(path=str(shots / "checkpoint-export.png"), full_page=True)
    with page.expect_download() as download:
        page.click("#export-download-hf")
    archive = zipfile.ZipFile(io.BytesIO(download.value.path().read_bytes()))
    assert archive.testzip() is None
    names = set(archive.namelist())
    tops = {name.split("/")[0] for name in names}
    assert len(tops) == 1, names  # one folder, to unzip and hand to from_pretrained
    folder = f"{tops.pop()}/"
    assert {f"{folder}config.json", f"{folder}model.safetensors"} <= names, names
    assert json.loads(archive.read(f"{folder}config.json"))["architectures"] == ["BertForPreTraining"]
    weights = safetensors.torch.load(archive.read(f"{folder}model.safetensors"))
    assert any(name.endswith("word_embeddings.weight") for name in weights) and len(weights) > 10
    assert download.value.suggested_filename.endswith("-hf.zip")
    assert "license: apache-2.0" in archive.read(f"{folder}README.md").decode()
    connections.close_all()  # this test's own queries ran in Playwright's loop, on a connection of their own
