"""A short background job's life on its row (a corpus, a tokenizer, a labelled dataset, an export,
a neighbour index).

A job's row has `status` (pending, processing, ready, failed: webapp.jobs.models.JobStatus),
`progress` (0-100) and `error` (a sentence). Its service creates the row, then `enqueue`s the
Celery task on the jobs queue once the transaction commits; the task `claim`s the row, reports
`Progress`, and ends ready or `fail`s with a sentence (a UserError's own, else INTERNAL_ERROR, the
details logged). A request the row's state does not allow is refused with ActionRefused.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection, models, transaction

from webapp.jobs.models import IN_FLIGHT, JobStatus

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


class ActionRefused(Exception):
    """The user asked for something that cannot be done in the row's current state; the message says why."""


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
            self._write(progress=value)
            self._last_time, self._last_value = now, value

    def _write(self, **fields) -> None:
        """Update the row. The trainer may call from a thread of its own (the tokenizers library
        pulls its training text, and so reports its progress, from a thread it made): a thread's
        database connection is its own, so one opened there is closed again, not left open."""
        self.model.objects.filter(pk=self.pk).update(**fields)
        if threading.current_thread() is not threading.main_thread() and not connection.in_atomic_block:
            connection.close()


STAGE_KEYS = ("stage", "label", "done", "total", "unit", "rate", "eta_seconds")


class StageProgress(Progress):
    """Progress (the percentage) plus the stage the job is in: the trainer calls ``stage(detail)``
    (trainer.progress.Stages: {"stage", "label", "done", "total", "unit", "rate", "eta_seconds"}),
    and the row's ``progress_detail`` gets that dict with ``text``, the line the page shows
    ("Reading and cleaning · 412 of 1,024 MB · 9.8 MB/s · about 1 min left"). Written at most every
    `interval` seconds, except a new stage and a stage's end, which are written at once."""

    def __init__(self, model: type[models.Model], pk, **kwargs):
        super().__init__(model, pk, **kwargs)
        self._last_stage_time = 0.0
        self._last_stage: dict | None = None

    def stage(self, detail: dict) -> None:
        from trainer.progress import describe_stage

        if not isinstance(detail, dict):
            return
        clean = {key: detail.get(key) for key in STAGE_KEYS}
        clean["text"] = describe_stage(clean)
        now = time.monotonic()
        new_stage = self._last_stage is None or self._last_stage.get("stage") != clean["stage"]
        done, total = clean["done"], clean["total"]
        finished = isinstance(done, (int, float)) and isinstance(total, (int, float)) and done >= total
        if clean == self._last_stage or (not (new_stage or finished)
                                         and now - self._last_stage_time < self.interval):
            return
        self._write(progress_detail=clean)
        self._last_stage_time, self._last_stage = now, clean


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
            pk=pk, status__in=IN_FLIGHT
        ).update(status=JobStatus.PROCESSING, progress=0.0, error="")
    return updated == 1


def fail(model: type[models.Model], pk, error: Exception, **clear) -> None:
    """Mark the job failed with a sentence: a UserError's own, DISK_FULL when no space was left,
    else INTERNAL_ERROR (the error is logged with its traceback). `clear` sets other fields in the same write."""
    from trainer.errors import UserError
    from webapp.server.storage import DISK_FULL, is_disk_full

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
