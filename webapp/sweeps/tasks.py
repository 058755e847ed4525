"""Celery tasks of sweeps.

- advance_sweeps: advance every running sweep (webapp.sweeps.services.sweep_advance). A sweep
  advances as soon as a trial's run ends (the run_ended signal, in the process that ended it);
  this periodic pass (Celery beat, with the stale-run reaper) catches what no signal reports: a
  trial whose run was deleted, or an advance that failed (the database was away at that moment).
  A sweep whose advance raises is marked failed with the reason (sweep_advance_or_fail), once:
  the next pass does not retry it into the same crash, and the other sweeps still advance.
"""
from __future__ import annotations

from celery import shared_task

from webapp.sweeps import services
from webapp.sweeps.models import Sweep, SweepStatus


@shared_task(name="webapp.sweeps.tasks.advance_sweeps", ignore_result=True)
def advance_sweeps() -> int:
    ids = list(Sweep.objects.filter(status=SweepStatus.RUNNING).values_list("pk", flat=True))
    for sweep_id in ids:
        services.sweep_advance_or_fail(sweep_id=sweep_id)
    return len(ids)
