"""Signals other apps listen to (webapp.sweeps: a trial's run reports and ends), so that the runs
app knows nothing of them.

- validation_reported(run_id, step, values): the engine reported validation metrics (sent by the
  run's sink in the worker, before the next step; a receiver may request the run's cancel).
- run_ended(run_id, status): the run reached a finished state (its worker's end, a cancel
  before it started, or the reaper marking it crashed).
"""
from django.dispatch import Signal

validation_reported = Signal()
run_ended = Signal()
