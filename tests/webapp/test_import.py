"""Importing a Hugging Face model from the web: upload, checkpoint, explore; bad archives say why."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.trainer.importing_helpers import zip_with
from tests.webapp.import_helpers import hf_folder, hf_zip, imported_checkpoint
from webapp.explorer.models import ModelImport
from webapp.jobs.models import JobStatus
from webapp.runs.models import CheckpointSource

# Imports run in the worker task, enqueued on commit: commit for real and run tasks in-process.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def upload_api(api, path, name=""):
    with open(path, "rb") as f:
        return api.post("/api/explore/imports/", {"file": f, "name": name}, format="multipart")


def test_an_uploaded_bert_becomes_a_checkpoint_that_fills_masks_like_transformers(alice, alice_client, alice_api):
    import torch
    import transformers

    with open(hf_zip(), "rb") as f:
        response = alice_client.post(reverse("explorer:import"), {"file": f, "name": "tiny bert"})
    job = ModelImport.objects.get()
    assert job.status == JobStatus.READY, job.error
    ckpt = job.checkpoint
    assert response.status_code == 302 and response["Location"].endswith(f"?checkpoint={ckpt.id}")
    assert (ckpt.owner, ckpt.run, ckpt.source, ckpt.name) == (alice, None, CheckpointSource.IMPORT, "tiny bert")
    assert job.info["objectives"] == ["mlm"] and not job.folder.exists()  # the upload is gone once imported

    answer = alice_api.post("/api/explore/fill-mask/", {"checkpoint": str(ckpt.id), "text": "the cat [MASK] on the mat .",
                                                       "top_k": 3}, format="json")
    assert answer.status_code == 200, answer.json()
    ids = [2, 5, 6, 4, 8, 5, 9, 26, 3]  # [CLS] the cat [MASK] on the mat . [SEP] in the test vocabulary
    reference = transformers.BertForMaskedLM.from_pretrained(hf_folder()).eval()
    with torch.no_grad():
        top = int(reference(torch.tensor([ids])).logits[0, 3].argmax())
    assert answer.json()["masks"][0]["position"] == 3 and answer.json()["masks"][0]["predictions"][0]["id"] == top

    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").content.decode()
    assert 'optgroup label="Imported models"' in page and "tiny bert" in page
    listing = alice_client.get(reverse("explorer:import")).content.decode()
    assert "tiny bert" in listing and "Ready" in listing and "bert" in listing


CONFIG = json.dumps({"model_type": "bert"}).encode()


@pytest.mark.parametrize("entries, extra, message", [
    ({"model/../../evil.json": b"{}", "model/config.json": CONFIG}, {}, "leads outside the archive's folder"),
    ({"model/config.json": CONFIG}, {"symlink": "model/vocab.txt"}, "symbolic link"),
    ({"model/README.md": b"hi"}, {}, "has no config.json"),
    ({"model/config.json": b'{"model_type": "llama"}'}, {}, 'This is a "llama" model, which LM Workbench cannot import yet. '
                                                         "Supported model types: "),
    ({"model/config.json": CONFIG, "model/vocab.txt": b"[UNK]\n"}, {}, "no weights"),
])
def test_bad_archives_each_say_why(alice_api, tmp_path, entries, extra, message):
    response = upload_api(alice_api, zip_with(tmp_path / "model.zip", entries, **extra))
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "failed" and message in body["error"] and body["checkpoint"] is None
    assert not (tmp_path.parent / "evil.json").exists()


def test_a_file_that_is_not_an_archive_is_refused(alice_api, alice_client, tmp_path):
    fake = tmp_path / "model.zip"
    fake.write_text("not a zip at all")
    body = upload_api(alice_api, fake).json()
    assert body["status"] == "failed" and "not an archive" in body["error"]
    wrong = tmp_path / "model.rar"
    wrong.write_text("x")
    response = upload_api(alice_api, wrong)
    assert response.status_code == 400 and "is not an archive LM Workbench unpacks" in response.json()["error"]
    with open(wrong, "rb") as f:
        page = alice_client.post(reverse("explorer:import"), {"file": f})
    assert page.status_code == 400 and "is not an archive LM Workbench unpacks" in page.content.decode()


def test_an_archive_over_the_limit_is_refused_before_it_is_kept(alice_api, settings):
    settings.IMPORT_MAX_BYTES = 1000
    response = upload_api(alice_api, hf_zip())
    assert response.status_code == 400 and "the largest import accepted is" in response.json()["error"]
    assert not ModelImport.objects.exists()


def test_bob_cannot_see_or_ask_alices_imported_model(alice, bob_api, bob_client, anon_api):
    ckpt = imported_checkpoint(alice)
    body = {"checkpoint": str(ckpt.id), "text": "the [MASK] .", "top_k": 3}
    assert bob_api.post("/api/explore/fill-mask/", body, format="json").status_code == 404
    assert bob_client.get(reverse("explorer:index") + f"?checkpoint={ckpt.id}").status_code == 404
    assert anon_api.post("/api/explore/fill-mask/", body, format="json").status_code in (401, 403)
    job = ModelImport.objects.create(owner=alice, name="x", archive_suffix=".zip", checkpoint=ckpt,
                                     status=JobStatus.READY)
    assert bob_api.get(f"/api/explore/imports/{job.id}/").status_code == 404
    assert bob_api.get("/api/explore/imports/").json() == []
    assert bob_client.post(reverse("explorer:import-delete", args=[job.id])).status_code == 404


@pytest.mark.django_db  # not transactional: the on-commit callbacks are captured and run here
def test_with_the_worker_task_the_import_is_queued_then_done(alice_api, monkeypatch, django_capture_on_commit_callbacks):
    import webapp.explorer.tasks
    from webapp.explorer.imports import import_process

    sent = []

    class FakeTask:  # records the queue, then does what webapp.explorer.tasks.import_checkpoint does
        @staticmethod
        def apply_async(args, queue):
            sent.append((args, queue))
            import_process(import_id=args[0])

    monkeypatch.setattr(webapp.explorer.tasks, "import_checkpoint", FakeTask)
    with django_capture_on_commit_callbacks(execute=True):
        body = upload_api(alice_api, hf_zip()).json()
        assert body["status"] == "pending"
    job = ModelImport.objects.get(pk=body["id"])
    assert sent == [([str(job.id)], "jobs")] and job.status == JobStatus.READY and job.checkpoint is not None
    detail = alice_api.get(f"/api/explore/imports/{job.id}/").json()
    assert detail["status"] == "ready" and detail["explore_url"].endswith(str(job.checkpoint_id))


def test_deleting_an_import_removes_its_checkpoint_and_files(alice, alice_client, django_capture_on_commit_callbacks):
    ckpt = imported_checkpoint(alice)
    job = ModelImport.objects.create(owner=alice, name="x", archive_suffix=".zip", checkpoint=ckpt,
                                     status=JobStatus.READY)
    folder = ckpt.folder
    assert folder.is_dir()
    with django_capture_on_commit_callbacks(execute=True):  # the files go once the rows are gone for good
        response = alice_client.post(reverse("explorer:import-delete", args=[job.id]))
    assert response.status_code == 302
    assert not ModelImport.objects.exists() and not type(ckpt).objects.filter(pk=ckpt.pk).exists()
    assert not folder.exists()


def test_the_import_page_is_linked_from_the_explorer_and_the_runs_list(alice_client):
    url = reverse("explorer:import")
    assert f'href="{url}"' in alice_client.get(reverse("explorer:index")).content.decode()  # also with no checkpoints
    assert f'href="{url}"' in alice_client.get(reverse("runs:list")).content.decode()
    page = alice_client.get(url).content.decode()
    assert "Import a Hugging Face model" in page and "bert" in page and ".zip" in page
