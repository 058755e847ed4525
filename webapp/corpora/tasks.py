"""Celery tasks of corpora and tokenizers: each takes an id and calls its service.

The services (webapp.corpora.services) own the state changes and enqueue these tasks with
transaction.on_commit. The registered names are the ones the tasks had in trainer/tasks.py, so
messages queued before an upgrade still find their task.
"""
from __future__ import annotations

from celery import shared_task

from webapp.corpora import services


@shared_task(name="trainer.tasks.ingest_corpus", acks_late=True)
def ingest_corpus(corpus_id: str) -> None:
    services.corpus_process(corpus_id=corpus_id)


@shared_task(name="trainer.tasks.build_tokenizer", acks_late=True)
def build_tokenizer(tokenizer_id: str) -> None:
    services.tokenizer_process(tokenizer_id=tokenizer_id)
