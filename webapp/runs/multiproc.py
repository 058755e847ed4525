"""A run on several devices: the Celery task starts torchrun and relays what rank 0 reports.

run_execute (webapp.runs.execution) comes here when a pre-training run's `devices` asks for more
than one process. The run's settings go to <run folder>/run_config.yaml, and the task starts

    python -m torch.distributed.run --standalone --nproc-per-node N \\
        -m trainer train run_config.yaml --data <tokenizer folder> --out <run folder> --events [--resume]

as a subprocess in a session of its own (start_new_session): never torch.multiprocessing inside
the prefork pool child, whose processes are daemonic and may not have children (celery#1709).
torchrun starts the N ranks (each in its own session too) and watches them.

- Events: rank 0 writes its sink's events as JSON lines on stdout
  (trainer.training.sinks.JsonLinesSink) and ends with {"event": "result", "status",
  "final_step"}; this task reads them and calls the run's DatabaseChannelsSink, so the database
  and the websocket get exactly what a one-process run sends. Lines that are not events (a
  library's print) go to the run's log. stderr is kept (its last lines) for the error message.
- Heartbeat: the claim stays with this pool child, which beats for the run every POLL_S
  seconds while the processes live.
- Cancel: StopCheck is read every POLL_S seconds; on a cancel the task sends SIGTERM to
  torchrun's group; torchrun passes it to every rank, the ranks stop after the same step and
  save a checkpoint (trainer.training.distributed), and torchrun kills what is left after 30 s.
  The task kills torchrun's group after CANCEL_GRACE_S.
- The end: a result line -> succeeded or cancelled; exit status 2 without one -> failed with
  rank 0's sentence; anything else (a rank killed or crashed: torchrun stops the others) ->
  crashed, and resume continues from the last checkpoint, on any number of devices.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable

from trainer.config import RunConfig
from trainer.errors import UserError
from webapp.runs.models import Run, RunStatus

log = logging.getLogger(__name__)

CONFIG_NAME = "run_config.yaml"
POLL_S = 1.0           # how often the task beats and checks for a cancel while the ranks train
CANCEL_GRACE_S = 60.0  # after a cancel, torchrun's group is killed when still there this much later
EXIT_USER_ERROR = 2    # trainer.cli's status for a problem the user can fix


class ProcessesCrashed(UserError):
    """A rank died (killed, out of memory, a bug): the run is crashed, not failed, and resumes."""

    status = RunStatus.CRASHED


def command(run: Run, config_file: Path, processes: int, *, resume: bool) -> list[str]:
    """torchrun on the trainer's entry point for this run."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
            "-m", "trainer", "train", str(config_file), "--data", str(run.tokenizer.folder), "--out", str(run.folder),
            "--events", *(["--resume"] if resume else [])]


def train(run: Run, config: RunConfig, sink: Any, should_stop: Callable[[], bool], *, processes: int,
          resume: bool) -> tuple[str, int]:
    """Train the run on `processes` processes of this machine; returns (status, final step) as
    the one-process path does. UserError (failed) or ProcessesCrashed (crashed) otherwise."""
    config_file = run.folder / CONFIG_NAME
    config_file.write_text(config.to_yaml(), encoding="utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command(run, config_file, processes, resume=resume), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    relay = _Relay(sink, step=run.current_step, tokens_seen=run.tokens_seen)
    lines: queue.Queue = queue.Queue()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    readers = [threading.Thread(target=_read, args=(proc.stdout, lines.put, True), daemon=True),
               threading.Thread(target=_read, args=(proc.stderr, tail.append, False), daemon=True)]
    for t in readers:
        t.start()
    cancelled_at: float | None = None
    try:
        while True:
            try:
                line = lines.get(timeout=POLL_S)
            except queue.Empty:
                line = ""
            if line is None:  # stdout closed: every process is gone
                break
            if line:
                relay.line(line)
            sink.heartbeat(relay.step, relay.tokens_seen)
            if cancelled_at is None and should_stop():
                cancelled_at = time.monotonic()
                _signal(proc, signal.SIGTERM)
            elif cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                _signal(proc, signal.SIGKILL)
    finally:
        if proc.poll() is None:  # this task is being stopped itself: take the processes with it
            _signal(proc, signal.SIGTERM)
        code = proc.wait()
        for t in readers:
            t.join(timeout=5)
    if relay.result is not None:
        status = RunStatus.CANCELLED if relay.result.get("status") == "cancelled" else RunStatus.SUCCEEDED
        return status, int(relay.result.get("final_step", relay.step))
    said = [line[len("error: "):] for line in tail if line.startswith("error: ")]
    if code == EXIT_USER_ERROR and said:
        raise UserError(said[-1])
    if cancelled_at is not None:
        return RunStatus.CANCELLED, relay.step
    log.warning("Run %s: torchrun ended with status %s; its last lines:\n%s", run.id, code, "\n".join(tail))
    raise ProcessesCrashed(f"A training process stopped unexpectedly (torchrun ended with exit status {code}); the "
                           f"others were stopped too. Resume continues from the last checkpoint.")


class _Relay:
    """Rank 0's JSON lines -> the run's sink; remembers the step, the tokens and the result."""

    def __init__(self, sink: Any, *, step: int, tokens_seen: int) -> None:
        self.sink, self.step, self.tokens_seen = sink, step, tokens_seen
        self.result: dict | None = None

    def line(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or "event" not in event:
            if line.strip():
                self.sink.log(line.rstrip())  # a print of some library on rank 0's stdout
            return
        kind = event["event"]
        if kind == "metrics":
            self.step = max(self.step, int(event["step"]))
            self.sink.metrics(int(event["step"]), event["split"], event["values"])
        elif kind == "log":
            self.sink.log(event["text"])
        elif kind == "checkpoint":
            self.sink.checkpoint(int(event["step"]), Path(event["path"]), event.get("metrics") or {})
        elif kind == "heartbeat":
            self.step, self.tokens_seen = int(event["step"]), int(event["tokens_seen"])
        elif kind == "run_length" and callable(getattr(self.sink, "run_length", None)):
            self.sink.run_length(int(event["max_steps"]), float(event["epochs"]))
        elif kind == "checkpoints_removed" and callable(getattr(self.sink, "checkpoints_removed", None)):
            self.sink.checkpoints_removed([int(s) for s in event["steps"]])
        elif kind == "result":
            self.result = event


def _read(stream: IO[str] | None, put: Callable[[Any], None], end: bool) -> None:
    """Each line of a pipe (without its newline) to put(), then None when `end`."""
    if stream is not None:
        for line in stream:
            put(line.rstrip("\n"))
    if end:
        put(None)


def _signal(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
