"""Hugging Face exports of checkpoints, as jobs on the short-jobs queue.

export_start (a page's button, POST /api/checkpoints/<id>/export/) checks the checkpoint's files
and the free space, stores a CheckpointExport row (pending) and enqueues
webapp.runs.tasks.export_checkpoint once the row is committed; export_process is that task's body:
it writes the export (trainer.export) into the checkpoint's own folder, zips it, keeps only the
zip and reports its progress on the row, which the export page polls (js/corpora.js). A failure
leaves a sentence on the row and no half-written files. A ready export is reused while the
checkpoint's weights are unchanged.

The files live in `<checkpoint folder>/exports/`, so they go with the checkpoint: the row
cascades from its checkpoint (and run), and remove_export_files (a post_delete receiver,
webapp.runs.apps) removes the folder once the deletion commits.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from trainer.errors import UserError
from webapp.jobs import lifecycle
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint, CheckpointExport
from webapp.server.storage import check_free_space

log = logging.getLogger(__name__)

EXPORT_DIR = "exports"
ARCHIVE = "hf.zip"
FILES_GONE = "This checkpoint's files are no longer on disk, so it cannot be exported."
WHAT = "exporting this checkpoint"


class ExportNotReady(UserError):
    """The export is not made yet (HTTP 409): it is under way, failed, or was never started."""

    status_code = 409


# ---------------------------------------------------------------------------- where, and how big
def export_folder(checkpoint: Checkpoint) -> Path:
    """Where a checkpoint's exports are kept: inside its own folder, so they go with it."""
    return checkpoint.folder / EXPORT_DIR


def _relative(path: Path) -> str:
    from webapp.runs.sink import storage_relative

    return storage_relative(path)


def space_needed(checkpoint: Checkpoint) -> int:
    """Bytes an export may take while it is made: the transformers folder (about the size of the
    weights) and its zip beside it, before the folder is removed."""
    weights = checkpoint.folder / "model.safetensors"
    return 2 * weights.stat().st_size if weights.is_file() else 0


def _weights(checkpoint: Checkpoint) -> Path:
    weights = checkpoint.folder / "model.safetensors"
    if not weights.is_file():
        raise UserError(FILES_GONE)
    return weights


def is_fresh(export: CheckpointExport) -> bool:
    """Ready, its zip on disk, and made after the checkpoint's weights were last written."""
    if export.status != JobStatus.READY or not export.archive.is_file():
        return False
    weights = export.checkpoint.folder / "model.safetensors"
    return weights.is_file() and export.archive.stat().st_mtime_ns >= weights.stat().st_mtime_ns


def download_name(checkpoint: Checkpoint) -> str:
    return f"{slugify(checkpoint.label) or 'checkpoint'}-hf.zip"


# ---------------------------------------------------------------------------- reads
def export_of(checkpoint: Checkpoint) -> CheckpointExport | None:
    """The checkpoint's export row (the caller has checked the checkpoint is the user's)."""
    return CheckpointExport.objects.select_related("checkpoint", "checkpoint__run").filter(
        checkpoint=checkpoint).first()


def ready_archive(checkpoint: Checkpoint) -> Path:
    """The zip to download; ExportNotReady with a sentence saying where the export stands."""
    export = export_of(checkpoint)
    if export is None:
        raise ExportNotReady("This checkpoint has not been exported yet: start the export (POST "
                             "/api/checkpoints/<id>/export/, or “Export” on its export page), then download it "
                             "when it is ready.")
    if export.in_flight:
        raise ExportNotReady(f"The export is not ready yet ({export.get_status_display().lower()}, "
                             f"{export.progress:.0f} %); download it when it is ready.")
    if export.status == JobStatus.FAILED:
        raise ExportNotReady(f"The export failed: {export.error} Start it again once that is fixed.")
    if not is_fresh(export):
        raise ExportNotReady("The export is out of date (the checkpoint's weights changed or its zip was removed); "
                             "start the export again.")
    return export.archive


# ---------------------------------------------------------------------------- writes
@transaction.atomic
def export_start(*, checkpoint: Checkpoint) -> tuple[CheckpointExport, bool]:
    """Start exporting the checkpoint unless a fresh export or one under way exists; returns
    (the row, whether a new job was queued). UserError when its files are gone or its
    model_config.json says transformers cannot hold it (trainer.export.check_exportable),
    StorageFullError (507) when the volume would be left too full."""
    from trainer.export import check_exportable

    _weights(checkpoint)
    check_exportable(checkpoint.folder)  # ELMo, adapters: a sentence now rather than a failed job
    export = CheckpointExport.objects.select_for_update().filter(checkpoint=checkpoint).first()
    if export is not None and (export.in_flight or is_fresh(export)):
        return export, False
    check_free_space(needed=space_needed(checkpoint), what=WHAT)
    fields = {"status": JobStatus.PENDING, "progress": 0.0, "error": "", "architecture": "", "size_bytes": 0,
              "finished_at": None, "path": _relative(export_folder(checkpoint))}
    if export is None:
        export = CheckpointExport.objects.create(owner_id=checkpoint.owner_id, checkpoint=checkpoint, **fields)
    else:
        for key, value in fields.items():
            setattr(export, key, value)
        export.save()
    from webapp.runs.tasks import export_checkpoint

    lifecycle.enqueue(export_checkpoint, export)
    return export, True


def export_process(*, export_id) -> None:
    """The task's body: claim the export, write the zip, record how it went (a sentence on failure)."""
    if not lifecycle.claim(CheckpointExport, export_id):
        return  # done already (a redelivered task), or its checkpoint was deleted
    export = CheckpointExport.objects.select_related("checkpoint", "checkpoint__run").get(pk=export_id)
    try:
        architecture = write_archive(export.checkpoint, progress=lifecycle.Progress(CheckpointExport, export.pk,
                                                                               end=99.0, interval=0.3))
    except Exception as e:  # noqa: BLE001 - every failure becomes the row's sentence (lifecycle.fail logs the rest)
        lifecycle.fail(CheckpointExport, export.pk, e, finished_at=timezone.now())
        return
    CheckpointExport.objects.filter(pk=export.pk).update(
        status=JobStatus.READY, progress=100.0, architecture=architecture[:100],
        size_bytes=export.archive.stat().st_size, finished_at=timezone.now())


def write_archive(checkpoint: Checkpoint, *, progress: Callable[[float], None] = lambda p: None) -> str:
    """Write `<checkpoint>/exports/hf.zip` (trainer.export, then zipped; the folder removed) and
    return the transformers class. Nothing half-written stays when it fails."""
    from trainer.export import export_checkpoint, zip_export

    _weights(checkpoint)
    check_free_space(needed=space_needed(checkpoint), what=WHAT)  # again: the disk may have filled since
    root = export_folder(checkpoint)
    folder = root / "hf"
    progress(5)
    try:
        result = export_checkpoint(checkpoint.folder, folder, name=checkpoint.label)
        progress(50)
        zip_export(result, root / ARCHIVE, top=slugify(checkpoint.label) or "checkpoint",
                   progress=lambda p: progress(50 + p / 2))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result.architecture


def remove_export_files(sender, instance: CheckpointExport, **kwargs) -> None:
    """post_delete of an export (its checkpoint or run deleted, or the row itself): its folder
    goes once the deletion commits. Only a folder inside STORAGE_ROOT is removed."""
    folder = instance.folder.resolve()
    try:
        folder.relative_to(Path(settings.STORAGE_ROOT).resolve())
    except ValueError:
        log.warning("Not removing the export folder %s: it is outside STORAGE_ROOT", folder)
        return
    lifecycle.rmtree_after_commit(folder)
