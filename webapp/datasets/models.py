"""Labelled datasets for fine-tuning. Each belongs to a user.

A dataset's life: uploaded and sniffed (the first rows read, a task and a column -> role mapping
suggested) -> `mapping` until its owner confirms the task, the mapping and the split -> `pending`
-> `processing` (trainer.prep.labelled.ingest, on the jobs queue) -> `ready` or `failed` with a
sentence. A failed dataset may be mapped again; its upload is kept until it is deleted.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from webapp.jobs.models import JobRow, JobStatus, owner_field, status_field


class Dataset(JobRow):
    """A job row (webapp.jobs.models.JobRow); its `error` names the row of the file at fault for bad data."""

    owner = owner_field("datasets")
    original_filename = models.CharField(max_length=255, blank=True)  # shown, and its extension names the format
    files = models.JSONField(default=dict, blank=True)  # a file per split: {split: the file's name}; one file: {}
    size_bytes = models.BigIntegerField(default=0)
    demo = models.CharField(max_length=40, blank=True)  # the trainer's DEMOS entry it was made from, if any
    status = status_field(mapping=True, default=JobStatus.MAPPING)  # waits for its owner's choices first
    format = models.CharField(max_length=20, blank=True)  # csv, tsv, jsonl, conll or squad (sniffed)
    preview = models.JSONField(default=dict, blank=True)  # sniff(): columns, first rows, suggestions, details
    task = models.CharField(max_length=40, blank=True)  # a trainer.prep.labelled.TASKS key, once confirmed
    mapping = models.JSONField(default=dict, blank=True)  # {column: role}, once confirmed
    split_spec = models.JSONField(default=dict, blank=True)  # SplitSpec.to_dict(): strategy and fractions
    seed = models.IntegerField(default=0)  # shuffles a random split
    sizes = models.JSONField(default=dict, blank=True)  # examples per split
    labels = models.JSONField(default=list, blank=True)  # classes or tags, in label-id order
    label_counts = models.JSONField(default=dict, blank=True)  # label_counts(): {"kind", "labels", "counts"}
    label_stats = models.JSONField(default=dict, blank=True)  # regression: per split count, min, max, mean, std
    warnings = models.JSONField(default=list, blank=True)  # sentences worth showing, not errors
    examples = models.JSONField(default=list, blank=True)  # the first normalised training examples
    # trainer.finetune.baselines.compute(): the trivial and lexical baselines on validation and test,
    # computed once as the dataset becomes ready; {} before (and for a dataset ingested before they existed)
    baselines = models.JSONField(default=dict, blank=True)

    @property
    def folder(self) -> Path:
        """The upload (raw.<ext>; a file per split: raw.<ext> is train's, beside raw-validation.<ext> and
        raw-test.<ext>) and, once ingested, data/ (trainer.prep.labelled's layout)."""
        return Path(settings.STORAGE_ROOT) / "datasets" / str(self.id)

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"
