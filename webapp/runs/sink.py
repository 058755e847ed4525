"""DatabaseChannelsSink: the trainer's MetricsSink that the web app hands to the engine.

Every metric point is written to the database before it is published to the run's websocket
group: a point anyone can have seen live is already stored. A dashboard that reconnects with
`?after=<cursor>` (webapp.runs.consumers) relies on it: it joins the group, then reads the
database, so each point is either in what it reads or published after it joined. (The points
used to be written in batches, up to a second after they were published; one published before a
socket joined and written after it read fell between the two and never reached it. A point is
one small INSERT, made every `log_every` steps.) Log lines and checkpoints are also written
before they are published.

Each point is published with its cursor (MetricPoint.seq, given as it is stored), which the socket
passes on, so that a client reconnects with `?after=<the last cursor it read>`.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import IntegrityError
from django.db.models import Q
from django.utils import timezone

from webapp.runs import shutdown
from webapp.runs.signals import validation_reported
from webapp.runs.events import send_run_event
from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run, RunStatus

log = logging.getLogger(__name__)

# How often the sink writes the run row (module constants so tests can make them immediate).
HEARTBEAT_EVERY_S = 2.0    # the run row's heartbeat/step/tokens are updated at most this often
STOP_CHECK_EVERY_S = 1.0   # should_stop() reads cancel_requested at most this often
SAMPLE_FIELDS = ("input", "generated", "reference")


def clean_values(values: dict) -> dict[str, float | None]:
    """JSON-safe metric values: plain floats, NaN/inf as None (PostgreSQL rejects NaN in jsonb)."""
    out: dict[str, float | None] = {}
    for key, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = number if math.isfinite(number) else None
    return out


def clean_nested(value):
    """Checkpoint metrics ({"train": {...}, "valid": {...}}) made JSON-safe, nesting kept."""
    if isinstance(value, dict):
        return {str(k): clean_nested(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_nested(v) for v in value]
    if isinstance(value, (str, bool)) or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def storage_relative(path: Path) -> str:
    """A checkpoint path as stored on the row: relative to STORAGE_ROOT when it lies inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path(settings.STORAGE_ROOT).resolve()))
    except ValueError:
        return str(path)


