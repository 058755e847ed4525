"""Import a Hugging Face model: upload -> ModelImport row -> worker -> Checkpoint (source "import").

Writes (services) and reads (selectors) of imports live here; trainer.inference.importing does the
unpacking and the conversion. `checkpoint_import` is the whole conversion for one archive
(usable from a shell or a command); `import_process` is the body of the Celery task
`webapp.explorer.tasks.import_checkpoint(import_id)`, enqueued once the upload's row is committed.
"""
from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from trainer.errors import UserError
from webapp.explorer.models import ModelImport
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint, CheckpointSource

log = logging.getLogger(__name__)

QUEUE = settings.JOBS_QUEUE  # short jobs: never behind a training run
DEFAULT_MAX_ARCHIVE_BYTES = 2 * 1024**3
DEFAULT_MAX_UNPACKED_BYTES = 4 * 1024**3
ACCEPT_ATTRIBUTE = ".zip,.tar.gz,.tgz,.tar"
INTERNAL_ERROR = ("The import stopped because of an internal error (not a problem with your archive). "
                  "It has been logged; try again later.")
QUEUE_DOWN = ("The import could not be queued because the task queue (Redis) did not answer. "
              "Check that Redis and a worker are running, then upload again.")


def max_archive_bytes() -> int:
    """The largest archive accepted (settings.IMPORT_MAX_BYTES, within the server's upload limit)."""
    limit = int(getattr(settings, "IMPORT_MAX_BYTES", DEFAULT_MAX_ARCHIVE_BYTES))
    return min(limit, int(getattr(settings, "UPLOAD_MAX_BYTES", limit)))


def max_unpacked_bytes() -> int:
    return int(getattr(settings, "IMPORT_MAX_UNPACKED_BYTES", DEFAULT_MAX_UNPACKED_BYTES))


def check_archive(filename: str, size: int) -> str:
    """The archive suffix of an acceptable upload; ValidationError with a sentence otherwise."""
    from trainer.inference.importing import archive_suffix
    from webapp.jobs.uploads import human_bytes

    suffix = archive_suffix(filename)
    if suffix is None:
        raise ValidationError(
            "“%(name)s” is not an archive LM Workbench unpacks. Upload a .zip or .tar.gz (.tgz) of the folder that "
            "save_pretrained() wrote: config.json, model.safetensors or pytorch_model.bin, and tokenizer.json "
            "(or vocab.txt).", code="extension", params={"name": filename})
    if size == 0:
        raise ValidationError("The file is empty (0 bytes).", code="empty")
    limit = max_archive_bytes()
    if size > limit:
        raise ValidationError("The archive is %(size)s; the largest import accepted is %(limit)s.", code="too_large",
                              params={"size": human_bytes(size), "limit": human_bytes(limit)})
    return suffix


# ---------------------------------------------------------------------------- selectors
def imports_for(user) -> QuerySet[ModelImport]:
    if not user.is_authenticated:
        return ModelImport.objects.none()
    return ModelImport.objects.filter(owner=user).select_related("checkpoint").order_by("-created_at")


def import_get(user, import_id) -> ModelImport:
    """One of the user's imports; Http404 for a missing one or another user's."""
    if not user.is_authenticated:
        raise Http404("Not found.")
    try:
        pk = import_id if isinstance(import_id, uuid.UUID) else uuid.UUID(str(import_id))
        return ModelImport.objects.select_related("checkpoint").get(pk=pk, owner=user)
    except (ValueError, TypeError, AttributeError, ModelImport.DoesNotExist):
        raise Http404("Not found.") from None


# ---------------------------------------------------------------------------- services
def import_create(*, owner, name: str, uploaded_file: UploadedFile, original_filename: str) -> ModelImport:
    """Keep the uploaded archive and start its import (queued, or at once without the task)."""
    suffix = check_archive(original_filename, uploaded_file.size)  # forms check this first; never trust
    job = ModelImport.objects.create(
        owner=owner, name=(name or "").strip()[:200] or _default_name(original_filename, suffix),
        original_filename=(original_filename or "")[:255], archive_suffix=suffix, size_bytes=uploaded_file.size,
    )
    job.folder.mkdir(parents=True)
    try:
        temp_path = getattr(uploaded_file, "temporary_file_path", None)
        if temp_path is not None:
            file_move_safe(temp_path(), str(job.archive_path))
        else:
            with open(job.archive_path, "wb") as out:
                for chunk in uploaded_file.chunks():
                    out.write(chunk)
    except BaseException:
        shutil.rmtree(job.folder, ignore_errors=True)
        job.delete()
        raise
    _start(job)
    job.refresh_from_db()
    return job


