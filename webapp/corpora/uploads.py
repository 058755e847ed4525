"""What an upload may be: its extension and its size, checked before anything is stored; and
keeping it (a rename of the file Django streamed to disk).

The client's file name is only ever shown; the stored file is named from the object's id
and the accepted extension (`raw.txt`, `raw.jsonl.gz`, ...). Corpora use the defaults here;
other uploads (labelled datasets) pass their own suffixes and wording to `check_file`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, JsonResponse

# Longest first, so "x.jsonl.gz" matches ".jsonl.gz" and not ".gz".
ACCEPTED_SUFFIXES = (".jsonl.gz", ".txt.gz", ".jsonl", ".txt")
ACCEPT_ATTRIBUTE = ",".join((".txt", ".jsonl", ".gz"))  # for <input type=file accept=...>
WRONG_TYPE = (
    "“%(name)s” is not a file type LM Workbench reads. Upload a .txt file (documents separated "
    "by a blank line) or a .jsonl file (one JSON object with a \"text\" field per line); "
    "either may be gzip-compressed (.txt.gz, .jsonl.gz)."
)
EMPTY = "The file is empty (0 bytes). Choose a file that contains text."


def upload_suffix(filename: str, suffixes: Sequence[str] = ACCEPTED_SUFFIXES) -> str | None:
    """The accepted extension of `filename` (lower case), or None if it is not one we read.
    `suffixes` must list the longer ones first (".csv.gz" before ".csv")."""
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
    return check_file(filename, size, suffixes=ACCEPTED_SUFFIXES, wrong_type=WRONG_TYPE)


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
