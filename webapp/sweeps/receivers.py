"""Listeners of webapp.runs.signals: a trial's validation metric (the pruner) and its run's end
(the next trials). Connected in SweepsConfig.ready()."""
from __future__ import annotations

from django.dispatch import receiver

from webapp.runs.signals import run_ended, validation_reported
from webapp.sweeps import services
from webapp.sweeps.models import Trial


@receiver(validation_reported, dispatch_uid="sweeps.validation")
def on_validation(sender, *, run_id, step: int, values: dict, **kwargs) -> None:
    services.report_validation(run_id=run_id, step=step, values=values)


@receiver(run_ended, dispatch_uid="sweeps.run_ended")
def on_run_ended(sender, *, run_id, **kwargs) -> None:
    sweep_id = Trial.objects.filter(run_id=run_id).values_list("sweep_id", flat=True).first()
    if sweep_id is not None:
        services.sweep_advance(sweep_id=sweep_id)
