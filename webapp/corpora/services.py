"""Writes for corpora and tokenizers: create, process (called by the Celery tasks), delete.

Processing functions are not wrapped in one transaction on purpose: their progress updates
must be visible to the page while the work runs. Each state change is its own small write.
Outputs are built in a temporary folder and moved into place only on success, so a failed
job never leaves half-made files behind.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from webapp.corpora.jobs import INTERNAL_ERROR, QUEUE, QUEUE_DOWN  # noqa: F401 - part of this module's interface
from webapp.corpora.jobs import Progress as _Progress
from webapp.corpora.jobs import claim as _claim
from webapp.corpora.jobs import enqueue as _enqueue
from webapp.corpora.jobs import fail as _fail
from webapp.corpora.jobs import rmtree_after_commit as _rmtree_after_commit
from webapp.corpora.models import Corpus, JobStatus, Tokenizer
from webapp.corpora.uploads import check_upload, keep_upload

log = logging.getLogger(__name__)

DEMO_NAME = "Demo corpus (Python standard library docstrings)"


class ActionRefused(Exception):
    """The user asked for something that cannot be done in the current state; the message says why."""


# ---------------------------------------------------------------- helpers


def _cleaning_options(options: dict[str, Any] | None):
    """The trainer's CleaningOptions from a dict (unknown keys are ignored)."""
    from trainer.prep.corpus import CleaningOptions

    return CleaningOptions.from_dict(options)


def raw_path(corpus: Corpus) -> Path:
    """Where the uploaded file of `corpus` is stored: always `raw` plus the accepted suffix."""
    matches = sorted(corpus.folder.glob("raw.*"))
    return matches[0] if matches else corpus.folder / "raw.txt"


# ---------------------------------------------------------------- corpora


@transaction.atomic
def corpus_create_from_upload(
    *, owner: AbstractBaseUser, name: str, uploaded_file: UploadedFile, original_filename: str,
    options: dict[str, bool],
) -> Corpus:
    """Store an uploaded file as a new corpus and queue its ingest.

    The file is moved (not copied) from the upload's temporary file, which Django streamed to
    disk inside the storage folder, to `<corpus folder>/raw<suffix>`.
    """
    from webapp.corpora.tasks import ingest_corpus

    suffix = check_upload(original_filename, uploaded_file.size)  # forms check this first; never trust
    corpus = Corpus.objects.create(
        owner=owner,
        name=(name or "").strip() or _default_name(original_filename),
        original_filename=original_filename[:255],
        size_bytes=uploaded_file.size,
        options=_cleaning_options(options).to_dict(),
    )
    folder = corpus.folder
    folder.mkdir(parents=True)
    try:
        keep_upload(uploaded_file, folder / f"raw{suffix}")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _enqueue(ingest_corpus, corpus)
    return corpus


