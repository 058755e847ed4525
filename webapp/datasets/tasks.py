"""Celery task of labelled datasets: takes an id and calls its service.

webapp.datasets.services enqueues it on the jobs queue (settings.JOBS_QUEUE) with
transaction.on_commit once a mapping is confirmed (or a demo dataset is written).
"""
from __future__ import annotations

from celery import shared_task

from webapp.datasets import services


@shared_task(name="webapp.datasets.tasks.ingest_dataset", acks_late=True)
def ingest_dataset(dataset_id: str) -> None:
    services.dataset_process(dataset_id=dataset_id)
