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
        self.detail = ""

    def __call__(self, percent: float) -> None:
        whole = int(max(0.0, min(100.0, percent)))
        if not self.enabled or whole == self.shown:
            return
        self.shown = whole
        self._draw()

    def stage(self, detail: dict) -> None:
        """A job of stages (Stages) says which runs, how fast and how long it has left."""
        text = describe_stage(detail)
        if self.enabled and text != self.detail:
            self.detail = text
            self._draw()

    def _draw(self) -> None:
        whole = max(self.shown, 0)
        filled = self.WIDTH * whole // 100
        tail = f"  {self.detail}\033[K" if self.detail else ""  # \033[K: clear a longer line drawn before
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {whole:3d}%{tail}")
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


class Stages:
    """Progress of a job made of stages, each with its own unit of work, rate and ETA.

    ``stages`` maps each stage's key to ``(label, share)``: its label for people and its share of
    the job's 0-100 percentage (the shares add up to 100, in the order the stages run). ``update``
    reports the stage's ``done`` of ``total`` units: ``callback(percent)`` through PercentProgress
    (so at most about 101 calls), and, when the callback has a ``stage`` method (the web app's job
    rows, the command line's bar), ``callback.stage(detail)`` at most every ``interval`` seconds with
    ``{"stage", "label", "done", "total", "unit", "rate" (units a second), "eta_seconds"}``. The
    rate and the ETA are the stage's own, measured from its start (or from the first update of a
    resumed stage, so work done before a restart does not inflate the rate).
    """

    def __init__(self, callback: Callable[[float], None] | None, stages: dict[str, tuple[str, float]], *,
                 interval: float = 0.5, clock: Callable[[], float] | None = None):
        import time

        self.percent = PercentProgress(callback)
        self.on_stage = getattr(callback, "stage", None)
        self.stages = stages
        self.interval = interval
        self.clock = clock or time.monotonic
        self.starts: dict[str, float] = {}
        self.base = {}
        acc = 0.0
        for key, (_, share) in stages.items():
            self.base[key] = acc
            acc += share
        self._first_done: dict[str, float] = {}
        self._last_detail = float("-inf")
        self.seconds: dict[str, float] = {}

    def update(self, key: str, done: float, total: float, unit: str = "MB", *, force: bool = False) -> None:
        label, share = self.stages[key]
        now = self.clock()
        if key not in self.starts:
            self.starts[key] = now
            self._first_done[key] = done
        fraction = min(1.0, done / total) if total > 0 else 1.0
        self.percent(self.base[key] + share * fraction)
        self.seconds[key] = now - self.starts[key]
        if self.on_stage is None or (not force and now - self._last_detail < self.interval):
            return
        self._last_detail = now
        elapsed = now - self.starts[key]
        fresh = done - self._first_done[key]
        rate = fresh / elapsed if elapsed > 0 and fresh > 0 else None
        eta = (total - done) / rate if rate and total > done else (0.0 if total <= done else None)
        self.on_stage({"stage": key, "label": label, "done": round(float(done), 3), "total": round(float(total), 3),
                       "unit": unit, "rate": None if rate is None else round(rate, 3),
                       "eta_seconds": None if eta is None else round(eta, 1)})

    def finish(self, key: str, total: float = 1.0, unit: str = "MB") -> None:
        self.update(key, total, total, unit, force=True)


def describe_stage(detail: dict) -> str:
    """``Reading and cleaning · 412 of 1,024 MB · 9.8 MB/s · about 1 min left`` from a stage's detail."""
    parts = [str(detail.get("label") or detail.get("stage") or "")]
    unit = detail.get("unit") or ""
    done, total = detail.get("done"), detail.get("total")
    if unit == "MB" and isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        parts.append(f"{done:,.0f} of {total:,.0f} MB")
        if detail.get("rate"):
            parts.append(f"{detail['rate']:,.1f} MB/s")
    eta = detail.get("eta_seconds")
    if isinstance(eta, (int, float)) and eta > 0:
        parts.append(f"about {_duration(eta)} left")
    return " · ".join(p for p in parts if p)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"
