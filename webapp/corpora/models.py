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


class SourceKind(models.TextChoices):
    UPLOAD = "upload", "Uploaded"
    IMPORT = "import", "Imported from the server"
    DEMO = "demo", "Demo"


class Corpus(models.Model):
    """A text collection (uploaded files, files imported from the server, or the demo), cleaned and
    split by the ingest task."""

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
    # The corpus's files: trainer.prep.sources.SourceFile.to_dict() each (before ingest, for an
    # upload: what was uploaded, its format guessed from the name). An import's paths are outside
    # the storage folder and are read in place, never copied.
    sources = models.JSONField(default=list, blank=True)
    source_kind = models.CharField(max_length=10, choices=SourceKind.choices, default=SourceKind.UPLOAD)
    text_field = models.CharField(max_length=200, default="text")  # the JSON field / column holding the text
    progress_detail = models.JSONField(default=dict, blank=True)  # the running stage (trainer.progress.Stages)
    examples = models.JSONField(default=dict, blank=True)  # removed key -> a few examples of removed text
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
    progress_detail = models.JSONField(default=dict, blank=True)  # the running stage (trainer.progress.Stages)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "tokenizers" / str(self.id)
