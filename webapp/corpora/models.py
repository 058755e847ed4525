"""Corpora and the tokenizers trained on them. Both belong to a user; both are job rows
(webapp.jobs.models.JobRow: id, name, status, progress, error, created_at)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from webapp.jobs.models import JobRow, owner_field


class SourceKind(models.TextChoices):
    UPLOAD = "upload", "Uploaded"
    IMPORT = "import", "Imported from the server"
    DEMO = "demo", "Demo"


class Corpus(JobRow):
    """A text collection (uploaded files, files imported from the server, or the demo), cleaned and
    split by the ingest task."""

    owner = owner_field("corpora")
    original_filename = models.CharField(max_length=255, blank=True)  # shown only, never used as a path
    size_bytes = models.BigIntegerField(default=0)
    options = models.JSONField(default=dict, blank=True)  # cleaning options chosen on upload
    stats = models.JSONField(default=dict, blank=True)  # documents, sentences, words, characters, bytes
    removed = models.JSONField(default=dict, blank=True)  # what each cleaning rule removed
    preview = models.JSONField(default=list, blank=True)  # first documents, as lists of sentences
    # Its files are rows of CorpusFile (an import may name tens of thousands); their totals are
    # kept here (trainer.prep.sources.describe: files, bytes, formats, compressions) for the pages.
    sources_summary = models.JSONField(default=dict, blank=True)
    source_kind = models.CharField(max_length=10, choices=SourceKind.choices, default=SourceKind.UPLOAD)
    text_field = models.CharField(max_length=200, default="text")  # the JSON field / column holding the text
    progress_detail = models.JSONField(default=dict, blank=True)  # the running stage (trainer.progress.Stages)
    examples = models.JSONField(default=dict, blank=True)  # removed key -> a few examples of removed text

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "corpora" / str(self.id)


class CorpusFile(models.Model):
    """One file of a corpus, in reading order: trainer.prep.sources.SourceFile (before ingest, for an
    upload: what was uploaded, its format guessed from the name). An import's paths are outside the
    storage folder and are read in place, never copied; an upload's path is its stored copy."""

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="files")
    position = models.PositiveIntegerField()
    name = models.TextField()  # as shown: the uploaded file's name, or the path under the imported folder
    path = models.TextField(blank=True)
    format = models.CharField(max_length=20)
    compression = models.CharField(max_length=10, default="none")
    bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["corpus", "position"]
        constraints = [models.UniqueConstraint(fields=["corpus", "position"], name="corpus_file_position")]

    def to_dict(self) -> dict:
        """As trainer.prep.sources.SourceFile.to_dict() writes it."""
        return {"path": self.path, "name": self.name, "format": self.format, "compression": self.compression,
                "bytes": self.bytes}


class Tokenizer(JobRow):
    """A tokenizer trained on a corpus, and the corpus encoded with it (the build task)."""

    owner = owner_field("tokenizers")
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="tokenizers")
    algorithm = models.CharField(max_length=20, default="wordpiece")
    vocab_size = models.PositiveIntegerField(default=8000)
    lowercase = models.BooleanField(default=True)
    extra_ids = models.PositiveIntegerField(default=0)  # T5 sentinel tokens <extra_id_0>... (0 = none)
    stats = models.JSONField(default=dict, blank=True)  # vocab size, tokens per word, unk rate, shard sizes
    progress_detail = models.JSONField(default=dict, blank=True)  # the running stage (trainer.progress.Stages)

    @property
    def folder(self) -> Path:
        return Path(settings.STORAGE_ROOT) / "tokenizers" / str(self.id)
