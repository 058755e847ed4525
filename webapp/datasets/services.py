"""Writes for labelled datasets: upload (sniffed at once), demo, mapping confirmation, the ingest job,
delete. The trainer does the reading and checking (trainer.prep.labelled); this module keeps the
rows and files in step with it.

Nothing is half-stored: an upload whose first rows cannot be read is refused with the trainer's
sentence and leaves no row and no file; ingest writes its output through a temporary folder and
a failed one leaves only the upload, so the dataset can be mapped again.
"""
from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from webapp.datasets.models import Dataset
from webapp.datasets.uploads import (ACCEPTED_SUFFIXES, ARCHIVE_SUFFIX, check_dataset_upload, check_split_upload,
                                     check_split_uploads)
from webapp.jobs import lifecycle
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.models import JobStatus
from webapp.jobs.uploads import keep_upload

log = logging.getLogger(__name__)

__all__ = ["check_choices", "current_choices", "dataset_baselines", "dataset_confirm_mapping",
           "dataset_create_demo", "dataset_create_from_upload", "dataset_delete", "dataset_process", "default_split",
           "demo_label", "raw_path", "split_files", "split_origins"]

RESULT_FIELDS = {"sizes": {}, "labels": [], "label_counts": {}, "label_stats": {}, "warnings": [], "examples": [],
                 "baselines": {}}


def raw_path(dataset: Dataset) -> Path:
    """Where the upload of `dataset` is stored: always `raw` plus the accepted suffix (a file per
    split: the train file's)."""
    matches = sorted(dataset.folder.glob("raw.*"))
    return matches[0] if matches else dataset.folder / "raw.csv"


def _split_target(folder: Path, split: str, suffix: str) -> Path:
    """raw.<ext> for the train file (or the one file), raw-<split>.<ext> for the others."""
    return folder / (f"raw{suffix}" if split == "train" else f"raw-{split}{suffix}")


def split_files(dataset: Dataset) -> list[str]:
    """The splits a dataset uploaded as a file per split has files for, in split order (jsonb keeps no
    order); [] for one file."""
    from trainer.prep.labelled import SPLITS

    return [split for split in SPLITS if split in dataset.files] if len(dataset.files) > 1 else []


def _split_paths(dataset: Dataset) -> dict[str, Path]:
    """{split: stored file} of a dataset in a file per split."""
    paths = {"train": raw_path(dataset)}
    for split in split_files(dataset)[1:]:
        paths[split] = next(iter(sorted(dataset.folder.glob(f"raw-{split}.*"))), dataset.folder / f"raw-{split}")
    return paths


def _format_name(dataset: Dataset) -> str:
    """The name whose extension tells the stored files' format: the train file's, else the upload's."""
    return dataset.files.get("train") or dataset.original_filename


def split_origins(dataset: Dataset) -> dict[str, str]:
    """Where each split's examples come from, in words, once the split is confirmed ({} before)."""
    from trainer.prep.labelled import origins

    if not dataset.split_spec:
        return {}
    names = dict(dataset.files) if split_files(dataset) else {"all": _format_name(dataset)}
    return origins(dataset.split_spec, names)


def default_split(mapping: Mapping[str, str], files: list[str] | tuple = ()) -> dict:
    """By the files when there is one per split, else by the split column when one is mapped, else a
    seeded random 0.8 / 0.1 / 0.1 (with files: 0.1 of the train file is validation when there is no
    validation file)."""
    from trainer.prep.labelled import SplitSpec

    return SplitSpec(strategy=_default_strategy(mapping, files)).to_dict()


def _default_strategy(mapping: Mapping[str, str], files) -> str:
    return "files" if len(files) > 1 else "column" if "split" in mapping.values() else "random"


def demo_label(name: str) -> str:
    """A demo's name as a page shows it: its task's title ("Token classification"), else the name in words."""
    from trainer.prep.labelled import TASKS

    return TASKS[name].title if name in TASKS else name.replace("_", " ").capitalize()


def _shown_filename(filename: str, suffix: str) -> str:
    """The client's file name, at most 255 characters, keeping its extension (it names the format)."""
    name = Path(filename or "").name.strip() or f"dataset{suffix}"
    if len(name) <= 255:
        return name
    return name[: 255 - len(suffix)] + suffix


