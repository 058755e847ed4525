"""What every row of a background job is: JobStatus, the one list of statuses, and JobRow, the
abstract model a corpus, a tokenizer, a labelled dataset and a model import each extend.

A job's row goes pending -> processing -> ready or failed (webapp.jobs.lifecycle writes those);
a labelled dataset waits in `mapping` first, for its owner's choices. The values are declared once,
here, so the shared job code and every app compare against the same strings; a row whose pages word
a status differently (an import is "Importing", not "Processing") passes its own labels to
`status_field`, which changes what `get_status_display` says, never what is stored.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

from django.conf import settings
from django.db import models


class JobStatus(models.TextChoices):
    MAPPING = "mapping", "Waiting for its mapping"  # a labelled dataset's first state only
    PENDING = "pending", "Waiting for a worker"
    PROCESSING = "processing", "Processing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


IN_FLIGHT = (JobStatus.PENDING, JobStatus.PROCESSING)


def status_choices(*, mapping: bool = False, labels: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """JobStatus's (value, label) pairs for one row's status column, in JobStatus's order: `mapping`
    only for a row that waits for one; `labels` overrides the label of the statuses it names."""
    labels = labels or {}
    return [(status.value, labels.get(status, status.label)) for status in JobStatus
            if mapping or status != JobStatus.MAPPING]


def status_field(*, default: str = JobStatus.PENDING, mapping: bool = False,
                 labels: Mapping[str, str] | None = None) -> models.CharField:
    """A job row's status column: its choices from `status_choices`, so every job's values are JobStatus's."""
    return models.CharField(max_length=20, choices=status_choices(mapping=mapping, labels=labels), default=default)


def owner_field(related_name: str) -> models.ForeignKey:
    """The user a job row belongs to (deleted with them). Each model names its reverse accessor
    (user.corpora, user.datasets, ...), which no `%(class)s` pattern spells, so each declares it."""
    return models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name=related_name)


class JobRow(models.Model):
    """The columns the shared job code (webapp.jobs.lifecycle) reads and writes, declared once.

    A subclass adds `owner = owner_field("<its related name>")` and its own columns; it may replace
    `status` (a dataset's starts in mapping) and drops `progress` by setting it to None (an import
    reports none). Newest first.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    status = status_field()
    progress = models.FloatField(default=0.0)  # 0..100
    error = models.TextField(blank=True)  # why it failed, a sentence; else empty
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def in_flight(self) -> bool:
        """Waiting for a worker or being processed: its page follows the progress."""
        return self.status in IN_FLIGHT

    @property
    def shown_status(self) -> str:
        """The status its badge shows: a pending row whose worker has already reported progress is
        processing, as its bar says (never "Waiting for a worker" above a bar at 87%)."""
        if self.status == JobStatus.PENDING and (getattr(self, "progress", None) or 0) > 0:
            return JobStatus.PROCESSING
        return self.status

    @property
    def shown_status_label(self) -> str:
        """shown_status in this row's words (its status field's labels)."""
        labels = dict(self._meta.get_field("status").choices)
        return str(labels.get(self.shown_status, self.get_status_display()))
