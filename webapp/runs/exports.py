"""Exports of checkpoints (Hugging Face transformers, ONNX, GGUF), as jobs on the short-jobs queue.

export_start (a page's button, POST /api/checkpoints/<id>/export/ with {"format", "license"})
checks the checkpoint's files, whether that format can hold it (trainer.export.check_exportable,
JSON only), the license and the free space, stores the CheckpointExport row of that (checkpoint,
format) (pending) and enqueues webapp.runs.tasks.export_checkpoint once the row is committed;
export_process is that task's body: it writes the export with the format's own writer
(trainer.export.exporter, imported only then, so a format whose module is missing fails alone)
into the checkpoint's own folder, zips it, keeps only the zip and reports its progress on the row,
which the export page polls (js/corpora.js). A failure leaves a sentence on the row and no
half-written files. A ready export is reused while the checkpoint's weights and the license are
unchanged.

The files live in `<checkpoint folder>/exports/<format>/`, so they go with the checkpoint: the row
cascades from its checkpoint (and run), and remove_export_files (a post_delete receiver,
webapp.runs.apps) removes the folder once the deletion commits. Before the export, the run's
record for the model card (trainer.model_card.RECORD_FILE: its corpus and tokenizer folders, its
dataset and that dataset's baselines, which only the database knows) is written in the run folder.
"""
from __future__ import annotations

import json
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
from webapp.runs.models import Checkpoint, CheckpointExport, ExportFormat
from webapp.server.storage import check_free_space

log = logging.getLogger(__name__)

EXPORT_DIR = "exports"
FORMATS = tuple(ExportFormat.values)  # what the page offers, in its order
FILES_GONE = "This checkpoint's files are no longer on disk, so it cannot be exported."
WHAT = "exporting this checkpoint"


class ExportNotReady(UserError):
    """The export is not made yet (HTTP 409): it is under way, failed, or was never started."""

    status_code = 409


# ---------------------------------------------------------------------------- where, and how big
def export_folder(checkpoint: Checkpoint, fmt: str = ExportFormat.HF) -> Path:
    """Where a checkpoint's `fmt` export is kept: inside its own folder, so it goes with it."""
    return checkpoint.folder / EXPORT_DIR / fmt


def _relative(path: Path) -> str:
    from webapp.runs.sink import storage_relative

    return storage_relative(path)


