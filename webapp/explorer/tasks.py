"""Celery tasks of the explorer: import an uploaded Hugging Face model (webapp.explorer.imports) and
embed a dataset's texts for nearest-neighbour search (webapp.explorer.neighbours).

Their services enqueue them on the jobs queue with transaction.on_commit. The import's registered
name is the one the task had in trainer/tasks.py, so messages queued before an upgrade still find it.
"""
from __future__ import annotations

from celery import shared_task

from webapp.explorer import imports, neighbours


@shared_task(name="trainer.tasks.import_checkpoint", acks_late=True)
def import_checkpoint(import_id: str) -> None:
    imports.import_process(import_id=import_id)


@shared_task(name="webapp.explorer.tasks.build_neighbour_index", acks_late=True)
def build_neighbour_index(index_id: str) -> None:
    neighbours.index_process(index_id=index_id)
