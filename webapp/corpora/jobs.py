"""The plumbing of short background jobs on a row (corpus, tokenizer, labelled dataset).

A job's row has `status` (pending, processing, ready, failed: the JobStatus values), `progress`
(0-100) and `error` (a sentence). Its service creates the row, then `enqueue`s the Celery task on
the jobs queue once the transaction commits; the task `claim`s the row, reports `Progress`, and
ends ready or `fail`s with a sentence (a UserError's own, else INTERNAL_ERROR, the details logged).
"""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from django.conf import settings
from django.db import models, transaction

from webapp.corpora.models import JobStatus

log = logging.getLogger(__name__)

QUEUE = settings.JOBS_QUEUE  # short jobs: never behind a training run
INTERNAL_ERROR = (
    "Processing stopped because of an internal error (not a problem with your data). "
    "The details have been logged; try again, and report it if it happens again."
)
QUEUE_DOWN = (
    "The job could not be queued because the task queue (Redis) did not answer. "
    "Check that Redis and a worker are running, then try again."
)


class Progress:
    """A progress callback: maps the trainer's 0-100 percentage onto [start, end] percent of the
    row and writes it at most every `interval` seconds, and only when it changed."""

    def __init__(self, model: type[models.Model], pk, *, start: float = 0.0, end: float = 100.0,
                 interval: float = 0.5):
        self.model, self.pk, self.start, self.end, self.interval = model, pk, start, end, interval
        self._last_time = 0.0
        self._last_value = -1.0

    def __call__(self, percent: float) -> None:
        fraction = min(max(float(percent), 0.0), 100.0) / 100.0
        value = round(self.start + (self.end - self.start) * fraction, 1)
        now = time.monotonic()
        if value != self._last_value and now - self._last_time >= self.interval:
            self.model.objects.filter(pk=self.pk).update(progress=value)
            self._last_time, self._last_value = now, value


def enqueue(task, obj: models.Model) -> None:
    """Send the job to the jobs queue after the transaction that created (or changed) `obj` commits;
    when the broker does not answer, the row fails with QUEUE_DOWN instead of waiting forever."""
    model, pk = type(obj), obj.pk

    def send() -> None:
        try:
            task.apply_async(args=[str(pk)], queue=QUEUE)
        except Exception:  # the broker is down: say so on the page instead of a silent hang
            log.exception("Could not enqueue %s for %s %s", task.name, model.__name__, pk)
            model.objects.filter(pk=pk, status=JobStatus.PENDING).update(status=JobStatus.FAILED, error=QUEUE_DOWN)

    transaction.on_commit(send)


def claim(model: type[models.Model], pk) -> bool:
    """Mark a pending (or interrupted) job as processing; False if it is finished or gone."""
    with transaction.atomic():
        updated = model.objects.filter(
            pk=pk, status__in=[JobStatus.PENDING, JobStatus.PROCESSING]
        ).update(status=JobStatus.PROCESSING, progress=0.0, error="")
    return updated == 1


def fail(model: type[models.Model], pk, error: Exception, **clear) -> None:
    """Mark the job failed with a sentence: a UserError's own, DISK_FULL when no space was left,
    else INTERNAL_ERROR (the error is logged with its traceback). `clear` sets other fields in the same write."""
    from trainer.errors import UserError

    from webapp.api.storage import DISK_FULL, is_disk_full

    if isinstance(error, UserError):
        message = str(error)
    elif is_disk_full(error):
        log.warning("%s %s failed: the disk is full (%s)", model.__name__, pk, error)
        message = DISK_FULL
    else:
        log.error("%s %s failed", model.__name__, pk, exc_info=error)
        message = INTERNAL_ERROR
    model.objects.filter(pk=pk).update(status=JobStatus.FAILED, error=message, **clear)


def rmtree_after_commit(*folders: Path) -> None:
    transaction.on_commit(lambda: [shutil.rmtree(f, ignore_errors=True) for f in folders])
