"""What an upload may be: its extension and its size, checked before anything is stored.

The client's file name is only ever shown; the stored file is named from the corpus id
and the accepted extension (`raw.txt`, `raw.jsonl.gz`, ...).
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError

# Longest first, so "x.jsonl.gz" matches ".jsonl.gz" and not ".gz".
ACCEPTED_SUFFIXES = (".jsonl.gz", ".txt.gz", ".jsonl", ".txt")
ACCEPT_ATTRIBUTE = ",".join((".txt", ".jsonl", ".gz"))  # for <input type=file accept=...>


def upload_suffix(filename: str) -> str | None:
    """The accepted extension of `filename` (lower case), or None if it is not one we read."""
    name = (filename or "").strip().lower()
    return next((s for s in ACCEPTED_SUFFIXES if name.endswith(s) and len(name) > len(s)), None)


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"  # pragma: no cover - the loop always returns


def check_upload(filename: str, size: int) -> str:
    """Return the stored suffix for an acceptable upload; raise ValidationError with a sentence otherwise."""
    suffix = upload_suffix(filename)
    if suffix is None:
        raise ValidationError(
            "“%(name)s” is not a file type LM Workbench reads. Upload a .txt file (documents separated "
            "by a blank line) or a .jsonl file (one JSON object with a \"text\" field per line); "
            "either may be gzip-compressed (.txt.gz, .jsonl.gz).",
            code="extension",
            params={"name": filename},
        )
    if size == 0:
        raise ValidationError("The file is empty (0 bytes). Choose a file that contains text.", code="empty")
    limit = settings.UPLOAD_MAX_BYTES
    if size > limit:
        shown_size, shown_limit = human_bytes(size), human_bytes(limit)
        if shown_size == shown_limit:  # just over the limit: the rounded sizes would read the same
            shown_size, shown_limit = f"{size:,} bytes", f"{limit:,} bytes"
        raise ValidationError(
            "The file is %(size)s; the largest upload accepted is %(limit)s.",
            code="too_large",
            params={"size": shown_size, "limit": shown_limit},
        )
    return suffix
