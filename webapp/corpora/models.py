"""Corpora and the tokenizers trained on them. Both belong to a user."""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models


class JobStatus(models.TextChoices):
    PENDING = "pending", "Waiting for a worker"
    PROCESSING = "processing", "Processing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class Corpus(models.Model):
    """An uploaded (or demo) text collection, cleaned and split by the ingest task."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="corpora")
    name = models.CharField(max_length=200)
    original_filename = models.CharField(max_length=255, blank=True)  # shown only, never used as a path
    size_bytes = models.BigIntegerField(default=0)
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    progress = models.FloatField(default=0.0)  # 0..100
    error = models.TextField(blank=True)
    options = models.JSONField(default=dict, blank=True)  # cleaning options chosen on upload
    stats = models.JSONField(default=dict, blank=True)  # documents, sentences, words, characters, bytes
    removed = models.JSONField(default=dict, blank=True)  # what each cleaning rule removed
    preview = models.JSONField(default=list, blank=True)  # first documents, as lists of sentences
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "corpora" / str(self.id)


class Tokenizer(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tokenizers")
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="tokenizers")
    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=20, default="wordpiece")
    vocab_size = models.PositiveIntegerField(default=8000)
    lowercase = models.BooleanField(default=True)
    extra_ids = models.PositiveIntegerField(default=0)  # T5 sentinel tokens <extra_id_0>... (0 = none)
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    progress = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    stats = models.JSONField(default=dict, blank=True)  # vocab size, tokens per word, unk rate, shard sizes
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "tokenizers" / str(self.id)
