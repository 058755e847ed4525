"""What every upload shares, whatever it holds (a corpus, a labelled dataset, a model archive): the
type and size check before anything is stored, keeping the file (a rename of the file Django
streamed to disk), and the answers the upload script (static/js/upload.js) reads.

Each app names its own accepted suffixes and wording: webapp.corpora.uploads (every name
trainer.prep.sources reads), webapp.datasets.uploads (the formats trainer.prep.labelled reads).
The client's file name is only ever shown; the stored file is named from the row's id and the
accepted suffix.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, JsonResponse

EMPTY = "The file is empty (0 bytes). Choose a file that contains text."


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"  # pragma: no cover - the loop always returns


def shown_sizes(size: int, limit: int) -> tuple[str, str]:
    """`size` and `limit` as a refusal shows them: rounded, or in bytes when just over the limit
    (the rounded sizes would read the same)."""
    shown_size, shown_limit = human_bytes(size), human_bytes(limit)
    if shown_size == shown_limit:
        return f"{size:,} bytes", f"{limit:,} bytes"
    return shown_size, shown_limit


def upload_suffix(filename: str, suffixes: Sequence[str]) -> str | None:
    """The accepted extension of `filename` (lower case), or None if it is not one of `suffixes`,
    which must list the longer ones first (".csv.gz" before ".csv")."""
    name = (filename or "").strip().lower()
    return next((s for s in suffixes if name.endswith(s) and len(name) > len(s)), None)


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
        shown_size, shown_limit = shown_sizes(size, limit)
        raise ValidationError(
            "The file is %(size)s; the largest upload accepted is %(limit)s.",
            code="too_large",
            params={"size": shown_size, "limit": shown_limit},
        )
    return suffix


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
