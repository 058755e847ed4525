"""Celery task of the explorer: import an uploaded Hugging Face model (webapp.explorer.imports).

webapp.explorer.imports enqueues it with transaction.on_commit. The registered name is the one
the task had in trainer/tasks.py, so messages queued before an upgrade still find it.
"""
from __future__ import annotations

from celery import shared_task

from webapp.explorer import imports


@shared_task(name="trainer.tasks.import_checkpoint", acks_late=True)
def import_checkpoint(import_id: str) -> None:
    imports.import_process(import_id=import_id)
