"""A free-space guard: uploads and launches are refused with a sentence (HTTP 507) when the
storage volume would drop below STORAGE_MIN_FREE_BYTES, instead of failing half-way."""
from __future__ import annotations

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
