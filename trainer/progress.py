"""Progress reporting for long data jobs (ingest, tokenizer training, encoding, imports, exports).

Every long step takes a ``progress(percent)`` callback. The web app's jobs write it to a row
(throttled by PercentProgress); the command line draws it as a bar (TerminalBar) when a person
is watching, and stays quiet when its output goes to a file or a pipe.
"""
from __future__ import annotations

import sys
from typing import IO, Callable


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


class TerminalBar:
    """``label [#######.............]  35%`` redrawn in place on `stream` (stderr by default), as a
    progress callback. It draws only when both stdout and the stream are terminals: a command whose
    output is captured (a log file, a pipe, CI) gets no carriage returns in it. Use as a context
    manager, so that the line is ended (and the bar shown full when the step finished)."""

    WIDTH = 30

    def __init__(self, label: str, *, stream: IO[str] | None = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) and _is_terminal(sys.stdout)
        self.shown = -1

    def __call__(self, percent: float) -> None:
        whole = int(max(0.0, min(100.0, percent)))
        if not self.enabled or whole == self.shown:
            return
        self.shown = whole
        filled = self.WIDTH * whole // 100
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {whole:3d}%")
        self.stream.flush()

    def __enter__(self) -> "TerminalBar":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.enabled or self.shown < 0:
            return
        if exc_type is None:
            self(100)
        self.stream.write("\n")
        self.stream.flush()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False