def _default_name(filename: str) -> str:
    base = Path(filename or "dataset").name
    suffix = next((s for s in ACCEPTED_SUFFIXES if base.lower().endswith(s)), "")
    base = base[: len(base) - len(suffix)] if suffix else base
    return (base.strip(" .") or "Dataset")[:200]


def _sniff(dataset: Dataset, files: dict[str, tuple[Path, str]]) -> None:
    """Read the first rows and keep what the mapping page shows: the format, the rows, the suggestions
    (`files`: {split: (path, name)}; several: every file is read, the train file's rows are shown)."""
    from trainer.prep.labelled import sniff, sniff_files

    path, _ = files["train"]
    preview = sniff_files(files) if len(files) > 1 else sniff(path, _format_name(dataset))
    dataset.format = preview.format
    dataset.preview = preview.to_dict()


# ---------------------------------------------------------------- creating


@transaction.atomic
def dataset_create_from_upload(*, owner: AbstractBaseUser, name: str, uploaded_file: UploadedFile,
                               original_filename: str, validation_file: UploadedFile | None = None,
                               test_file: UploadedFile | None = None) -> Dataset:
    """Keep an uploaded dataset as a new one waiting for its mapping.

    The upload is one file, a train file with a validation and/or a test file beside it, or a
    .zip of split files (trainer.prep.labelled.unpack_split_archive). Only the first rows of each
    file are read here (trainer.prep.labelled.sniff: at most ten rows, or a SQuAD file's first
    article), and the files of a dataset must share one format. An upload of another type, empty
    or too large raises ValidationError; one whose first rows do not read raises DatasetError;
    either way nothing is stored.
    """
    others = {"validation": validation_file, "test": test_file}
    check_split_uploads(original_filename, others)  # forms check these first; never trust
    suffix = check_dataset_upload(original_filename, uploaded_file.size)
    uploads = {split: f for split, f in others.items() if f is not None}
    suffixes = {split: check_split_upload(f.name, f.size) for split, f in uploads.items()}
    dataset = Dataset(owner=owner, name=(name or "").strip()[:200] or _default_name(original_filename),
                      original_filename=_shown_filename(original_filename, suffix), status=JobStatus.MAPPING)
    folder = dataset.folder
    folder.mkdir(parents=True)
    try:
        if suffix == ARCHIVE_SUFFIX:
            files = _unpack(uploaded_file, folder)
        else:
            files = {"train": (keep_upload(uploaded_file, _split_target(folder, "train", suffix)), original_filename)}
            for split, upload in uploads.items():
                files[split] = (keep_upload(upload, _split_target(folder, split, suffixes[split])), upload.name)
        if len(files) > 1 or suffix == ARCHIVE_SUFFIX:
            dataset.files = {split: _shown_filename(shown, "") for split, (_, shown) in files.items()}
        dataset.size_bytes = sum(path.stat().st_size for path, _ in files.values())
        _sniff(dataset, files)
        dataset.save(force_insert=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return dataset


def _unpack(uploaded_file: UploadedFile, folder: Path) -> dict[str, tuple[Path, str]]:
    """The split files of an uploaded .zip, written as raw.<ext> (train) and raw-<split>.<ext>."""
    from django.conf import settings

    from trainer.prep.labelled import unpack_split_archive

    archive = keep_upload(uploaded_file, folder / "upload.zip")
    try:
        return unpack_split_archive(archive, target=lambda split, suffix: _split_target(folder, split, suffix),
                                    max_bytes=settings.UPLOAD_MAX_BYTES)
    finally:
        archive.unlink(missing_ok=True)


@transaction.atomic
def dataset_create_demo(*, owner: AbstractBaseUser, name: str) -> Dataset:
    """Write the trainer's demo dataset `name` (a DEMOS key) and queue its ingest with the mapping
    its header suggests, its own task and a seeded random 0.8 / 0.1 / 0.1 split."""
    from trainer.errors import DatasetError
    from trainer.prep.labelled import DEMOS, write_demo_dataset

    demo = DEMOS.get(name) if isinstance(name, str) else None
    if demo is None:
        raise DatasetError(f'"{name}" is not a demo dataset; choose one of {", ".join(DEMOS)}.')
    suffix = "".join(Path(demo.filename).suffixes)
    dataset = Dataset(owner=owner, name=f"Demo: {demo_label(demo.name).lower()} ({demo.filename})"[:200],
                      original_filename=demo.filename, demo=demo.name)
    folder = dataset.folder
    folder.mkdir(parents=True)
    try:
        path = write_demo_dataset(demo.name, folder / f"raw{suffix}")
        dataset.size_bytes = path.stat().st_size
        _sniff(dataset, {"train": (path, demo.filename)})
        mapping = dict(dataset.preview["mapping"])
        _choose(dataset, task=demo.task, mapping=mapping, split=default_split(mapping), seed=0)
        dataset.save(force_insert=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _enqueue(dataset)
    return dataset


# ---------------------------------------------------------------- the mapping


def check_choices(*, task: Any, mapping: Any, split: Any, columns: list[str],
                  files: list[str] | tuple = ()) -> tuple[str, dict, dict]:
    """(task, mapping, split spec as a dict) once they are known to fit the upload's columns.

    `mapping` is {column: role}; a column mapped to "" or null is left out. `split` is
    {"strategy": "random" | "column" | "files", "train", "validation", "test"} (None: the default
    for the mapping and the files; a split without a strategy: the default strategy). `files` are
    the splits of a dataset uploaded as a file per split (split by its files: the validation
    fraction is carved from the train file when there is no validation file), () for one file.
    Raises DatasetError with a sentence.
    """
    from trainer.errors import DatasetError
    from trainer.prep.labelled import SplitSpec, check_mapping

    if not isinstance(task, str) or not task:
        raise DatasetError("Choose the task the dataset is for.")
    if not isinstance(mapping, Mapping) or not all(isinstance(c, str) for c in mapping):
        raise DatasetError('The mapping must be an object of column names to roles, such as {"review": "text", '
                           '"stars": "label"}.')
    chosen = {}
    for column, role in mapping.items():
        if role in (None, ""):
            continue
        if not isinstance(role, str):
            raise DatasetError(f'The column "{column}" is mapped to {role!r}, which is not a role name.')
        chosen[column] = role
    check_mapping(task, chosen, columns, where="the file")
    if split is not None and not isinstance(split, Mapping):
        raise DatasetError('The split must be an object such as {"strategy": "random", "train": 0.8, '
                           '"validation": 0.1, "test": 0.1}.')
    split = {"strategy": _default_strategy(chosen, files), **(split or {})}
    spec = SplitSpec.from_dict(split)
    split_column = next((column for column, role in chosen.items() if role == "split"), None)
    if len(files) > 1:
        if spec.strategy != "files":
            how = "at random" if spec.strategy == "random" else "by a column"
            raise DatasetError(f"The dataset was uploaded as {len(files)} files, one per split ({', '.join(files)}), "
                               f"so it is split by its files, not {how}.")
        if split_column is not None:
            raise DatasetError(f'The column "{split_column}" is mapped to split, but the splits are the uploaded '
                               "files; unmap it.")
        return task, chosen, spec.to_dict()
    if spec.strategy == "files":
        raise DatasetError("A dataset uploaded as one file is split at random or by its split column, not by "
                           "files; upload a file per split (or a .zip of them) to split by files.")
    if spec.strategy == "column" and split_column is None:
        raise DatasetError("Splitting by a column needs a column mapped to the role split.")
    if spec.strategy == "random" and split_column is not None:
        raise DatasetError(f'The column "{split_column}" is mapped to split; split by that column, or unmap it to '
                           "split at random.")
    return task, chosen, spec.to_dict()


def current_choices(dataset: Dataset) -> dict[str, Any]:
    """The task, mapping, split and seed a dataset was confirmed with, else its preview's suggestions
    (split None: the default for the mapping): what a mapping form starts from."""
    if dataset.task:
        return {"task": dataset.task, "mapping": dict(dataset.mapping), "split": dataset.split_spec or None,
                "seed": dataset.seed}
    preview = dataset.preview or {}
    return {"task": preview.get("task") or "", "mapping": dict(preview.get("mapping") or {}), "split": None,
            "seed": 0}


def _choose(dataset: Dataset, *, task, mapping, split, seed) -> None:
    """Set the checked choices on the row (not saved) and make it wait for a worker."""
    task, mapping, split = check_choices(task=task, mapping=mapping, split=split,
                                         columns=list(dataset.preview.get("columns") or []),
                                         files=split_files(dataset))
    dataset.task, dataset.mapping, dataset.split_spec = task, mapping, split
    dataset.seed = int(seed or 0)
    dataset.status, dataset.progress, dataset.error = JobStatus.PENDING, 0.0, ""
    for field, empty in RESULT_FIELDS.items():
        setattr(dataset, field, type(empty)())


@transaction.atomic
def dataset_confirm_mapping(*, dataset: Dataset, task: str, mapping: Mapping[str, Any],
                            split: Mapping[str, Any] | None = None, seed: int = 0) -> Dataset:
    """Confirm the task, the column -> role mapping and the split, and queue the ingest.

    Refused (ActionRefused) unless the dataset waits for its mapping or has failed (a failed one
    is mapped again from its kept upload); a mapping or split that does not fit raises DatasetError.
    """
    dataset = Dataset.objects.select_for_update().get(pk=dataset.pk)
    if dataset.status == JobStatus.READY:
        raise ActionRefused(f"“{dataset.name}” is ready, so its mapping can no longer change. Upload the file "
                            "again to map it differently.")
    if dataset.in_flight:
        raise ActionRefused(f"“{dataset.name}” is being processed with the mapping already confirmed; wait until "
                            "it is ready or has failed.")
    if not dataset.preview.get("columns"):
        raise ActionRefused(f"“{dataset.name}” has no columns to map; upload the file again.")
    _choose(dataset, task=task, mapping=mapping, split=split, seed=seed)
    dataset.save()
    _enqueue(dataset)
    return dataset


# ---------------------------------------------------------------- the job


def _enqueue(dataset: Dataset) -> None:
    from webapp.datasets.tasks import ingest_dataset

    lifecycle.enqueue(ingest_dataset, dataset)


def dataset_process(*, dataset_id) -> None:
    """Check every row, split and store the dataset (the ingest task). Never raises for bad data:
    the dataset fails with the trainer's sentence (naming the row) and keeps no output."""
    from trainer.prep.labelled import ingest, label_counts

    if not lifecycle.claim(Dataset, dataset_id):
        log.info("Dataset %s is finished, waiting for its mapping, or gone; nothing to do.", dataset_id)
        return
    dataset = Dataset.objects.get(pk=dataset_id)
    try:
        source = _split_paths(dataset) if split_files(dataset) else raw_path(dataset)
        result = ingest(source, dataset.data_dir, original_filename=_format_name(dataset),
                        task=dataset.task, mapping=dataset.mapping, split_spec=dataset.split_spec or None,
                        seed=dataset.seed, progress=lifecycle.Progress(Dataset, dataset.pk, end=99.0))
        chart = label_counts(dataset.data_dir)
        Dataset.objects.filter(pk=dataset.pk).update(
            status=JobStatus.READY, progress=100.0, error="", sizes=result.sizes, labels=result.labels,
            label_counts=chart, label_stats=result.label_stats, warnings=result.warnings, examples=result.preview,
            baselines=dataset_baselines(dataset.data_dir),
        )
    except Exception as error:
        shutil.rmtree(dataset.data_dir, ignore_errors=True)  # ingest keeps nothing on failure; neither do we
        lifecycle.fail(Dataset, dataset.pk, error, **RESULT_FIELDS)
    if not Dataset.objects.filter(pk=dataset.pk).exists():  # deleted while we worked
        shutil.rmtree(dataset.folder, ignore_errors=True)


def dataset_baselines(data_dir: Path) -> dict:
    """The baselines of a freshly ingested dataset (trainer.finetune.baselines), computed once here.
    A dataset is usable without them, so a failure leaves a note instead of failing the ingest."""
    from trainer.finetune import baselines

    try:
        return baselines.compute(data_dir)
    except Exception:  # noqa: BLE001 - the yardstick is extra; the dataset itself is fine
        log.exception("Could not compute the baselines of %s", data_dir)
        return {"baselines": [], "note": "The baselines could not be computed for this dataset."}


# ---------------------------------------------------------------- deleting


@transaction.atomic
def dataset_delete(*, dataset: Dataset) -> None:
    """Delete a dataset with its upload and its ingested files."""
    folder = dataset.folder
    dataset.delete()
    lifecycle.rmtree_after_commit(folder)