def space_needed(checkpoint: Checkpoint) -> int:
    """Bytes an export may take while it is made: the exported folder (about the size of the
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


def download_name(checkpoint: Checkpoint, fmt: str = ExportFormat.HF) -> str:
    return f"{slugify(checkpoint.label) or 'checkpoint'}-{fmt}.zip"


def check_format(fmt: str) -> str:
    """The format, or a UserError with a sentence naming the ones there are."""
    if fmt not in FORMATS:
        raise UserError(f"There is no {fmt!r} export; the formats are {', '.join(FORMATS)}.")
    return fmt


def refusal(checkpoint: Checkpoint, fmt: str) -> str:
    """Why `fmt` cannot hold this checkpoint, as trainer.export.check_exportable says (JSON only:
    nothing is loaded); "" when it can."""
    from trainer.export import check_exportable

    try:
        check_exportable(checkpoint.folder, fmt)
    except UserError as e:
        return str(e)
    return ""


def formats_offered(checkpoint: Checkpoint) -> list[dict]:
    """Each format for the page: {"format", "label", "refusal" (a sentence, "" when it is offered),
    "export" (its row or None), "fresh"}."""
    rows = {e.format: e for e in CheckpointExport.objects.filter(checkpoint=checkpoint)}
    out = []
    for fmt, label in ExportFormat.choices:
        export = rows.get(fmt)
        out.append({"format": fmt, "label": label, "refusal": refusal(checkpoint, fmt), "export": export,
                    "fresh": export is not None and is_fresh(export)})
    return out


# ---------------------------------------------------------------------------- reads
def export_of(checkpoint: Checkpoint, fmt: str = ExportFormat.HF) -> CheckpointExport | None:
    """The checkpoint's `fmt` export row (the caller has checked the checkpoint is the user's)."""
    return CheckpointExport.objects.select_related("checkpoint", "checkpoint__run").filter(
        checkpoint=checkpoint, format=fmt).first()


def ready_archive(checkpoint: Checkpoint, fmt: str = ExportFormat.HF) -> Path:
    """The zip to download; ExportNotReady with a sentence saying where the export stands."""
    check_format(fmt)
    export = export_of(checkpoint, fmt)
    name = ExportFormat(fmt).label
    if export is None:
        raise ExportNotReady(f"This checkpoint has not been exported as {name} yet: start the export (POST "
                             "/api/checkpoints/<id>/export/, or “Export” on its export page), then download "
                             "it when it is ready.")
    if export.in_flight:
        raise ExportNotReady(f"The {name} export is not ready yet ({export.get_status_display().lower()}, "
                             f"{export.progress:.0f} %); download it when it is ready.")
    if export.status == JobStatus.FAILED:
        raise ExportNotReady(f"The {name} export failed: {export.error} Start it again once that is fixed.")
    if not is_fresh(export):
        raise ExportNotReady(f"The {name} export is out of date (the checkpoint's weights changed or its zip was "
                             "removed); start the export again.")
    return export.archive


# ---------------------------------------------------------------------------- writes
@transaction.atomic
def export_start(*, checkpoint: Checkpoint, fmt: str = ExportFormat.HF,
                 license: str = "other") -> tuple[CheckpointExport, bool]:
    """Start exporting the checkpoint as `fmt` unless a fresh export of it with that license, or one
    under way, exists; returns (the row, whether a new job was queued). UserError with a sentence
    for an unknown format or license, when its files are gone or its model_config.json says the
    format cannot hold it (trainer.export.check_exportable), StorageFullError (507) when the volume
    would be left too full."""
    from trainer.export import check_exportable
    from trainer.model_card import check_license

    check_format(fmt)
    license = check_license(license)
    _weights(checkpoint)
    check_exportable(checkpoint.folder, fmt)  # ELMo, adapters, a GPT-only format: a sentence, not a failed job
    export = CheckpointExport.objects.select_for_update().filter(checkpoint=checkpoint, format=fmt).first()
    if export is not None and (export.in_flight or (is_fresh(export) and export.license == license)):
        return export, False
    check_free_space(needed=space_needed(checkpoint), what=WHAT)
    fields = {"status": JobStatus.PENDING, "progress": 0.0, "error": "", "architecture": "", "size_bytes": 0,
              "finished_at": None, "license": license, "path": _relative(export_folder(checkpoint, fmt))}
    if export is None:
        export = CheckpointExport.objects.create(owner_id=checkpoint.owner_id, checkpoint=checkpoint, format=fmt,
                                                 **fields)
    else:
        if export.path != fields["path"]:  # a row from before the formats: its zip was exports/hf.zip
            export.archive.unlink(missing_ok=True)
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
        architecture = write_archive(export, progress=lifecycle.Progress(CheckpointExport, export.pk, end=99.0,
                                                                         interval=0.3))
    except Exception as e:  # noqa: BLE001 - every failure becomes the row's sentence (lifecycle.fail logs the rest)
        lifecycle.fail(CheckpointExport, export.pk, e, finished_at=timezone.now())
        return
    CheckpointExport.objects.filter(pk=export.pk).update(
        status=JobStatus.READY, progress=100.0, architecture=architecture[:100],
        size_bytes=export.archive.stat().st_size, finished_at=timezone.now())


def write_run_record(checkpoint: Checkpoint) -> None:
    """What the model card needs that only the database knows, in the run folder
    (trainer.model_card.RECORD_FILE): the corpus and tokenizer folders of a pre-training run, the
    dataset and its baselines of a fine-tuning one. Nothing for an imported checkpoint; a run
    folder that cannot be written leaves the card saying "not recorded"."""
    from trainer.model_card import RECORD_FILE

    run = checkpoint.run
    if run is None:
        return
    record: dict = {}
    if run.corpus_id:
        record.update(corpus_dir=str(run.corpus.folder), corpus_name=run.corpus.name)
    if run.tokenizer_id:
        record["tokenizer_dir"] = str(run.tokenizer.folder)
    if run.dataset_id:
        record["dataset"] = {"name": run.dataset.name, "baselines": run.dataset.baselines or {}}
    if run.base_checkpoint_id and run.base_checkpoint.run_id and run.base_checkpoint.run_id != run.pk:
        write_run_record(run.base_checkpoint)  # a fine-tuned model's corpus is its base run's
    try:
        run.folder.mkdir(parents=True, exist_ok=True)
        (run.folder / RECORD_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    except OSError:
        log.warning("Could not write the run record of %s for its model card", run.pk, exc_info=True)


def write_archive(export: CheckpointExport, *, progress: Callable[[float], None] = lambda p: None) -> str:
    """Write `<checkpoint>/exports/<format>/<format>.zip` (the format's writer, trainer.export.exporter,
    then zipped; its folder removed) and return the exported class. Nothing half-written stays when
    it fails."""
    from trainer.export import exporter, zip_export
    from trainer.training.retention import reading

    checkpoint, fmt = export.checkpoint, export.format
    _weights(checkpoint)
    check_free_space(needed=space_needed(checkpoint), what=WHAT)  # again: the disk may have filled since
    write = exporter(fmt)  # imported now: a format whose module is missing fails alone, with a sentence
    write_run_record(checkpoint)
    root = export.folder
    folder = root / "files"
    progress(5)
    try:
        with reading(checkpoint.folder):  # the run's retention leaves it alone meanwhile (a sentence if it is gone)
            result = write(checkpoint.folder, folder, name=checkpoint.label, license=export.license,
                           progress=lambda p: progress(5 + 0.45 * p))
            progress(50)
            zip_export(result, export.archive, top=f"{slugify(checkpoint.label) or 'checkpoint'}-{fmt}",
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