class DatabaseChannelsSink:
    """Implements trainer.training.sinks.MetricsSink for one claimed run."""

    def __init__(
        self,
        run_id,
        *,
        claimed_by: str,
        heartbeat_every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id = run_id
        self.claimed_by = claimed_by
        self.heartbeat_every_s = HEARTBEAT_EVERY_S if heartbeat_every_s is None else heartbeat_every_s
        self.clock = clock
        self._last_heartbeat = -math.inf
        self._held_beat: tuple[int, int] | None = None  # the newest heartbeat the interval held back

    # -- MetricsSink ---------------------------------------------------------------------
    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        values = clean_values(values)
        # Stored first, then published as stored, with its cursor (see the module docstring).
        point = store_point(self.run_id, int(step), split, values)
        send_run_event(self.run_id, {"type": "run.metrics", "step": point.step, "split": point.split,
                                     "values": point.values, "cursor": point.seq})
        if split == "valid":
            try:
                validation_reported.send(sender=Run, run_id=self.run_id, step=int(step), values=values)
            except Exception:  # noqa: BLE001 - a listener's failure must not stop the training
                log.exception("A validation listener of run %s failed", self.run_id)

    def log(self, text: str) -> None:
        line = LogLine.objects.create(run_id=self.run_id, text=str(text))
        send_run_event(self.run_id, {"type": "run.log", "id": line.id, "text": line.text,
                                     "time": line.created_at.isoformat()})

    def checkpoint(self, step: int, path: Path, metrics: dict) -> None:
        ckpt, _ = Checkpoint.objects.update_or_create(
            run_id=self.run_id, step=int(step),
            defaults={"path": storage_relative(path), "metrics": clean_nested(metrics or {})},
        )
        send_run_event(self.run_id, checkpoint_event(ckpt))

    def checkpoints_removed(self, steps: list[int]) -> None:
        """Retention removed these checkpoints after a save (trainer.training.retention): their rows
        go, and the page drops them."""
        from webapp.runs.retention import checkpoints_removed

        gone = checkpoints_removed(self.run_id, steps)
        send_run_event(self.run_id, {"type": "run.checkpoints_removed", "steps": gone})

    def samples(self, step: int, rows: list[dict]) -> None:
        """A validation's generated samples: the worker wrote them to the run's samples.json
        (trainer.finetune.report); the page gets them live, like the metrics."""
        send_run_event(self.run_id, {"type": "run.samples", "step": int(step),
                                     "samples": [{k: str(r.get(k, "")) for k in SAMPLE_FIELDS} for r in rows]})

    def run_length(self, max_steps: int, epochs: float) -> None:
        """A run given in epochs: the steps they take (known once the worker has read the train
        split) go on the row, so that its progress, ETA and epoch count are right."""
        Run.objects.filter(pk=self.run_id).update(max_steps=int(max_steps))
        send_run_event(self.run_id, {"type": "run.length", "max_steps": int(max_steps), "epochs": float(epochs)})

    def heartbeat(self, step: int, tokens_seen: int) -> None:
        now = self.clock()
        if now - self._last_heartbeat < self.heartbeat_every_s:
            self._held_beat = (int(step), int(tokens_seen))  # written by close() if no later beat is
            return
        self._last_heartbeat, self._held_beat = now, None
        self._beat(step, tokens_seen)

    def _beat(self, step: int, tokens_seen: int) -> None:
        # A run the reaper wrongly marked crashed (a very long step) comes back to life here;
        # a run another worker has claimed since (resumed elsewhere) is left alone.
        Run.objects.filter(
            Q(status=RunStatus.RUNNING) | Q(status=RunStatus.CRASHED), pk=self.run_id, claimed_by=self.claimed_by
        ).update(
            status=RunStatus.RUNNING, heartbeat_at=timezone.now(), current_step=int(step),
            tokens_seen=int(tokens_seen), finished_at=None,
        )
        send_run_event(self.run_id, {"type": "run.heartbeat", "step": int(step), "tokens_seen": int(tokens_seen)})

    def close(self) -> None:
        if self._held_beat is not None:  # a run shorter than the interval still records its last step and tokens
            self._beat(*self._held_beat)
            self._held_beat = None


def store_point(run_id, step: int, split: str, values: dict) -> MetricPoint:
    """Store a metric point with the run's next cursor (MetricPoint.seq); a step already stored (a
    resumed run reporting it again) is kept as it was, with its cursor, and returned, not duplicated."""
    try:
        return MetricPoint.objects.create(run_id=run_id, step=step, split=split, values=values)
    except IntegrityError:
        stored = MetricPoint.objects.filter(run_id=run_id, split=split, step=step).first()
        if stored is None:  # not the step's constraint (the run is gone): the error stands
            raise
        return stored


def checkpoint_event(ckpt: Checkpoint) -> dict:
    from django.urls import reverse

    from webapp.runs.retention import HOLDS_RESUMABLE, HOLDS_WEIGHTS
    from trainer.training.retention import describe, human_size

    disk = describe(ckpt.folder)
    return {
        "type": "run.checkpoint",
        "id": str(ckpt.id),
        "step": ckpt.step,
        "metrics": ckpt.metrics,
        "created_at": ckpt.created_at.isoformat() if ckpt.created_at else None,
        "explore_url": f"{reverse('explorer:index')}?checkpoint={ckpt.id}",
        "finetune_url": f"{reverse('runs:finetune')}?checkpoint={ckpt.id}",
        "export_url": reverse("runs:checkpoint-export", args=[ckpt.id]),
        "serve_url": reverse("serving:page", args=[ckpt.id]),
        "size": human_size(disk["size_bytes"]), "holds": HOLDS_RESUMABLE if disk["resumable"] else HOLDS_WEIGHTS,
        "pin_url": reverse("runs:checkpoint-pin", args=[ckpt.id]),
    }


class StopCheck:
    """The engine's should_stop(): True once a cancel is requested (or another worker took the run),
    or at once when the worker is shutting down (webapp.runs.shutdown: the run is then requeued).

    The engine asks every step; the row is read at most once per `every_s` seconds.
    """

    def __init__(self, run_id, *, claimed_by: str, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_id = run_id
        self.claimed_by = claimed_by
        self.every_s = STOP_CHECK_EVERY_S if every_s is None else every_s
        self.clock = clock
        self._checked_at = -math.inf
        self._stop = False

    def __call__(self) -> bool:
        if shutdown.requested():
            return True
        now = self.clock()
        if self._stop or now - self._checked_at < self.every_s:
            return self._stop
        self._checked_at = now
        row = Run.objects.filter(pk=self.run_id).values("cancel_requested", "claimed_by").first()
        self._stop = row is None or row["cancel_requested"] or row["claimed_by"] != self.claimed_by
        return self._stop
