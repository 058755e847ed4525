"""Worker processes for the corpus jobs (cleaning pieces, encoding pieces): every core busy.

``run_pieces(module, work, todo, workers, ...)`` starts ``workers`` Python processes running
``python -m MODULE serve WORK``; each reads piece numbers from its stdin, one a line, does the
piece (the module's ``do_piece(work, index)``) and answers ``ok N`` or ``error N JSON`` on its
stdout. A free worker gets the next piece, so a slow piece does not hold the others back, and
each process imports its libraries and loads its tokenizer once, not once a piece.

Progress: a piece's function takes an ``on_bytes(n)`` callback; in a worker it is
``progress_file(work, index)``, which writes the bytes done so far to WORK/progress/INDEX at most
every PROGRESS_EVERY_S; ``run_pieces`` adds them to the sizes of the pieces finished and hands
the running total to its ``on_progress``.

Plain subprocesses rather than multiprocessing: a Celery prefork pool process is daemonic and
may not start multiprocessing children (celery#1709); any process may start these. They run
with one thread each (OMP/RAYON) and end when their stdin closes, so a parent that dies (or is
killed) takes them with it at their next read.
"""
from __future__ import annotations

import importlib
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from trainer.errors import UserError

_ROOT = Path(__file__).resolve().parents[2]


class PieceFailed(Exception):
    """A worker's piece failed: ``user`` says whether ``message`` is a sentence for the user."""

    def __init__(self, index: int, message: str, user: bool, trace: str = ""):
        super().__init__(message)
        self.index, self.message, self.user, self.trace = index, message, user, trace


PROGRESS_EVERY_S = 0.5  # how often a worker writes a piece's bytes done


def _progress_path(work: Path, index: int) -> Path:
    return work / "progress" / f"{index:06d}"


def progress_file(work: Path, index: int) -> Callable[[int], None]:
    """The ``on_bytes(n)`` of a piece done in a worker: n written for run_pieces to read, at most
    every PROGRESS_EVERY_S (the file goes once the piece is done: done_progress)."""
    path, last = _progress_path(work, index), [0.0]
    path.parent.mkdir(parents=True, exist_ok=True)

    def on_bytes(n: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            path.write_text(str(n))

    return on_bytes


def done_progress(work: Path, index: int) -> None:
    _progress_path(work, index).unlink(missing_ok=True)


def _bytes_done(work: Path, index: int) -> int:
    try:
        return int(_progress_path(work, index).read_text() or 0)
    except (OSError, ValueError):
        return 0


def run_pieces(module: str, work: Path, todo: list[int], workers: int, *, sizes: list[int], done_before: int,
               on_progress: Callable[[int], None], tick: float = 0.25) -> None:
    """Do the pieces ``todo`` in up to ``workers`` processes. ``sizes[i]``: piece i's bytes;
    ``on_progress(n)`` about every ``tick`` seconds with the bytes done: ``done_before`` (the
    pieces done earlier), the pieces finished here and what the running ones wrote to their
    progress files. Raises PieceFailed for the first piece that fails (after stopping the others),
    RuntimeError when a worker dies without a word."""
    finished, shown, total = [done_before], [done_before], sum(sizes)

    def on_done(i: int) -> None:
        finished[0] += sizes[i]

    def on_tick() -> None:
        # never backwards: a piece's file is gone a moment before its "ok" is read
        running = sum(_bytes_done(work, i) for i in busy.values())
        shown[0] = max(shown[0], min(total, finished[0] + running))
        on_progress(shown[0])

    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    queue = list(todo)
    procs: list[subprocess.Popen] = []
    busy: dict[subprocess.Popen, int] = {}
    sel = selectors.DefaultSelector()
    try:
        for _ in range(min(workers, len(queue))):
            proc = subprocess.Popen([sys.executable, "-m", module, "serve", str(work)], env=env, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
            procs.append(proc)
            sel.register(proc.stdout, selectors.EVENT_READ, proc)
            _give(proc, queue, busy)
        while busy:
            events = sel.select(timeout=tick)
            for key, _ in events:
                proc = key.data
                line = proc.stdout.readline()
                if not line:
                    rc = proc.wait()
                    raise RuntimeError(f"a worker doing piece {busy.get(proc)} of {module} exited with status {rc}")
                word, index, *rest = line.rstrip("\n").split(" ", 2)
                if word == "error":
                    error = json.loads(rest[0])
                    raise PieceFailed(int(index), error["message"], error["user"], error.get("trace", ""))
                del busy[proc]
                on_done(int(index))
                _give(proc, queue, busy)
            on_tick()
    finally:
        for proc in procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
            if proc.poll() is None and proc in busy:
                proc.kill()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        sel.close()


def _give(proc: subprocess.Popen, queue: list[int], busy: dict) -> None:
    if queue:
        index = queue.pop(0)
        busy[proc] = index
        proc.stdin.write(f"{index}\n")
        proc.stdin.flush()


def serve(module: str, work: Path) -> int:
    """A worker's loop: piece numbers in on stdin, ``ok N`` / ``error N JSON`` out on stdout."""
    do_piece = importlib.import_module(module).do_piece
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the answer channel
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        index = int(line)
        try:
            do_piece(work, index)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            user = isinstance(e, UserError)
            message = str(e) if user else f"{type(e).__name__}: {e}"
            out.write(f"error {index} {json.dumps({'message': message, 'user': user, 'trace': traceback.format_exc()})}\n")
            out.flush()
            return 1
        out.write(f"ok {index}\n")
        out.flush()
    return 0
