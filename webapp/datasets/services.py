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

from webapp.corpora import jobs
from webapp.corpora.services import ActionRefused
from webapp.corpora.uploads import keep_upload
from webapp.datasets.models import Dataset, DatasetStatus
from webapp.datasets.uploads import ACCEPTED_SUFFIXES, check_dataset_upload

log = logging.getLogger(__name__)

__all__ = ["ActionRefused", "check_choices", "current_choices", "dataset_baselines", "dataset_confirm_mapping",
           "dataset_create_demo", "dataset_create_from_upload", "dataset_delete", "dataset_process", "default_split",
           "demo_label", "raw_path"]

RESULT_FIELDS = {"sizes": {}, "labels": [], "label_counts": {}, "label_stats": {}, "warnings": [], "examples": [],
                 "baselines": {}}


def raw_path(dataset: Dataset) -> Path:
    """Where the upload of `dataset` is stored: always `raw` plus the accepted suffix."""
    matches = sorted(dataset.folder.glob("raw.*"))
    return matches[0] if matches else dataset.folder / "raw.csv"


def default_split(mapping: Mapping[str, str]) -> dict:
    """By the split column when one is mapped, else a seeded random 0.8 / 0.1 / 0.1."""
    from trainer.prep.labelled import SplitSpec

    strategy = "column" if "split" in mapping.values() else "random"
    return SplitSpec(strategy=strategy).to_dict()


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


def _sniff(dataset: Dataset, path: Path) -> None:
    """Read the first rows and keep what the mapping page shows: the format, the rows, the suggestions."""
    from trainer.prep.labelled import sniff

    preview = sniff(path, dataset.original_filename)
    dataset.format = preview.format
    dataset.preview = preview.to_dict()


# ---------------------------------------------------------------- creating


@transaction.atomic
def dataset_create_from_upload(*, owner: AbstractBaseUser, name: str, uploaded_file: UploadedFile,
                               original_filename: str) -> Dataset:
    """Keep an uploaded file as a new dataset waiting for its mapping.

    Only the first rows are read here (trainer.prep.labelled.sniff: at most ten rows, or a SQuAD
    file's first article). An upload of another type, empty or too large raises ValidationError;
    one whose first rows do not read raises DatasetError; either way nothing is stored.
    """
    suffix = check_dataset_upload(original_filename, uploaded_file.size)  # forms check this first; never trust
    dataset = Dataset(owner=owner, name=(name or "").strip()[:200] or _default_name(original_filename),
                      original_filename=_shown_filename(original_filename, suffix), size_bytes=uploaded_file.size,
                      status=DatasetStatus.MAPPING)
    folder = dataset.folder
    folder.mkdir(parents=True)
    try:
        _sniff(dataset, keep_upload(uploaded_file, folder / f"raw{suffix}"))
        dataset.save(force_insert=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return dataset


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
        _sniff(dataset, path)
        mapping = dict(dataset.preview["mapping"])
        _choose(dataset, task=demo.task, mapping=mapping, split=default_split(mapping), seed=0)
        dataset.save(force_insert=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _enqueue(dataset)
    return dataset


# ---------------------------------------------------------------- the mapping


def check_choices(*, task: Any, mapping: Any, split: Any, columns: list[str]) -> tuple[str, dict, dict]:
    """(task, mapping, split spec as a dict) once they are known to fit the upload's columns.

    `mapping` is {column: role}; a column mapped to "" or null is left out. `split` is
    {"strategy": "random" | "column", "train", "validation", "test"} (None: the default for the
    mapping). Raises DatasetError with a sentence.
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
    spec = SplitSpec.from_dict(split if split is not None else default_split(chosen))
    split_column = next((column for column, role in chosen.items() if role == "split"), None)
    if spec.strategy == "files":
        raise DatasetError("A dataset uploaded as one file is split at random or by its split column, not by "
                           "files.")
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
                                         columns=list(dataset.preview.get("columns") or []))
    dataset.task, dataset.mapping, dataset.split_spec = task, mapping, split
    dataset.seed = int(seed or 0)
    dataset.status, dataset.progress, dataset.error = DatasetStatus.PENDING, 0.0, ""
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
    if dataset.status == DatasetStatus.READY:
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

    jobs.enqueue(ingest_dataset, dataset)


def dataset_process(*, dataset_id) -> None:
    """Check every row, split and store the dataset (the ingest task). Never raises for bad data:
    the dataset fails with the trainer's sentence (naming the row) and keeps no output."""
    from trainer.prep.labelled import ingest, label_counts

    if not jobs.claim(Dataset, dataset_id):
        log.info("Dataset %s is finished, waiting for its mapping, or gone; nothing to do.", dataset_id)
        return
    dataset = Dataset.objects.get(pk=dataset_id)
    try:
        result = ingest(raw_path(dataset), dataset.data_dir, original_filename=dataset.original_filename,
                        task=dataset.task, mapping=dataset.mapping, split_spec=dataset.split_spec or None,
                        seed=dataset.seed, progress=jobs.Progress(Dataset, dataset.pk, end=99.0))
        chart = label_counts(dataset.data_dir)
        Dataset.objects.filter(pk=dataset.pk).update(
            status=DatasetStatus.READY, progress=100.0, error="", sizes=result.sizes, labels=result.labels,
            label_counts=chart, label_stats=result.label_stats, warnings=result.warnings, examples=result.preview,
            baselines=dataset_baselines(dataset.data_dir),
        )
    except Exception as error:
        shutil.rmtree(dataset.data_dir, ignore_errors=True)  # ingest keeps nothing on failure; neither do we
        jobs.fail(Dataset, dataset.pk, error, **RESULT_FIELDS)
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
    jobs.rmtree_after_commit(folder)
