"""What a corpus upload may be: every file name trainer.prep.sources reads (sources.UPLOAD_SUFFIXES),
checked with the shared upload code (webapp.jobs.uploads) before anything is stored, and what the
page shows of each file before the ingest reads it.

A corpus of one file keeps it as `raw<suffix>` in its folder (`raw.txt`, `raw.jsonl.zst`, ...);
several files, or an archive of them, go to `raw/0000<suffix>`, `raw/0001<suffix>`, ... with
`raw/uploads.json` naming each as the client did (see webapp.corpora.services).
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.jobs.uploads import check_file, shown_sizes, upload_suffix

WRONG_TYPE = (
    "“%(name)s” is not a file type LM Workbench reads. Upload a .txt file (documents separated by a "
    "blank line), a .jsonl or .json file (one JSON object with a \"text\" field per line), a .parquet "
    "or .arrow file, each optionally compressed with gzip, zstd or bzip2 (.gz, .zst, .bz2), or a .zip "
    "or .tar archive of such files."
)
FORMATS_HELP = (
    "Text (.txt: a blank line between documents), JSON lines (.jsonl, .json: one object per line), "
    "Parquet or Arrow, each optionally compressed (.gz, .zst, .bz2); several files at once, or a .zip "
    "or .tar archive of them."
)
# The longest compression suffixes a name may end in, with the compression trainer.prep.sources names.
_COMPRESSIONS = ((".gz", "gzip"), (".tgz", "gzip"), (".zst", "zstd"), (".zstd", "zstd"), (".bz2", "bz2"))
_FORMATS = ((".txt", "txt"), (".jsonl", "jsonl"), (".json", "jsonl"), (".parquet", "parquet"), (".arrow", "arrow"))


@lru_cache(maxsize=1)
def accepted_suffixes() -> tuple[str, ...]:
    """Every file name ending a corpus upload may have (trainer.prep.sources.UPLOAD_SUFFIXES), longest first."""
    from trainer.prep.sources import UPLOAD_SUFFIXES

    return tuple(sorted({s.lower() for s in UPLOAD_SUFFIXES}, key=len, reverse=True))


def accept_attribute() -> str:
    """For <input type=file accept=...>: the last part of every accepted ending (.txt, .gz, .zst, ...)."""
    parts = []
    for suffix in accepted_suffixes():
        last = "." + suffix.rsplit(".", 1)[-1]
        if last not in parts:
            parts.append(last)
    return ",".join(sorted(parts))


def is_archive(filename: str) -> bool:
    from trainer.prep.sources import is_archive as sources_is_archive

    return sources_is_archive(filename)


def guess_source(name: str, path: Path | str, size: int) -> dict:
    """What the page shows of an uploaded file before the ingest reads it: a SourceFile's dict, its
    format and compression guessed from the name (the ingest detects them from the bytes), or the
    format "archive" for an archive of files, which the ingest unpacks."""
    lower = (name or "").strip().lower()
    if is_archive(lower):
        return {"path": str(path), "name": name, "format": "archive", "compression": "none", "bytes": int(size)}
    compression = "none"
    for suffix, kind in _COMPRESSIONS:
        if lower.endswith(suffix):
            compression, lower = kind, lower[: -len(suffix)]
            break
    fmt = next((f for suffix, f in _FORMATS if lower.endswith(suffix)), "txt")
    return {"path": str(path), "name": name, "format": fmt, "compression": compression, "bytes": int(size)}


def corpus_suffix(filename: str) -> str | None:
    """The accepted corpus extension of `filename` (lower case), or None if trainer.prep.sources reads no such file."""
    return upload_suffix(filename, accepted_suffixes())


def check_upload(filename: str, size: int) -> str:
    """Return the stored suffix for an acceptable corpus upload; raise ValidationError with a sentence otherwise."""
    return check_file(filename, size, suffixes=accepted_suffixes(), wrong_type=WRONG_TYPE)


def check_uploads(files: Sequence[tuple[str, int]]) -> list[str]:
    """The stored suffix of each file of one corpus upload, given as (client's name, size); ValidationError
    with a sentence for the first file refused (named when there are several), for none at all, or for a
    total over settings.UPLOAD_MAX_BYTES."""
    if not files:
        raise ValidationError("No file was submitted.", code="required")
    suffixes = []
    for name, size in files:
        try:
            suffixes.append(check_upload(name, size))
        except ValidationError as error:
            if len(files) > 1 and error.code == "empty":
                raise ValidationError("“%(name)s” is empty (0 bytes). Choose files that contain text.",
                                      code="empty", params={"name": name}) from None
            raise
    total, limit = sum(size for _, size in files), settings.UPLOAD_MAX_BYTES
    if len(files) > 1 and total > limit:
        shown_size, shown_limit = shown_sizes(total, limit)
        raise ValidationError(
            "The %(n)s files are %(size)s in all; the largest upload accepted is %(limit)s.",
            code="too_large", params={"n": f"{len(files):,}", "size": shown_size, "limit": shown_limit},
        )
    return suffixes
