"""Celery tasks: the trainer's one Django-aware module. Each takes an id and calls a service.

The services own the state changes (claiming rows, progress, errors); see
webapp/corpora/services.py and webapp/runs/services.py.
"""
from __future__ import annotations

from celery import shared_task


@shared_task(name="trainer.tasks.ingest_corpus", acks_late=True)
def ingest_corpus(corpus_id: str) -> None:
    from webapp.corpora.services import corpus_process

    corpus_process(corpus_id=corpus_id)


@shared_task(name="trainer.tasks.build_tokenizer", acks_late=True)
def build_tokenizer(tokenizer_id: str) -> None:
    from webapp.corpora.services import tokenizer_process

    tokenizer_process(tokenizer_id=tokenizer_id)


@shared_task(name="trainer.tasks.train_run", acks_late=True)
def train_run(run_id: str) -> None:
    from webapp.runs.services import run_execute

    run_execute(run_id=run_id)


@shared_task(name="trainer.tasks.import_checkpoint", acks_late=True)
def import_checkpoint(import_id: str) -> None:
    from webapp.explorer.imports import import_process

    import_process(import_id=import_id)