def import_process(*, import_id) -> None:
    """The task's body: claim a waiting import, convert it, record the checkpoint or the reason."""
    claimed = ModelImport.objects.filter(pk=import_id, status=JobStatus.PENDING).update(
        status=JobStatus.PROCESSING)
    if not claimed:  # already taken (a redelivered task) or gone
        return
    job = ModelImport.objects.select_related("owner").get(pk=import_id)
    try:
        checkpoint = checkpoint_import(owner=job.owner, name=job.name, archive_path=job.archive_path)
    except UserError as e:
        _finish(job, JobStatus.FAILED, error=str(e))
    except Exception:
        log.exception("Import %s failed", import_id)
        _finish(job, JobStatus.FAILED, error=INTERNAL_ERROR)
    else:
        from trainer.inference.importing import read_import_info

        _finish(job, JobStatus.READY, checkpoint=checkpoint, info=read_import_info(checkpoint.folder))
    finally:
        shutil.rmtree(job.folder, ignore_errors=True)


def checkpoint_import(*, owner, name: str, archive_path: str | Path) -> Checkpoint:
    """Unpack a Hugging Face model archive and make it `owner`'s checkpoint (source "import").

    Raises a UserError (trainer.inference.importing.ModelImportError) with a sentence when the archive
    is unsafe or not an importable model; nothing is left behind then."""
    from trainer.inference.importing import import_model

    checkpoint_id = uuid.uuid4()
    relative = Path("imports") / "checkpoints" / str(checkpoint_id)
    storage = Path(settings.STORAGE_ROOT)
    work = storage / "tmp" / f"import-{checkpoint_id}"  # unpacked there, and removed by import_model
    try:
        info = import_model(archive_path, storage / relative, work_dir=work, max_bytes=max_unpacked_bytes())
        return Checkpoint.objects.create(
            id=checkpoint_id, owner=owner, run=None, source=CheckpointSource.IMPORT, step=0, path=str(relative),
            name=(name or "").strip()[:200] or f"Imported {info.get('model_type', 'model')}",
        )
    except BaseException:
        shutil.rmtree(storage / relative, ignore_errors=True)
        raise


@transaction.atomic
def import_delete(*, model_import: ModelImport) -> None:
    """Remove an import, its checkpoint row and its files (a running import cannot be removed)."""
    if model_import.status == JobStatus.PROCESSING:
        raise UserError("This model is being imported right now; delete it when the import has finished.")
    checkpoint = model_import.checkpoint
    folders = [model_import.folder] + ([checkpoint.folder] if checkpoint else [])
    if checkpoint is not None:
        checkpoint.delete()
    model_import.delete()
    transaction.on_commit(lambda: [shutil.rmtree(f, ignore_errors=True) for f in folders])


def _start(job: ModelImport) -> None:
    from webapp.explorer.tasks import import_checkpoint

    pk = job.pk

    def send() -> None:
        try:
            import_checkpoint.apply_async(args=[str(pk)], queue=QUEUE)
        except Exception:  # the broker is down: say so on the page instead of a silent wait
            log.exception("Could not enqueue the import %s", pk)
            ModelImport.objects.filter(pk=pk, status=JobStatus.PENDING).update(
                status=JobStatus.FAILED, error=QUEUE_DOWN, finished_at=timezone.now())

    transaction.on_commit(send)


def _finish(job: ModelImport, status: str, *, error: str = "", checkpoint: Checkpoint | None = None,
            info: dict | None = None) -> None:
    ModelImport.objects.filter(pk=job.pk).update(status=status, error=error, checkpoint=checkpoint,
                                                 info=info or {}, finished_at=timezone.now())


def _default_name(filename: str, suffix: str) -> str:
    base = Path(filename or "model").name
    if base.lower().endswith(suffix):
        base = base[: -len(suffix)]
    return (base.strip(" .") or "Imported model")[:200]
