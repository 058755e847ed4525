"""A free-space guard: uploads and launches are refused with a sentence (HTTP 507) when the
storage volume would drop below STORAGE_MIN_FREE_BYTES, instead of failing half-way.

When the disk fills anyway (the guard is checked before a write, not during it; other programs
use the volume too), `is_disk_full` recognises the error, whichever layer raised it, and every
caller says DISK_FULL instead: a 507 from the API and the pages (webapp.api.errors,
webapp.server.limits, webapp.server.handler), the run's end in a worker (webapp.runs.services), a
background job's end (webapp.jobs.lifecycle.fail).
"""
from __future__ import annotations

import errno
import shutil

from django.conf import settings

from trainer.errors import UserError


class StorageFullError(UserError):
    """The storage volume is nearly full (HTTP 507 Insufficient Storage)."""

    status_code = 507


def free_bytes() -> int:
    return shutil.disk_usage(settings.STORAGE_ROOT).free


def check_free_space(*, needed: int = 0, what: str) -> None:
    """StorageFullError unless `needed` more bytes leave at least STORAGE_MIN_FREE_BYTES free."""
    free, floor = free_bytes(), settings.STORAGE_MIN_FREE_BYTES
    if free - needed < floor:
        raise StorageFullError(
            f"The server's storage is nearly full ({free / 1e9:,.1f} GB free, and {floor / 1e9:,.1f} GB are kept "
            f"free), so {what} cannot start now. Delete runs, checkpoints or corpora you no longer need, then try "
            "again.")


DISK_FULL = ("The disk is full: the server's storage has no space left, so this could not be saved. Delete runs, "
             "checkpoints or corpora you no longer need (or ask the administrator for space), then try again.")
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_PG_DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full ("could not extend file ...: No space left on device")


class DiskFullError(StorageFullError):
    """A write failed because the disk is full (HTTP 507), said in a sentence."""

    def __init__(self, message: str = DISK_FULL) -> None:
        super().__init__(message)


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc` (or an error it was raised from) says the disk has no space left: an OSError
    ENOSPC/EDQUOT (files, uploads), SQLite's "database or disk is full", PostgreSQL's disk_full.
    Django wraps the database drivers' errors, hence the walk down the chain."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or getattr(exc, "sqlstate", None) == _PG_DISK_FULL:
            return True
        text = str(exc)
        if "database or disk is full" in text or ("could not extend file" in text and "No space" in text):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
