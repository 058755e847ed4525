"""Nearest neighbours within a dataset (issue 9, section 6): embed up to settings.NEIGHBOURS_MAX_TEXTS
texts of one of your labelled datasets with one of your encoder checkpoints, as a short job with
its progress, cached per (checkpoint, dataset, pooling) on disk (a NeighbourIndex row and its
folder); then a query sentence gets the k nearest texts by cosine similarity, with their labels.

trainer.inference.neighbours does the tensor work; here we check ownership, what can be embedded,
and keep the job's row. `index_process` is the body of the Celery task
webapp.explorer.tasks.build_neighbour_index, enqueued on the jobs queue once the row commits.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone

from trainer.errors import InferenceError
from webapp.datasets.models import Dataset
from webapp.explorer import services
from webapp.explorer.models import NeighbourIndex
from webapp.jobs import lifecycle
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint

log = logging.getLogger(__name__)

DEFAULT_MAX_TEXTS = 2000
MAX_K = 50  # trainer.inference.neighbours.MAX_K


def max_texts() -> int:
    """How many texts of a dataset are embedded at most (settings.NEIGHBOURS_MAX_TEXTS)."""
    return max(1, int(getattr(settings, "NEIGHBOURS_MAX_TEXTS", DEFAULT_MAX_TEXTS)))


# ---------------------------------------------------------------------------- selectors
def index_get(user, index_id) -> NeighbourIndex:
    """One of the user's indexes; Http404 for a missing one or another user's."""
    if not user.is_authenticated:
        raise Http404("Not found.")
    try:
        pk = index_id if isinstance(index_id, uuid.UUID) else uuid.UUID(str(index_id))
        return NeighbourIndex.objects.select_related("dataset", "checkpoint").get(pk=pk, owner=user)
    except (ValueError, TypeError, AttributeError, NeighbourIndex.DoesNotExist):
        raise Http404("Not found.") from None


def indexes_for(user, checkpoint: Checkpoint | None = None):
    """The user's indexes (of one checkpoint), newest first."""
    if not user.is_authenticated:
        return NeighbourIndex.objects.none()
    found = NeighbourIndex.objects.filter(owner=user).select_related("dataset")
    return found.filter(checkpoint=checkpoint) if checkpoint is not None else found


def searchable_datasets(user):
    """The user's ready datasets, newest first: what can be embedded."""
    from webapp.datasets.selectors import datasets_for

    return datasets_for(user).filter(status=JobStatus.READY)


def _check(checkpoint: Checkpoint, dataset: Dataset, pooling: str) -> None:
    """A sentence for what cannot be embedded: the checkpoint is not an encoder, the dataset is not ready."""
    if pooling not in services.POOLINGS:
        raise InferenceError(f"pooling must be one of {', '.join(services.POOLINGS)}, not {pooling!r}.")
    problem = services.checkpoint_problem(checkpoint)
    if problem:
        raise InferenceError(problem)
    if not services.embeds_sentences(services.checkpoint_family(checkpoint)):
        raise InferenceError("Nearest neighbours need sentence embeddings, which come from an encoder (BERT, RoBERTa, "
                             "ALBERT, ELECTRA, DistilBERT, SpanBERT, UniLM or an imported one); this checkpoint "
                             f"is a {services.checkpoint_family(checkpoint)} model.")
    if dataset.status != JobStatus.READY:
        raise InferenceError(f"The dataset {dataset.name} is not ready yet ({dataset.get_status_display().lower()}).")


# ---------------------------------------------------------------------------- services
def index_start(*, owner, checkpoint: Checkpoint, dataset: Dataset, pooling: str = "mean") -> NeighbourIndex:
    """The index of (checkpoint, dataset, pooling): the cached one when it is ready and on disk or
    still being built; else (new, failed or gone from disk) queued to be built. The checkpoint and
    the dataset must be the owner's (the callers look them up by owner)."""
    _check(checkpoint, dataset, pooling)
    from trainer.inference.neighbours import is_current

    with transaction.atomic():
        try:
            with transaction.atomic():
                index, created = NeighbourIndex.objects.select_for_update().get_or_create(
                    checkpoint=checkpoint, dataset=dataset, pooling=pooling,
                    defaults={"owner": owner, "limit": max_texts()})
        except IntegrityError:  # made by a request beside this one
            index, created = NeighbourIndex.objects.select_for_update().get(
                checkpoint=checkpoint, dataset=dataset, pooling=pooling), False
        if created or index.in_flight:
            if created:
                _enqueue(index)
            return index
        if index.status == JobStatus.READY and index.limit == max_texts() and is_current(checkpoint.folder,
                                                                                          index.folder):
            return index
        index.status, index.progress, index.error, index.limit = JobStatus.PENDING, 0.0, "", max_texts()
        index.count = index.total = 0
        index.finished_at = None
        index.save()
        _enqueue(index)
    return index


def _enqueue(index: NeighbourIndex) -> None:
    from webapp.explorer.tasks import build_neighbour_index

    lifecycle.enqueue(build_neighbour_index, index)


def index_process(*, index_id) -> None:
    """The task's body: claim a waiting index, embed the dataset's texts, record the outcome."""
    from trainer.inference.neighbours import build_index, dataset_texts

    if not lifecycle.claim(NeighbourIndex, index_id):
        log.info("Neighbour index %s is finished or gone; nothing to do.", index_id)
        return
    index = NeighbourIndex.objects.select_related("checkpoint", "dataset").get(pk=index_id)
    try:
        items, total = dataset_texts(index.dataset.data_dir, index.limit)
        meta = build_index(services._folder(index.checkpoint), items, index.folder, pooling=index.pooling,
                           progress=lifecycle.Progress(NeighbourIndex, index.pk, end=99.0))
        NeighbourIndex.objects.filter(pk=index.pk).update(
            status=JobStatus.READY, progress=100.0, error="", count=meta["count"], total=total,
            finished_at=timezone.now())
    except Exception as error:
        lifecycle.fail(NeighbourIndex, index.pk, error, finished_at=timezone.now())


def search(*, checkpoint: Checkpoint, dataset: Dataset, pooling: str = "mean", text: str,
           k: int = 5) -> dict[str, Any]:
    """The k texts of the dataset nearest the query under the checkpoint's embeddings: trainer.inference.
    neighbours.search's answer, plus "dataset", "index", "limit" and "total". The index must be ready
    (index_start builds it); a sentence says where it stands otherwise."""
    from trainer.inference import neighbours

    text = services._text(text, "The query")
    if not 1 <= int(k) <= MAX_K:
        raise InferenceError(f"k must be between 1 and {MAX_K}.")
    _check(checkpoint, dataset, pooling)
    index = NeighbourIndex.objects.filter(checkpoint=checkpoint, dataset=dataset, pooling=pooling).first()
    what = f"The dataset {dataset.name} has not been embedded with this checkpoint and {pooling} pooling"
    if index is None:
        raise InferenceError(f"{what} yet: embed it first (one short job, up to {max_texts():,} texts).")
    if index.in_flight:
        raise InferenceError(f"The dataset {dataset.name} is still being embedded ({index.progress:.0f}%); ask again "
                             "when it is done.")
    if index.status == JobStatus.FAILED:
        raise InferenceError(f"Embedding the dataset {dataset.name} failed: {index.error} Embed it again.")
    out = neighbours.search(services._folder(checkpoint), index.folder, text, k=int(k))
    return {"dataset": str(dataset.id), "index": str(index.id), "limit": index.limit, "total": index.total, **out}
