"""Celery tasks of runs: each takes an id (or nothing) and calls the worker's side of a run
(webapp.runs.execution), the reaper (webapp.runs.reaper) or the export (webapp.runs.exports).

- train_run: claim a queued run and train it. run_create and run_resume enqueue it with
  transaction.on_commit. Its registered name is the one it had in trainer/tasks.py, so
  messages queued before an upgrade still find it (and CELERY task_routes names it).
- reap_stale_runs: mark running runs whose worker stopped sending heartbeats as crashed.
  Celery beat sends it every RUN_REAP_EVERY_S seconds (settings.CELERY_BEAT_SCHEDULE); pages
  and the API only read, so this is what turns a dead worker's run into a crashed one.
"""
from __future__ import annotations

from celery import shared_task

from webapp.runs import execution, reaper


@shared_task(name="trainer.tasks.train_run", acks_late=True)
def train_run(run_id: str) -> None:
    execution.run_execute(run_id=run_id)


@shared_task(name="webapp.runs.tasks.reap_stale_runs", ignore_result=True)
def reap_stale_runs() -> int:
    return reaper.mark_dead_claims() + reaper.mark_stale_runs()


@shared_task(name="webapp.runs.tasks.export_checkpoint", acks_late=True)
def export_checkpoint(export_id: str) -> None:
    """Write a checkpoint's Hugging Face export (webapp.runs.exports), on the short-jobs queue."""
    from webapp.runs import exports

    exports.export_process(export_id=export_id)
