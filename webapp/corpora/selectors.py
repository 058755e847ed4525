"""Reads for corpora and tokenizers. Everything is looked up by (owner, id): another
user's objects do not exist as far as these functions are concerned (Http404)."""
from __future__ import annotations

import uuid

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, QuerySet
from django.http import Http404

from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus


def _as_uuid(value) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        raise Http404("No such object.") from None


def corpora_for(user: AbstractBaseUser) -> QuerySet[Corpus]:
    return Corpus.objects.filter(owner=user).annotate(n_tokenizers=Count("tokenizers")).order_by("-created_at")


def ready_corpora_for(user: AbstractBaseUser) -> QuerySet[Corpus]:
    return corpora_for(user).filter(status=JobStatus.READY)


def corpus_get(user: AbstractBaseUser, corpus_id) -> Corpus:
    try:
        return Corpus.objects.get(owner=user, pk=_as_uuid(corpus_id))
    except Corpus.DoesNotExist:
        raise Http404("No such corpus.") from None


def tokenizers_for(user: AbstractBaseUser, *, corpus: Corpus | None = None) -> QuerySet[Tokenizer]:
    qs = Tokenizer.objects.filter(owner=user).select_related("corpus").order_by("-created_at")
    return qs.filter(corpus=corpus) if corpus is not None else qs


def tokenizer_get(user: AbstractBaseUser, tokenizer_id) -> Tokenizer:
    try:
        return Tokenizer.objects.select_related("corpus").get(owner=user, pk=_as_uuid(tokenizer_id))
    except Tokenizer.DoesNotExist:
        raise Http404("No such tokenizer.") from None
