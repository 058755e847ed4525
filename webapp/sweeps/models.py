"""Sweeps (a hyperparameter search with Optuna) and their trials (each one a run of its own).

Storage: these rows are the search's storage. Optuna's own RDBStorage would create its tables
with SQLAlchemy/Alembic outside Django's migrations (and point at another database than the
one pytest-django creates), so instead webapp.sweeps.study rebuilds an in-memory Optuna study
from these rows each time it needs one (to sample the next trial or to ask the pruner).
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class SweepStatus(models.TextChoices):
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


class Sampler(models.TextChoices):
    GRID = "grid", "Grid (every combination of the listed values)"
    RANDOM = "random", "Random"
    TPE = "tpe", "TPE (Bayesian: learns from finished trials)"


class Pruner(models.TextChoices):
    NONE = "none", "None (every trial runs to its last step)"
    MEDIAN = "median", "Median (stop a trial worse than the median of earlier ones at the same step)"


class Direction(models.TextChoices):
    MINIMIZE = "minimize", "Minimize"
    MAXIMIZE = "maximize", "Maximize"


class SweepKind(models.TextChoices):
    PRETRAIN = "pretrain", "Pre-training"
    FINETUNE = "finetune", "Fine-tuning"


class Sweep(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=SweepKind.choices)
    # What every trial's run is created from: for pre-training {"tokenizer", "corpus", "family",
    # "preset", "objectives", "training"}; for fine-tuning {"checkpoint", "dataset", "training"}.
    base = models.JSONField(default=dict)
    # The search space: [{"name": "lr", "low": 1e-4, "high": 1e-2, "log": true}, {"name": "batch_size",
    # "values": [8, 16]}] (webapp.sweeps.space validates it).
    space = models.JSONField(default=list)
    metric = models.CharField(max_length=60, default="loss")  # a key of the runs' validation metrics
    direction = models.CharField(max_length=10, choices=Direction.choices, default=Direction.MINIMIZE)
    sampler = models.CharField(max_length=10, choices=Sampler.choices, default=Sampler.TPE)
    pruner = models.CharField(max_length=10, choices=Pruner.choices, default=Pruner.NONE)
    prune_after_trials = models.PositiveIntegerField(default=2)  # finished trials before the pruner acts
    n_trials = models.PositiveIntegerField(default=8)
    parallelism = models.PositiveIntegerField(default=2)
    seed = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=SweepStatus.choices, default=SweepStatus.RUNNING)
    error = models.TextField(blank=True)
    best_trial = models.ForeignKey("sweeps.Trial", on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_finished(self) -> bool:
        return self.status != SweepStatus.RUNNING


class TrialState(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETE = "complete", "Complete"
    PRUNED = "pruned", "Pruned"
    FAIL = "fail", "Failed"


class Trial(models.Model):
    """One point of the search: its settings, the run that trains them, and the metric it reached."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    run = models.OneToOneField("runs.Run", on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="sweep_trial")
    params = models.JSONField(default=dict)
    system_attrs = models.JSONField(default=dict)  # Optuna's (the grid sampler's grid_id), kept for the rebuild
    state = models.CharField(max_length=10, choices=TrialState.choices, default=TrialState.RUNNING)
    value = models.FloatField(null=True, blank=True)
    intermediate = models.JSONField(default=dict)  # {"<step>": metric at that step's validation}
    note = models.TextField(blank=True)  # why it was pruned or failed
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="unique_trial_number")]

    def __str__(self) -> str:
        return f"trial {self.number} of {self.sweep}"
