"""Reads for labelled datasets. Everything is looked up by (owner, id): another user's datasets
do not exist as far as these functions are concerned (Http404)."""
from __future__ import annotations

import uuid

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from webapp.corpora.models import Tokenizer
from webapp.corpora.selectors import tokenizers_for
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus


def datasets_for(user: AbstractBaseUser) -> QuerySet[Dataset]:
    if not user.is_authenticated:
        return Dataset.objects.none()
    return Dataset.objects.filter(owner=user).order_by("-created_at")


def dataset_get(user: AbstractBaseUser, dataset_id) -> Dataset:
    if not user.is_authenticated:
        raise Http404("No such dataset.")
    try:
        pk = dataset_id if isinstance(dataset_id, uuid.UUID) else uuid.UUID(str(dataset_id))
        return Dataset.objects.get(owner=user, pk=pk)
    except (TypeError, ValueError, AttributeError, Dataset.DoesNotExist):
        raise Http404("No such dataset.") from None


def ready_tokenizers_for(user: AbstractBaseUser) -> QuerySet[Tokenizer]:
    """The tokenizers the length histogram may use: the user's ready ones, newest first."""
    return tokenizers_for(user).filter(status=JobStatus.READY)


LENGTH_SAMPLE = 20_000  # examples tokenized for the histogram, so a page or API call stays quick


def length_stats(dataset: Dataset, tokenizer: Tokenizer, max_length: int) -> dict:
    """The token-length histogram of a ready dataset under one of its owner's ready tokenizers:
    trainer.prep.labelled.length_histogram's fields, plus the tokenizer's id and name and
    `sampled` (true when only the first LENGTH_SAMPLE examples, train first, were measured)."""
    from trainer.prep.labelled import length_histogram

    histogram = length_histogram(dataset.data_dir, tokenizer.folder, max_length, max_examples=LENGTH_SAMPLE)
    total = sum(dataset.sizes.values()) if dataset.sizes else histogram.examples
    return {**histogram.to_dict(), "tokenizer": str(tokenizer.id), "tokenizer_name": tokenizer.name,
            "sampled": histogram.examples < total}


def dataset_stats(dataset: Dataset, *, tokenizer: Tokenizer | None = None, max_length: int = 128) -> dict:
    """What the dataset page charts: sizes per split, the label counts (or score bins) per split, the
    regression statistics, and with a tokenizer the token lengths (else None)."""
    return {
        "sizes": dataset.sizes,
        "labels": dataset.label_counts,
        "label_stats": dataset.label_stats,
        "lengths": length_stats(dataset, tokenizer, max_length) if tokenizer is not None else None,
    }
