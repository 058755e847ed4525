"""Training runs, their metric history, log lines and checkpoints.

The Run row is the source of truth for a run's state: a worker claims it atomically
(queued -> running) and a redelivered task finds it already claimed and does nothing.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models

from webapp.jobs.models import IN_FLIGHT, status_field


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    CRASHED = "crashed", "Crashed"


FINISHED_STATES = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CRASHED}


class RunKind(models.TextChoices):
    PRETRAIN = "pretrain", "Pre-training"
    FINETUNE = "finetune", "Fine-tuning"


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.PRETRAIN)
    # A pre-training run reads a corpus through a tokenizer; a fine-tuning run reads a labelled
    # dataset with its base checkpoint's own tokenizer, so it has neither.
    corpus = models.ForeignKey("corpora.Corpus", on_delete=models.PROTECT, related_name="runs", null=True, blank=True)
    tokenizer = models.ForeignKey("corpora.Tokenizer", on_delete=models.PROTECT, related_name="runs",
                                  null=True, blank=True)
    dataset = models.ForeignKey("datasets.Dataset", on_delete=models.SET_NULL, related_name="runs",
                                null=True, blank=True)
    base_checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.SET_NULL, related_name="finetune_runs",
                                        null=True, blank=True)
    family = models.CharField(max_length=40)
    preset = models.CharField(max_length=40)
    objectives = models.JSONField(default=list)
    config = models.JSONField(default=dict)  # the full RunConfig (pretrain) or FinetuneConfig (finetune) as a dict
    queue = models.CharField(max_length=20, default="cpu")
    cloned_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)

    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    claimed_by = models.CharField(max_length=200, blank=True)  # worker host/pid that owns the run
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    current_step = models.PositiveIntegerField(default=0)
    max_steps = models.PositiveIntegerField(default=0)
    tokens_seen = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "runs" / str(self.id)

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATES

    @property
    def is_finetune(self) -> bool:
        return self.kind == RunKind.FINETUNE

    @property
    def lineage(self) -> str:
        """How pages say where a fine-tuned model comes from ("" for pre-training)."""
        if not self.is_finetune:
            return ""
        base = self.base_checkpoint.label if self.base_checkpoint_id else "a deleted checkpoint"
        data = self.dataset.name if self.dataset_id else "a deleted dataset"
        return f"fine-tuned from {base} on {data}"


class MetricPoint(models.Model):
    """One metric event: a step of one split with its values ({"loss": .., "lr": ..})."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    step = models.PositiveIntegerField()
    split = models.CharField(max_length=10)  # "train" or "valid"
    values = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["step", "split"]
        constraints = [models.UniqueConstraint(fields=["run", "split", "step"], name="unique_metric_step")]
        indexes = [models.Index(fields=["run", "step"])]


class LogLine(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_lines")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]


class CheckpointSource(models.TextChoices):
    RUN = "run", "Training run"
    IMPORT = "import", "Imported"


class Checkpoint(models.Model):
    """A loadable model folder: a step of one of the owner's runs, or a model they imported.

    Ownership is `owner` for both kinds (an imported checkpoint has no run); a run's
    checkpoint gets its owner from the run when none is given.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="checkpoints")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints", null=True, blank=True)
    source = models.CharField(max_length=10, choices=CheckpointSource.choices, default=CheckpointSource.RUN)
    name = models.CharField(max_length=200, blank=True)
    step = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=500)  # relative to STORAGE_ROOT
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="unique_checkpoint_step"),
            models.CheckConstraint(condition=models.Q(source="import") | models.Q(run__isnull=False),
                                   name="checkpoint_of_a_run_or_imported"),
        ]

    def __str__(self) -> str:
        return self.label

    def save(self, *args, **kwargs) -> None:
        if self.owner_id is None and self.run_id is not None:
            self.owner_id = self.run.owner_id
        super().save(*args, **kwargs)

    @property
    def label(self) -> str:
        """How pages name it: "run name @ step 500", or the imported model's name."""
        if self.run_id is None:
            return self.name or "Imported model"
        return f"{self.run.name} @ step {self.step}"

    @property
    def is_imported(self) -> bool:
        return self.source == CheckpointSource.IMPORT

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / self.path


class CheckpointExport(models.Model):
    """A checkpoint's Hugging Face export, made by a worker on the short-jobs queue
    (webapp.runs.exports): its status and progress for the page and the API, and the zip once it
    is ready. The zip lives in the checkpoint's own folder (`path`, relative to STORAGE_ROOT), so
    it goes with the checkpoint: deleting the checkpoint or its run deletes the row and the files
    (webapp.runs.exports.remove_export_files)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="checkpoint_exports")
    checkpoint = models.OneToOneField(Checkpoint, on_delete=models.CASCADE, related_name="hf_export")
    path = models.CharField(max_length=500)  # the export's folder, relative to STORAGE_ROOT
    status = status_field()  # a job (webapp.jobs.lifecycle) without a name, so no JobRow
    progress = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    architecture = models.CharField(max_length=100, blank=True)  # transformers' class, once made
    size_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Export of {self.checkpoint_id}"

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / self.path

    @property
    def archive(self) -> Path:
        return self.folder / "hf.zip"

    @property
    def in_flight(self) -> bool:
        return self.status in IN_FLIGHT