def _default_name(filename: str) -> str:
    base = Path(filename or "corpus").name
    for suffix in (".gz", ".jsonl", ".txt"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return (base.strip(" .") or "Corpus")[:200]


@transaction.atomic
def corpus_create_demo(*, owner: AbstractBaseUser) -> Corpus:
    """A corpus built from the standard library's docstrings, ingested like any upload."""
    from trainer.prep.corpus import write_demo_corpus
    from webapp.corpora.tasks import ingest_corpus

    corpus = Corpus.objects.create(owner=owner, name=DEMO_NAME, original_filename="demo.txt",
                                   options=_cleaning_options({}).to_dict())
    corpus.folder.mkdir(parents=True)
    try:
        path = write_demo_corpus(corpus.folder / "raw.txt")
    except BaseException:
        shutil.rmtree(corpus.folder, ignore_errors=True)
        raise
    corpus.size_bytes = Path(path).stat().st_size
    corpus.save(update_fields=["size_bytes"])
    _enqueue(ingest_corpus, corpus)
    return corpus


def corpus_process(*, corpus_id) -> None:
    """Validate, clean and split a corpus (the ingest task). Never raises for bad data."""
    from trainer.prep.corpus import ingest

    if not _claim(Corpus, corpus_id):
        log.info("Corpus %s is finished or gone; nothing to do.", corpus_id)
        return
    corpus = Corpus.objects.get(pk=corpus_id)
    try:
        # ingest builds its outputs in a temporary folder and renames them into place at the
        # end, so a failure leaves only the raw upload in the corpus folder.
        result = ingest(
            raw_path(corpus), corpus.folder, original_filename=corpus.original_filename,
            options=_cleaning_options(corpus.options), progress=_Progress(Corpus, corpus.pk, end=99.0),
        )
        with transaction.atomic():
            Corpus.objects.filter(pk=corpus.pk).update(
                status=JobStatus.READY, progress=100.0, error="",
                stats=result.stats, removed=result.removed, preview=result.preview,
            )
    except Exception as error:
        _fail(Corpus, corpus.pk, error)
    if not Corpus.objects.filter(pk=corpus.pk).exists():  # deleted while we worked
        shutil.rmtree(corpus.folder, ignore_errors=True)


@transaction.atomic
def corpus_delete(*, corpus: Corpus) -> None:
    """Delete a corpus, its tokenizers and their files; refused while runs use it."""
    n_runs = corpus.runs.count()
    if n_runs:
        raise ActionRefused(
            f"“{corpus.name}” is used by {n_runs} run{'s' if n_runs != 1 else ''}. "
            "Delete those runs first, then delete the corpus."
        )
    folders = [corpus.folder, *(t.folder for t in corpus.tokenizers.all())]
    corpus.delete()
    _rmtree_after_commit(*folders)


# ---------------------------------------------------------------- tokenizers


@transaction.atomic
def tokenizer_create(
    *, owner: AbstractBaseUser, corpus: Corpus, name: str, algorithm: str, vocab_size: int, lowercase: bool,
    extra_ids: int | None = None,
) -> Tokenizer:
    """Queue training a tokenizer on a ready corpus (then encoding the corpus into shards).
    extra_ids: T5 sentinel tokens to add (<extra_id_0> ...), 0 for none; None: the algorithm's
    default (trainer.catalog.schema.default_extra_ids: T5's 100 for Unigram, else none)."""
    from trainer.catalog.schema import default_extra_ids

    from webapp.corpora.tasks import build_tokenizer

    if corpus.owner_id != owner.pk:  # callers look corpora up by owner; this is a last guard
        raise Corpus.DoesNotExist("No such corpus.")
    corpus = Corpus.objects.select_for_update().get(pk=corpus.pk)
    if corpus.status == JobStatus.FAILED:
        raise ActionRefused(
            f"The corpus “{corpus.name}” failed to process, so no tokenizer can be trained on it. "
            "Upload a corrected file."
        )
    if corpus.status != JobStatus.READY:
        raise ActionRefused(
            "The corpus is still being processed. Wait until it is ready, then train the tokenizer."
        )
    tokenizer = Tokenizer.objects.create(
        owner=owner, corpus=corpus, algorithm=algorithm, vocab_size=vocab_size, lowercase=lowercase,
        extra_ids=default_extra_ids(algorithm) if extra_ids is None else int(extra_ids),
        name=(name or "").strip() or default_tokenizer_name(corpus, algorithm, vocab_size, lowercase),
    )
    _enqueue(build_tokenizer, tokenizer)
    return tokenizer


def default_tokenizer_name(corpus: Corpus, algorithm: str, vocab_size: int, lowercase: bool) -> str:
    size = f"{vocab_size // 1000}k" if vocab_size % 1000 == 0 else str(vocab_size)
    case = "uncased" if lowercase else "cased"
    return f"{corpus.name[:150]} · {algorithm} {size} {case}"


def tokenizer_process(*, tokenizer_id) -> None:
    """Train the tokenizer (0-60 %), then encode the corpus into token shards (60-100 %)."""
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    if not _claim(Tokenizer, tokenizer_id):
        log.info("Tokenizer %s is finished or gone; nothing to do.", tokenizer_id)
        return
    tokenizer = Tokenizer.objects.select_related("corpus").get(pk=tokenizer_id)
    folder = tokenizer.folder
    work = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        corpus_dir = tokenizer.corpus.folder
        stats = train_tokenizer(
            corpus_dir, work, algorithm=tokenizer.algorithm, vocab_size=tokenizer.vocab_size,
            lowercase=tokenizer.lowercase, extra_ids=tokenizer.extra_ids,
            progress=_Progress(Tokenizer, tokenizer.pk, end=60.0),
        )
        shard_stats = encode_corpus(corpus_dir, work, progress=_Progress(Tokenizer, tokenizer.pk, start=60.0,
                                                                        end=99.0))
        shutil.rmtree(folder, ignore_errors=True)
        work.replace(folder)
        with transaction.atomic():
            Tokenizer.objects.filter(pk=tokenizer.pk).update(
                status=JobStatus.READY, progress=100.0, error="", stats={**stats, "shards": shard_stats},
            )
    except Exception as error:
        _fail(Tokenizer, tokenizer.pk, error)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not Tokenizer.objects.filter(pk=tokenizer.pk).exists():
        shutil.rmtree(folder, ignore_errors=True)


@transaction.atomic
def tokenizer_delete(*, tokenizer: Tokenizer) -> None:
    n_runs = tokenizer.runs.count()
    if n_runs:
        raise ActionRefused(
            f"“{tokenizer.name}” is used by {n_runs} run{'s' if n_runs != 1 else ''}. "
            "Delete those runs first, then delete the tokenizer."
        )
    folder = tokenizer.folder
    tokenizer.delete()
    _rmtree_after_commit(folder)
