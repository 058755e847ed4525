"""What an upload may be: its extension and its size, checked before anything is stored; and
keeping it (a rename of the file Django streamed to disk).

The client's file name is only ever shown; the stored file is named from the object's id and the
accepted extension. A corpus of one file keeps it as `raw<suffix>` in its folder (`raw.txt`,
`raw.jsonl.zst`, ...); several files, or an archive of them, go to `raw/0000<suffix>`,
`raw/0001<suffix>`, ... with `raw/uploads.json` naming each as the client did (see
webapp.corpora.services). Corpora accept every name trainer.prep.sources reads
(sources.UPLOAD_SUFFIXES); other uploads (labelled datasets) pass their own suffixes and wording to
`check_file`.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, JsonResponse

WRONG_TYPE = (
    "“%(name)s” is not a file type LM Workbench reads. Upload a .txt file (documents separated by a "
    "blank line), a .jsonl or .json file (one JSON object with a \"text\" field per line), a .parquet "
    "or .arrow file, each optionally compressed with gzip, zstd or bzip2 (.gz, .zst, .bz2), or a .zip "
    "or .tar archive of such files."
)
EMPTY = "The file is empty (0 bytes). Choose a file that contains text."
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


def upload_suffix(filename: str, suffixes: Sequence[str] | None = None) -> str | None:
    """The accepted extension of `filename` (lower case), or None if it is not one we read.
    `suffixes` (default: a corpus's) must list the longer ones first (".csv.gz" before ".csv")."""
    if suffixes is None:
        suffixes = accepted_suffixes()
    name = (filename or "").strip().lower()
    return next((s for s in suffixes if name.endswith(s) and len(name) > len(s)), None)


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"  # pragma: no cover - the loop always returns


def check_file(filename: str, size: int, *, suffixes: Sequence[str], wrong_type: str, empty: str = EMPTY) -> str:
    """The stored suffix of an acceptable upload; ValidationError with a sentence otherwise.

    `wrong_type` is the sentence for a name without one of `suffixes` (``%(name)s`` is the file's
    name); the size must be above 0 and at most settings.UPLOAD_MAX_BYTES.
    """
    suffix = upload_suffix(filename, suffixes)
    if suffix is None:
        raise ValidationError(wrong_type, code="extension", params={"name": filename})
    if size == 0:
        raise ValidationError(empty, code="empty")
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
        shown_size, shown_limit = human_bytes(total), human_bytes(limit)
        if shown_size == shown_limit:
            shown_size, shown_limit = f"{total:,} bytes", f"{limit:,} bytes"
        raise ValidationError(
            "The %(n)s files are %(size)s in all; the largest upload accepted is %(limit)s.",
            code="too_large", params={"n": f"{len(files):,}", "size": shown_size, "limit": shown_limit},
        )
    return suffixes


def keep_upload(uploaded_file: UploadedFile, target: Path) -> Path:
    """Put an uploaded file at `target` (its folder must exist).

    The file Django streamed to disk (FILE_UPLOAD_TEMP_DIR, inside the storage folder) is moved,
    not copied; an in-memory file (e.g. built by a script) is written out in chunks. A partial
    target is removed when this fails.
    """
    try:
        temp_path = getattr(uploaded_file, "temporary_file_path", None)
        if temp_path is not None:
            file_move_safe(temp_path(), str(target))
        else:
            with open(target, "wb") as out:
                for chunk in uploaded_file.chunks():
                    out.write(chunk)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


def is_xhr(request: HttpRequest) -> bool:
    """The upload form's script (static/js/upload.js) sends the file with XMLHttpRequest."""
    return request.headers.get("x-requested-with") == "XMLHttpRequest"


def form_errors_response(form) -> JsonResponse:
    """A refused upload form for the script: its first sentence, and every field's (HTTP 400)."""
    errors = {name: [e["message"] for e in errs] for name, errs in form.errors.get_json_data().items()}
    return JsonResponse({"error": next(iter(errors.values()))[0], "fields": errors}, status=400)
