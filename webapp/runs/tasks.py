"""Celery task of runs: train_run takes a run's id and calls its service (webapp.runs.services).

run_create and run_resume enqueue it with transaction.on_commit. Its registered name is the one
it had in trainer/tasks.py, so messages queued before an upgrade still find it (and CELERY
task_routes names it).
"""
from __future__ import annotations

from celery import shared_task

from webapp.runs import services


@shared_task(name="trainer.tasks.train_run", acks_late=True)
def train_run(run_id: str) -> None:
    services.run_execute(run_id=run_id)
