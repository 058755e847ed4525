"""Imports of Hugging Face models: one row per uploaded archive, from upload to checkpoint.

The archive is unpacked and converted by a worker (webapp.explorer.tasks.import_checkpoint ->
webapp.explorer.imports.import_process); the row says where that stands and, when it
failed, why. A finished import points at the Checkpoint it made (source "import").
"""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models


class ImportStatus(models.TextChoices):
    PENDING = "pending", "Waiting"
    PROCESSING = "processing", "Importing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class ModelImport(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="model_imports")
    name = models.CharField(max_length=200)
    original_filename = models.CharField(max_length=255, blank=True)
    archive_suffix = models.CharField(max_length=10)  # ".zip", ".tar.gz", ...
    size_bytes = models.BigIntegerField(default=0)
    status = models.CharField(max_length=20, choices=ImportStatus.choices, default=ImportStatus.PENDING)
    error = models.TextField(blank=True)
    info = models.JSONField(default=dict, blank=True)  # trainer.inference.importing.import_hf_directory's answer
    checkpoint = models.OneToOneField("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="model_import")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def folder(self) -> Path:
        """Where the upload waits to be unpacked (removed once the import is done)."""
        return Path(settings.STORAGE_ROOT) / "imports" / "uploads" / str(self.id)

    @property
    def archive_path(self) -> Path:
        return self.folder / f"archive{self.archive_suffix}"

    @property
    def in_flight(self) -> bool:
        return self.status in (ImportStatus.PENDING, ImportStatus.PROCESSING)


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
