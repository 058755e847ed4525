"""Training runs, their metric history, log lines and checkpoints.

The Run row is the source of truth for a run's state: a worker claims it atomically
(queued -> running) and a redelivered task finds it already claimed and does nothing.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.db.models import F

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
    # The cursor of the run's newest metric point (MetricPoint.seq): only ever grows, so a point
    # stored after a resume dropped later ones never reuses a cursor a client has seen.
    metrics_cursor = models.PositiveBigIntegerField(default=0, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def save(self, *args, **kwargs) -> None:
        """A full save of a run read earlier never writes metrics_cursor back: only storing a point
        moves it (MetricPoint.save), and an older copy of the row would take it back, so the next
        point would reuse a cursor a client has seen."""
        if not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [f.name for f in self._meta.concrete_fields
                                       if not f.primary_key and f.name != "metrics_cursor"]
        super().save(*args, **kwargs)

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
    """One metric event: a step of one split with its values ({"loss": .., "lr": ..}).

    `seq` is the point's cursor: its place in the order the run's points were stored (1, 2, ...;
    a training point comes before the validation point of its step). The run socket's
    `?after=<cursor>` replays the points with a greater one (webapp.runs.consumers). It is given
    on the first save from the run's counter (Run.metrics_cursor), in the same transaction, so
    cursors follow the order in which points were committed and are never given twice, not even
    after a resume deleted the points logged past its checkpoint."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    step = models.PositiveIntegerField()
    split = models.CharField(max_length=10)  # "train" or "valid"
    values = models.JSONField(default=dict)
    seq = models.PositiveBigIntegerField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["step", "split"]
        constraints = [models.UniqueConstraint(fields=["run", "split", "step"], name="unique_metric_step"),
                       models.UniqueConstraint(fields=["run", "seq"], name="unique_metric_seq")]
        indexes = [models.Index(fields=["run", "step"])]

    def save(self, *args, **kwargs) -> None:
        if self.seq is not None:
            super().save(*args, **kwargs)
            return
        # The counter's row stays locked until the point is committed: a second writer waits, so
        # it takes the next cursor and commits after this one. A point refused (a step already
        # stored: IntegrityError) rolls the counter back with it.
        with transaction.atomic(using=kwargs.get("using")):
            Run.objects.filter(pk=self.run_id).update(metrics_cursor=F("metrics_cursor") + 1)
            self.seq = Run.objects.filter(pk=self.run_id).values_list("metrics_cursor", flat=True).first()
            try:
                super().save(*args, **kwargs)
            except BaseException:
                self.seq = None
                raise


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


class ExportFormat(models.TextChoices):
    """The formats the export page offers (trainer.export.EXPORTERS; "zip" is how each is downloaded)."""

    HF = "hf", "Hugging Face transformers"
    ONNX = "onnx", "ONNX"
    GGUF = "gguf", "GGUF"


class CheckpointExport(models.Model):
    """One export of a checkpoint in one format (hf, onnx, gguf), made by a worker on the short-jobs
    queue (webapp.runs.exports): its status and progress for the page and the API, the license its
    model card names, and the zip once it is ready. The zip lives in the checkpoint's own folder
    (`path`, relative to STORAGE_ROOT: exports/<format>/; exports/ for a row made before there were
    formats), so it goes with the checkpoint: deleting the checkpoint or its run deletes the rows and
    the files (webapp.runs.exports.remove_export_files)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="checkpoint_exports")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="exports")
    format = models.CharField(max_length=10, choices=ExportFormat.choices, default=ExportFormat.HF)
    license = models.CharField(max_length=40, default="other")  # trainer.model_card.LICENSES
    path = models.CharField(max_length=500)  # the export's folder, relative to STORAGE_ROOT
    status = status_field()  # a job (webapp.jobs.lifecycle) without a name, so no JobRow
    progress = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    architecture = models.CharField(max_length=100, blank=True)  # the exported class, once made
    size_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["checkpoint", "format"], name="one_export_per_format")]

    def __str__(self) -> str:
        return f"{self.format} export of {self.checkpoint_id}"

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / self.path

    @property
    def archive(self) -> Path:
        return self.folder / f"{self.format}.zip"

    @property
    def in_flight(self) -> bool:
        return self.status in IN_FLIGHT
