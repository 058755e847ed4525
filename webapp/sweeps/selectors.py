"""Reads for sweeps; every one takes the requesting user and returns only what they own."""
from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from webapp.runs.models import Checkpoint
from webapp.sweeps.models import Sweep, Trial


def sweeps_for(user) -> QuerySet[Sweep]:
    return Sweep.objects.filter(owner=user).select_related("best_trial")


def sweep_get(user, sweep_id) -> Sweep:
    """The user's sweep, or Http404 (another user's sweep looks exactly like a missing one)."""
    sweep = Sweep.objects.filter(owner=user, pk=sweep_id).select_related("best_trial").first()
    if sweep is None:
        raise Http404("No such sweep.")
    return sweep


def trials_of(sweep: Sweep) -> list[Trial]:
    """The sweep's trials in order, each with its run and that run's newest checkpoint
    (trial.run.latest_checkpoints, a list of at most one)."""
    latest = Prefetch("run__checkpoints", queryset=Checkpoint.objects.order_by("-step"), to_attr="latest_checkpoints")
    return list(sweep.trials.select_related("run").prefetch_related(latest).order_by("number"))


def best_checkpoint(sweep: Sweep, trials: list[Trial]) -> Checkpoint | None:
    for trial in trials:
        if trial.pk == sweep.best_trial_id and trial.run is not None:
            return next(iter(trial.run.latest_checkpoints), None)
    return None
