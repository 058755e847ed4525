"""Imports of Hugging Face models: one row per uploaded archive, from upload to checkpoint.

The archive is unpacked and converted by a worker (webapp.explorer.tasks.import_checkpoint ->
webapp.explorer.imports.import_process); the row says where that stands and, when it
failed, why. A finished import points at the Checkpoint it made (source "import").
"""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from webapp.jobs.models import IN_FLIGHT, JobRow, JobStatus, owner_field, status_field


class ModelImport(JobRow):
    """A job row (webapp.jobs.models.JobRow) worded for an import: "Waiting", "Importing"."""

    owner = owner_field("model_imports")
    original_filename = models.CharField(max_length=255, blank=True)
    archive_suffix = models.CharField(max_length=10)  # ".zip", ".tar.gz", ...
    size_bytes = models.BigIntegerField(default=0)
    status = status_field(labels={JobStatus.PENDING: "Waiting", JobStatus.PROCESSING: "Importing"})
    progress = None  # an import reports none: its page says waiting or importing
    info = models.JSONField(default=dict, blank=True)  # trainer.inference.importing.import_hf_directory's answer
    checkpoint = models.OneToOneField("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="model_import")
    finished_at = models.DateTimeField(null=True, blank=True)

    @property
    def folder(self) -> Path:
        """Where the upload waits to be unpacked (removed once the import is done)."""
        return Path(settings.STORAGE_ROOT) / "imports" / "uploads" / str(self.id)

    @property
    def archive_path(self) -> Path:
        return self.folder / f"archive{self.archive_suffix}"


class InContextResult(models.Model):
    """A saved zero-, one- and few-shot evaluation (GPT-3): a causal checkpoint's accuracy against
    k on one of the owner's classification datasets, with the settings that made it. Listed on
    the dataset's page beside its leaderboard of fine-tuning runs; it goes when the checkpoint
    or the dataset goes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="incontext_results")
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="incontext_results")
    dataset = models.ForeignKey("datasets.Dataset", on_delete=models.CASCADE, related_name="incontext_results")
    template = models.TextField()
    separator = models.CharField(max_length=20, blank=True)
    k_max = models.PositiveSmallIntegerField()
    seed = models.PositiveIntegerField(default=0)
    normalise = models.BooleanField(default=True)
    n_queries = models.PositiveIntegerField()
    accuracies = models.JSONField(default=list)  # accuracy for k = 0 .. k_max, in order
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.checkpoint} on {self.dataset}, k up to {self.k_max}"

    @property
    def best(self) -> tuple[int | None, float | None]:
        """(the k with the highest accuracy, the smallest such k on a tie; that accuracy)."""
        if not self.accuracies:
            return None, None
        k = max(range(len(self.accuracies)), key=lambda i: (self.accuracies[i], -i))
        return k, float(self.accuracies[k])


class NeighbourIndex(models.Model):
    """The sentence vectors of up to `limit` texts of one of the owner's labelled datasets under one
    encoder checkpoint and one pooling (trainer.inference.neighbours' index, in `folder`), built by
    a short job (webapp.explorer.tasks.build_neighbour_index) with its progress, then searched for
    a query's nearest neighbours. One per (checkpoint, dataset, pooling): the cache. It goes, files
    and all, when the checkpoint or the dataset goes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="neighbour_indexes")
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="neighbour_indexes")
    dataset = models.ForeignKey("datasets.Dataset", on_delete=models.CASCADE, related_name="neighbour_indexes")
    pooling = models.CharField(max_length=10)  # trainer.inference.downstream.POOLINGS
    status = status_field()  # a job (webapp.jobs.lifecycle) without a name, so no JobRow
    progress = models.FloatField(default=0.0)  # 0..100
    error = models.TextField(blank=True)
    limit = models.PositiveIntegerField()  # the most texts embedded (settings.NEIGHBOURS_MAX_TEXTS when built)
    count = models.PositiveIntegerField(default=0)  # texts embedded, once ready
    total = models.PositiveIntegerField(default=0)  # examples in the dataset, once ready
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["checkpoint", "dataset", "pooling"],
                                               name="one_neighbour_index_per_checkpoint_dataset_pooling")]

    def __str__(self) -> str:
        return f"{self.dataset} under {self.checkpoint} ({self.pooling})"

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "explorer" / "neighbours" / str(self.id)

    @property
    def in_flight(self) -> bool:
        return self.status in IN_FLIGHT


@receiver(post_delete, sender=NeighbourIndex)
def _remove_index_files(sender, instance: NeighbourIndex, **kwargs) -> None:
    folder = instance.folder
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))
