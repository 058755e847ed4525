"""Where a run reports to: the web app's database sink, the console, a list (tests).

`train()` calls a sink; it never knows who listens. The web app implements MetricsSink
in webapp/runs (saving MetricPoint rows, pushing to the websocket group).

A sink may also have `samples(step, rows)`: a fine-tuning run's generated samples at a
validation ([{"input", "generated", "reference"}], trainer.finetune.techniques.FinetuneLoop);
the loop calls it only where a sink has it. So is `checkpoints_removed(steps)`: the checkpoints
retention removed after a save (trainer.training.retention), which the web app drops from its list.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import IO, Protocol, runtime_checkable


@runtime_checkable
class MetricsSink(Protocol):
    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        """One metric event; split is "train" or "valid"."""

    def log(self, text: str) -> None:
        """A line for the run's log."""

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        """A checkpoint folder was completed; metrics = {"train": {...}, "valid": {...}}."""

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        """Called every step; implementations throttle (e.g. write at most every few seconds)."""

    def close(self) -> None:
        """The run is over (also after an error)."""


class NullSink:
    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        pass

    def log(self, text: str) -> None:
        pass

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        pass

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        pass

    def close(self) -> None:
        pass


class ListSink:
    """Keeps everything in lists (for tests)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str, dict[str, float]]] = []
        self.lines: list[str] = []
        self.checkpoints: list[tuple[int, Path, dict]] = []
        self.heartbeats: list[tuple[int, int]] = []
        self.sample_events: list[tuple[int, list[dict]]] = []
        self.removed: list[int] = []
        self.closed = False

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        self.events.append((step, split, dict(values)))

    def log(self, text: str) -> None:
        self.lines.append(text)

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        self.checkpoints.append((step, Path(path), metrics))

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        self.heartbeats.append((step, tokens_seen))

    def samples(self, step: int, rows: list[dict]) -> None:
        self.sample_events.append((step, [dict(r) for r in rows]))

    def checkpoints_removed(self, steps: list[int]) -> None:
        self.removed.extend(int(s) for s in steps)

    def close(self) -> None:
        self.closed = True

    def split(self, split: str) -> list[tuple[int, dict[str, float]]]:
        """[(step, values)] of one split."""
        return [(s, v) for s, sp, v in self.events if sp == split]


class TeeSink:
    """Sends everything to several sinks."""

    def __init__(self, *sinks: MetricsSink) -> None:
        self.sinks = sinks

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        for s in self.sinks:
            s.metrics(step, split, values)

    def log(self, text: str) -> None:
        for s in self.sinks:
            s.log(text)

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        for s in self.sinks:
            s.checkpoint(step, path, metrics)

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        for s in self.sinks:
            s.heartbeat(step, tokens_seen)

    def samples(self, step: int, rows: list[dict]) -> None:
        for s in self.sinks:
            send = getattr(s, "samples", None)
            if callable(send):
                send(step, rows)

    def run_length(self, max_steps: int, epochs: float) -> None:
        for s in self.sinks:
            tell = getattr(s, "run_length", None)
            if callable(tell):
                tell(max_steps, epochs)

    def checkpoints_removed(self, steps: list[int]) -> None:
        for s in self.sinks:
            tell = getattr(s, "checkpoints_removed", None)
            if callable(tell):
                tell(steps)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class JsonLinesSink:
    """Every event as one JSON object per line on a stream: how a multi-device run's rank 0
    reports to the web app's task that started it (`python -m trainer train --events`, read by
    webapp/runs/multiproc.py). Lines:
      {"event": "metrics", "step", "split", "values"}     {"event": "log", "text"}
      {"event": "checkpoint", "step", "path", "metrics"}  {"event": "heartbeat", "step", "tokens_seen"}
      {"event": "run_length", "max_steps", "epochs"}     (a run given in epochs, once its steps are known)
      {"event": "checkpoints_removed", "steps"}          (retention removed them after a save)
    Heartbeats are written at most every `heartbeat_every_s` seconds, and the last one held back
    when the sink closes (so the reader learns the run's final step and tokens)."""

    def __init__(self, stream: IO[str] | None = None, *, heartbeat_every_s: float = 1.0):
        self.stream = stream or sys.stdout
        self.heartbeat_every_s = heartbeat_every_s
        self._beat_at = -math.inf
        self._held_beat: dict | None = None

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        self._write({"event": "metrics", "step": step, "split": split, "values": values})

    def log(self, text: str) -> None:
        self._write({"event": "log", "text": text})

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        self._write({"event": "checkpoint", "step": step, "path": str(path), "metrics": metrics})

    def run_length(self, max_steps: int, epochs: float) -> None:
        self._write({"event": "run_length", "max_steps": max_steps, "epochs": epochs})

    def checkpoints_removed(self, steps: list[int]) -> None:
        self._write({"event": "checkpoints_removed", "steps": [int(s) for s in steps]})

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        beat = {"event": "heartbeat", "step": step, "tokens_seen": tokens_seen}
        now = time.monotonic()
        if now - self._beat_at >= self.heartbeat_every_s:
            self._beat_at, self._held_beat = now, None
            self._write(beat)
        else:
            self._held_beat = beat

    def close(self) -> None:
        if self._held_beat is not None:
            self._write(self._held_beat)
            self._held_beat = None
        self.stream.flush()

    def _write(self, record: dict) -> None:
        self.stream.write(json.dumps(record) + "\n")  # NaN/Infinity as Python's json writes and reads them
        self.stream.flush()


class ConsoleSink:
    """One line per log step on the console, and every metric event appended to
    run_folder/metrics.jsonl ({"step", "split", "values", "time"})."""

    def __init__(self, run_folder: Path, *, stream: IO[str] | None = None, max_steps: int | None = None):
        self.stream = stream or sys.stdout
        self.max_steps = max_steps
        Path(run_folder).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_folder) / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        record = {"step": step, "split": split, "values": values, "time": round(time.time(), 3)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self._print(format_metrics(step, split, values, self.max_steps))

    def log(self, text: str) -> None:
        self._print(text)

    def run_length(self, max_steps: int, epochs: float) -> None:
        """A run given in epochs: the steps they take, known once the train split is read."""
        self.max_steps = max_steps

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        pass  # train() logs a line for it

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        pass

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def format_metrics(step: int, split: str, v: dict[str, float], max_steps: int | None = None) -> str:
    """'step   120/1000 | loss 6.1234 | mlm_acc 0.081 | lr 1.2e-04 | 12,345 tok/s | eta 1m05s'."""
    where = f"{step:>6}/{max_steps}" if max_steps else f"{step:>6}"
    parts = [f"step {where}" if split == "train" else f"{split} @ {step}"]  # valid @ 90, test @ 90
    for key, fmt in (("loss", ".4f"), ("mlm_loss", ".4f"), ("nsp_loss", ".4f"), ("perplexity", ".2f"),
                     ("mlm_acc", ".3f"), ("nsp_acc", ".3f"), ("lr", ".2e"), ("grad_norm", ".2f")):
        if key in v and v[key] is not None and not (isinstance(v[key], float) and math.isnan(v[key])):
            parts.append(f"{key} {v[key]:{fmt}}")
    if v.get("epoch") is not None:
        parts.append(f"epoch {v['epoch']:.2f}")
    if "tokens_per_s" in v:
        parts.append(f"{v['tokens_per_s']:,.0f} tok/s")
    if "memory_mb" in v:
        parts.append(f"{v['memory_mb']:,.0f} MB")
    if "eta_s" in v:
        parts.append(f"eta {format_duration(v['eta_s'])}")
    return " | ".join(parts)


def format_duration(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
