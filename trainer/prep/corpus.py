"""Corpus preparation: check a corpus, clean it, deduplicate it, split it for training.

``ingest`` turns a corpus (one uploaded file, or any number of files of the formats corpora ship in:
:mod:`trainer.prep.sources`) into

    out_dir/train.txt, out_dir/valid.txt   one sentence per line, a blank line between documents
    out_dir/sample.txt                     the tokenizer's training sample (a large corpus only)
    out_dir/stats.json                     statistics, what each rule removed (with examples), a preview

streaming, in parallel over pieces of the files, resumable after a crash, with memory that does
not hold the corpus (:mod:`trainer.prep.pipeline` says how). The rules are in
:mod:`trainer.prep.cleaning`. The outputs are renamed into place at the end; a corpus the user must
fix raises :class:`~trainer.errors.CorpusError` with a plain message and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.prep.demo import write_demo_corpus  # noqa: F401  (re-exported: part of this module's API)
from trainer.errors import CorpusError
from trainer.prep.reading import (  # noqa: F401  (re-exported: labelled/ and older callers import them here)
    MAX_DOCUMENT_CHARS,
    UPLOAD_MAX_DECOMPRESSED_BYTES,
    UploadReader,
    _check_start,
)
from trainer.prep.cleaning import (  # noqa: F401  (re-exported: part of this module's API)
    ALWAYS_REMOVED_KEYS,
    BAD_WORDS,
    C4_MIN_SENTENCES_PER_PAGE,
    C4_MIN_WORDS_PER_LINE,
    C4_SPAN_SENTENCES,
    ELLIPSES,
    MIN_SENTENCES_KEY,
    PREVIEW_CHARS,
    PREVIEW_DOCUMENTS,
    PREVIEW_SENTENCES,
    REMOVED_KEYS,
    RULES,
    TERMINAL_MARKS,
    CleaningOptions,
    DocumentCleaner,
)

from trainer.prep.sources import ACCEPTED_DESCRIPTION, SourceFile, detect_compression, format_of

__all__ = [
    "BAD_WORDS",
    "RULES",
    "CleaningOptions",
    "IngestResult",
    "UploadReader",
    "ingest",
    "write_demo_corpus",
]

# --- what "big enough to train on" means (after cleaning) ---------------------------------
MIN_DOCUMENTS = 2  # one is held out for validation
MIN_SENTENCES = 20
MIN_WORDS = 200


@dataclass
class IngestResult:
    """What ``ingest`` produced (also stored in ``out_dir/stats.json``)."""

    stats: dict  # documents, sentences, words, characters, bytes; "train"/"valid": the same; "input"
    removed: dict[str, int]  # e.g. {"lines_without_terminal_punctuation": 12, "duplicate_pages": 1}
    preview: list[list[str]] = field(default_factory=list)  # first documents, as sentence lists
    examples: dict[str, list[str]] = field(default_factory=dict)  # removed key -> a few removed texts

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Reading: bytes -> checked, decoded lines
# ---------------------------------------------------------------------------------------------


def _format_from_name(original_filename: str) -> str:
    fmt = format_of(original_filename or "")
    if fmt is None:
        shown = Path(original_filename or "").name or "(no name)"
        raise CorpusError(f'"{shown}" is not a supported file type. {ACCEPTED_DESCRIPTION}')
    return fmt


# ---------------------------------------------------------------------------------------------
# Cleaning: one document (a list of lines) -> a list of sentences, or None
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Statistics, progress, preview
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# ingest
# ---------------------------------------------------------------------------------------------


def ingest(
    sources: Sequence[SourceFile] | Path,
    out_dir: Path,
    *,
    options: CleaningOptions,
    original_filename: str | None = None,
    text_field: str = "text",
    valid_fraction: float = 0.05,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
    workers: int | None = None,
    sample_bytes: int | None = None,
    piece_bytes: int | None = None,
) -> IngestResult:
    """Check, clean, deduplicate and split a corpus; write train.txt, valid.txt, stats.json (and
    sample.txt, the tokenizer's training sample, when the train split is larger than sample_bytes).

    ``sources``: the files (:func:`trainer.prep.sources.discover`), or one file's path whose format
    ``original_filename`` (the name the user uploaded) tells. ``progress`` is called with a
    percentage from 0 to 100 (and its ``stage`` method, if it has one, with each stage's detail).
    ``workers``: processes that read and clean (default: every core, see
    :func:`trainer.prep.pipeline.default_workers`). An interrupted call resumes where it stopped
    when called again with the same files and options. Raises CorpusError, leaving ``out_dir`` as it was.
    """
    from trainer.prep import pipeline

    if not 0.0 < valid_fraction <= 0.5:
        raise CorpusError("The validation fraction must be more than 0 and at most 0.5.")
    fmt = None
    if isinstance(sources, (str, os.PathLike)):
        source = _single_source(Path(sources), original_filename or Path(sources).name)
        sources, fmt = [source], source.format
    sources = list(sources)
    if not sources:
        raise CorpusError("The corpus has no files.")
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    done = None
    try:
        done = pipeline.run_ingest(
            sources, out_dir, options=options, text_field=text_field, valid_fraction=valid_fraction,
            seed=seed, progress=progress, workers=workers,
            sample_bytes=pipeline.DEFAULT_SAMPLE_BYTES if sample_bytes is None else int(sample_bytes),
            piece_bytes=pipeline.PIECE_BYTES if piece_bytes is None else int(piece_bytes),
            check_big_enough=_check_big_enough, input_format=fmt,
        )
        result = IngestResult(stats=done["stats"], removed=done["removed"], preview=done["preview"],
                              examples=done["examples"])
        meta = {
            **result.to_dict(),
            "reasons": done["reasons"],
            "original_filename": original_filename or (sources[0].name if len(sources) == 1 else ""),
            "options": options.to_dict(),
            "text_field": text_field,
            "valid_fraction": valid_fraction,
            "seed": seed,
        }
        tmp = done["tmp"]
        (tmp / "stats.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        (out_dir / "sample.txt").unlink(missing_ok=True)  # a previous ingest's; this one may have none
        for name in [*done["outputs"], "stats.json"]:  # stats.json last: marks completion
            os.replace(tmp / name, out_dir / name)
        shutil.rmtree(done["work"], ignore_errors=True)
        return result
    except CorpusError:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        if done is not None:
            shutil.rmtree(done["tmp"], ignore_errors=True)


def _single_source(path: Path, original_filename: str) -> SourceFile:
    """The one uploaded file of the old single-file call, its format from the name the user gave."""
    fmt = _format_from_name(original_filename)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise CorpusError(f"The uploaded file cannot be read ({e.strerror}).") from None
    if size == 0:
        raise CorpusError("The file is empty (0 bytes).")
    return SourceFile(path=str(path.resolve()), name=Path(original_filename).name or path.name, format=fmt,
                      compression=detect_compression(path) if fmt in ("txt", "jsonl") else "none", bytes=size)


def _check_big_enough(total: dict[str, int], n_input: int, fmt: str, removed: dict[str, int]) -> None:
    if n_input == 0:
        if fmt == "txt":
            raise CorpusError("The file contains no text, only blank lines.")
        if fmt == "jsonl":
            raise CorpusError("The JSONL file contains no documents, only blank lines.")
        raise CorpusError("The corpus's files contain no documents (no text, or only blank lines and empty records).")
    docs, sents, words = total["documents"], total["sentences"], total["words"]
    lines = sum(v for k, v in removed.items() if k.startswith("lines_"))
    pages = sum(v for k, v in removed.items() if k.startswith("pages_") or k.endswith("duplicate_pages"))
    hint = ""
    if lines or pages:
        hint = (
            f" Cleaning removed {lines} line{'s' * (lines != 1)} and {pages} "
            f"document{'s' * (pages != 1)}; switching some cleaning rules off keeps more text."
        )
    if sents < MIN_SENTENCES or words < MIN_WORDS:
        raise CorpusError(
            f"The corpus is too small to train on: after cleaning, {sents} sentence"
            f"{'s' * (sents != 1)} and {words} word{'s' * (words != 1)} remain, but at least "
            f"{MIN_SENTENCES} sentences and {MIN_WORDS} words are needed.{hint}"
        )
    if docs < MIN_DOCUMENTS:
        separator = "a blank line between documents" if fmt == "txt" else "one JSON object per document"
        raise CorpusError(
            f"The corpus has only {docs} document after cleaning, but at least {MIN_DOCUMENTS} are "
            f"needed so that one can be held out for validation. Use {separator}.{hint}"
        )
