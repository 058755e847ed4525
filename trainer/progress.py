"""Progress reporting for long data jobs (ingest, tokenizer training, encoding)."""
from __future__ import annotations

from typing import Callable


class PercentProgress:
    """Calls ``callback(percent)`` only when the whole percentage grows: at most 101 calls,
    so a callback that writes to the database stays cheap."""

    def __init__(self, callback: Callable[[float], None] | None):
        self.callback = callback
        self.last = -1

    def __call__(self, percent: float) -> None:
        whole = int(max(0.0, min(100.0, percent)))
        if self.callback is not None and whole > self.last:
            self.last = whole
            self.callback(float(whole))

    report = __call__
