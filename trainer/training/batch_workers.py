"""Training batches built by worker processes (the run setting data_workers), handed to the
training loop in exactly the order, and with the positions, of the stream built on one thread.

Collating a batch (pairing, masking, padding: Python and numpy) takes tens of milliseconds. On the
training thread it adds to every CPU step; on a background thread (data.Prefetcher) it holds the
GIL that the training thread needs to launch the GPU's kernels. Here W processes build them.

How the work is shared: batch n of the stream is built by worker n % W, from a copy of the stream
that it was sent when it started. A stream's batches depend only on its seed and position
(TrainStream: examples, pairs and masks come from generators keyed by the example's uid and
variant; fine-tuning's ExampleStream and MixedStream: seeded orders), and a stream can move past
a batch without building it (`skip_batch`), so a worker skips the others' batches and builds its
own. The training process asks each worker for its batch numbers ahead of need (`depth` at a
time), takes each batch with the stream's position after it (what a checkpoint records) and
hands them out by batch number: the run trains on what the one-thread stream gives, batch for
batch, resumes exactly, and each rank of a multi-process run (TrainStream's shard) reads its own
share as before. Until a worker has started (a fresh interpreter importing torch, about two
seconds), the training process builds that worker's batches itself from its own copy of the
stream, so a run never waits for its workers to start; from then on it asks the worker.

Why our own processes rather than torch's DataLoader:
- A single-device run in the web app trains inside a Celery prefork pool process, which is
  daemonic; multiprocessing (and so DataLoader's workers) refuses to start children there
  ("daemonic processes are not allowed to have children", celery#1709). These workers are plain
  subprocesses (subprocess.Popen over a socket pair, as webapp/runs/multiproc.py starts
  torchrun), which any process may start.
- DataLoader re-raises a worker's exception with a message of its own ("Caught ConfigError in
  DataLoader worker process 0. Original Traceback ..."); here the training process raises the
  worker's exception itself, so a ConfigError's sentence reaches the user as it was written
  (the worker's traceback is attached as a note).
- Fresh interpreters, not fork(): the training process runs torch's thread pools and, on a GPU,
  a CUDA context, and forking a process with threads is unsafe. Each worker is started with one
  thread (OMP_NUM_THREADS=1) and no visible GPU, and in a session of its own (a Ctrl-C reaches
  only the training process, which then ends its workers).
- The stream is sent pickled, with memory-mapped shards sent as their file names (every worker
  maps the same files rather than receiving a copy of the corpus), and batches come back with
  their tensors pickled as numpy arrays (one copy each way, no per-tensor torch.save).

Workers end when the training process closes them (the end of a run, a cancel, an error), and by
themselves when it is gone: a worker reads EOF or a broken pipe on its socket and exits.

Batches stay on the training process's thread when workers cannot build them: a stream without
`skip_batch`, a collator that draws from a random generator of its own batch after batch (its
batches depend on every batch before them), or a stream that cannot be pickled; the run logs why.
"""
from __future__ import annotations

import io
import mmap
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.config import AUTO_WORKERS as AUTO  # data_workers: choose from the machine's cores
from trainer.errors import ConfigError

MAX_AUTO = 4       # the most workers "auto" starts (collating keeps up with a GPU long before that)
DEPTH = 2          # batches asked of each worker ahead of need
POLL_S = 0.5       # how often a wait for a worker checks that it is still alive
EXIT_WAIT_S = 1.0   # how long close() lets a worker end by itself before SIGTERM
CLOSE_WAIT_S = 5.0  # and then before SIGKILL


class CannotShare(Exception):
    """The stream's batches cannot be built by worker processes; the message says why."""


# ---------------------------------------------------------------------------- how many
def available_cores() -> int:
    """CPU cores this process may run on (its affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_workers(setting: int, device: str, world_size: int = 1, *, cores: int | None = None,
                    threads: int | None = None) -> int:
    """The number of worker processes for a data_workers setting: itself, or for AUTO the cores
    left once the training processes have theirs (world_size processes of `threads` compute
    threads each on the CPU, one each on a GPU), shared among those processes, at most MAX_AUTO.
    A 1-core machine gets none."""
    if setting != AUTO:
        return int(setting)
    cores = available_cores() if cores is None else cores
    per_process = 1 if device == "cuda" else (threads if threads is not None else torch.get_num_threads())
    left = cores - world_size * max(1, per_process)
    return max(0, min(MAX_AUTO, left // max(1, world_size)))


def why_not_shared(stream: Any) -> str | None:
    """Why worker processes cannot build this stream's batches, or None when they can."""
    if not callable(getattr(stream, "skip_batch", None)):
        return f"its data stream ({type(stream).__name__}) cannot move past a batch without building it"
    collator = getattr(stream, "collator", None)
    drawn: list[str] = []
    layer = collator
    while layer is not None and hasattr(layer, "__dict__"):  # a wrapper's (PackingCollator's) inner collator too
        drawn += [name for name, value in vars(layer).items() if isinstance(value, _GENERATORS)]
        layer = vars(layer).get("inner")
    if drawn:
        return (f"its collator ({type(collator).__name__}) draws from a random generator of its own ({drawn[0]}), "
                f"batch after batch, so its batches must be built one after another in one place")
    return None


_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random, torch.Generator)


# ---------------------------------------------------------------------------- pickling
class _Pickler(pickle.Pickler):
    """Pickles whole-file read-only memmaps as their file (the receiver maps it again) and CPU
    tensors as numpy arrays (rebuilt without a copy by torch.from_numpy)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is np.memmap and isinstance(obj.base, mmap.mmap) and obj.mode in ("r", "c") and obj.filename:
            order = "F" if obj.flags.f_contiguous and not obj.flags.c_contiguous else "C"
            return np.memmap, (obj.filename, obj.dtype, obj.mode, obj.offset, obj.shape, order)
        if (type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.layout == torch.strided
                and not obj.requires_grad and obj.dtype in _NUMPY_DTYPES):
            return torch.from_numpy, (obj.resolve_conj().resolve_neg().numpy(),)
        return NotImplemented


_NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64}


def dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- the training process's side
class BatchWorkers:
    """`workers` processes building `stream`'s batches; next_batch() -> (batch, position after
    it) in the stream's order. close() ends them (also on error). pin: put each batch in pinned
    memory (for a non-blocking copy to the GPU)."""

    def __init__(self, stream: Any, workers: int, *, pin: bool = False, depth: int = DEPTH):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        why = why_not_shared(stream)
        if why is not None:
            raise CannotShare(why)
        try:
            payload = dumps(stream)  # before this process moves its own copy on
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise CannotShare(f"its data stream cannot be copied to another process ({e})") from None
        self.stream, self.count, self.pin, self.depth = stream, workers, pin, depth
        self.label = f"batches collated by {workers} worker process{'es' if workers != 1 else ''}"
        self.procs: list[subprocess.Popen] = []
        self.conns: list[Connection] = []
        self.senders: list[threading.Thread] = []  # each sends a worker its start message
        self.ready = [False] * workers
        self.asked = [0] * workers  # per worker: the next batch number to ask it for
        self.next = 0               # the batch next_batch() hands out next
        self.here = 0               # the batch this process's own copy of the stream is at
        self.built_here = 0         # batches this process built while their worker was starting
        self.closed = False
        start = [sys.path, payload]
        try:
            for k in range(workers):
                self._start(k, start)
        except OSError as e:
            self.close()
            raise CannotShare(f"worker processes cannot be started here ({e})") from None

    def _start(self, k: int, start: list) -> None:
        mine, theirs = Pipe(duplex=True)
        # This very trainer package first (not one that the working folder or PYTHONPATH would find);
        # the worker then takes this process's sys.path before it unpickles the stream.
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        code = (f"import sys; sys.path.insert(0, {package_root!r}); "
                f"from trainer.training.batch_workers import worker_main; worker_main({theirs.fileno()})")
        try:
            # stdout goes to stderr: a CLI run's stdout carries its metrics (JSON lines), read by the web app
            proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env,
                                    stdin=subprocess.DEVNULL, stdout=sys.__stderr__.fileno() if _has_stderr() else
                                    subprocess.DEVNULL, start_new_session=True)
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        self.procs.append(proc)
        self.conns.append(mine)
        # On a thread: a stream larger than the socket's buffer would block until the worker has
        # imported torch and reads it. Nothing else is written to the socket before the worker's
        # "ready", which it sends once it has read this.
        message = pickle.dumps([*start, k, self.count], protocol=pickle.HIGHEST_PROTOCOL)
        sender = threading.Thread(target=_send_quietly, args=(mine, message), name=f"data-worker-{k}-start",
                                  daemon=True)
        sender.start()
        self.senders.append(sender)

    # -- handing out
    def next_batch(self) -> tuple[Any, Any]:
        n = self.next
        w = n % self.count
        self._see_who_is_ready()
        batch, position = self._receive(w, n) if self.ready[w] else self._build_here(n)
        self.next = n + 1
        if self.pin and callable(getattr(batch, "pin_memory", None)):
            batch = batch.pin_memory()
        return batch, position

    def wait_until_ready(self) -> None:
        """Wait until every worker has started (from then on each builds all of its batches)."""
        for k in range(self.count):
            if not self.ready[k]:
                self._mark_ready(k)

    def _see_who_is_ready(self) -> None:
        """Workers that have started since the last batch take over their batches."""
        for k in range(self.count):
            if not self.ready[k] and self.conns[k].poll(0):
                self._mark_ready(k)

    def _mark_ready(self, k: int) -> None:
        """Read worker k's "ready" (or raise its error) and ask it for its first batches: those of
        its batch numbers from the next batch on (the ones before were built here)."""
        self._message(k, None)
        self.ready[k] = True
        self.asked[k] = self.next + (k - self.next) % self.count
        for _ in range(self.depth):
            self._ask(k)

    def _ask(self, k: int) -> None:
        self.conns[k].send_bytes(pickle.dumps(self.asked[k]))
        self.asked[k] += self.count

    def _receive(self, k: int, n: int) -> tuple[Any, Any]:
        kind, number, batch, position = self._message(k, n)
        if kind != "batch" or number != n:
            raise RuntimeError(f"Data worker {k} sent {kind} {number} where batch {n} was due.")
        self._ask(k)
        return batch, position

    def _build_here(self, n: int) -> tuple[Any, Any]:
        while self.here < n:
            self.stream.skip_batch()
            self.here += 1
        batch = self.stream.next_batch()
        self.here += 1
        self.built_here += 1
        return batch, self.stream.position

    def _message(self, k: int, n: int | None) -> tuple:
        """Worker k's next message (waiting for it); its error raised as its own exception."""
        conn, proc = self.conns[k], self.procs[k]
        while not conn.poll(POLL_S):
            if proc.poll() is not None and not conn.poll(0):
                raise self._died(k, n)
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            try:
                proc.wait(timeout=CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            raise self._died(k, n) from None
        if message[0] == "error":
            raise self._error(k, *message[1:])
        return message

    def _died(self, k: int, n: int | None) -> ConfigError:
        code = self.procs[k].poll()
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
            how += ", perhaps for lack of memory" if -code == signal.SIGKILL else ""
        else:
            how = f"exit code {code}; its error, if any, is on the run's standard error"
        what = f"building batch {n}" if n is not None else "starting"
        return ConfigError(f"Data worker process {k + 1} of {self.count} ended while {what} ({how}). Set "
                           f"data_workers to 0 to build the batches in the training process.")

    def _error(self, k: int, n: int | None, pickled: bytes | None, name: str, text: str, trace: str) -> BaseException:
        error: BaseException | None = None
        if pickled is not None:
            try:
                error = pickle.loads(pickled)
            except Exception:  # an exception class that does not unpickle: its name and text
                error = None
        if not isinstance(error, BaseException):
            error = RuntimeError(f"{name}: {text}")
        what = f"building batch {n}" if n is not None else "starting"
        error.add_note(f"(raised in data worker process {k + 1} of {self.count} while {what}:\n{trace.rstrip()})")
        return error

    # -- ending
    def close(self) -> None:
        """End the workers: their sockets closed (a worker exits at EOF, or at a broken pipe once
        the batch it builds is done), then SIGTERM for any still there after EXIT_WAIT_S, then
        SIGKILL after CLOSE_WAIT_S more."""
        if self.closed:
            return
        self.closed = True
        for proc, sender in zip(self.procs, self.senders):
            if sender.is_alive():  # still starting: its socket is not ours to close while the thread writes
                proc.kill()
                sender.join()
        for conn in self.conns:
            conn.close()
        for signal_them, wait_s in ((None, EXIT_WAIT_S), ("terminate", CLOSE_WAIT_S), ("kill", None)):
            left = [proc for proc in self.procs if proc.poll() is None]
            if not left:
                return
            for proc in left:
                if signal_them:
                    getattr(proc, signal_them)()
            deadline = time.monotonic() + (wait_s or CLOSE_WAIT_S)
            for proc in left:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass

    def __del__(self) -> None:
        try:
            if not getattr(self, "closed", True):
                self.close()
        except Exception:  # at interpreter exit: the workers end by themselves at EOF
            pass


def _send_quietly(conn: Connection, message: bytes) -> None:
    """Send a message to a worker; one that is gone (or closed) is reported by its socket later."""
    try:
        conn.send_bytes(message)
    except (OSError, ValueError, TypeError):
        pass


def _has_stderr() -> bool:
    try:
        return sys.__stderr__ is not None and sys.__stderr__.fileno() >= 0
    except (AttributeError, ValueError, OSError):
        return False


# ---------------------------------------------------------------------------- the worker's side
def worker_main(fd: int) -> None:
    """A worker process: read (sys.path, the pickled stream, its number k, the number of
    workers), say "ready", then build each batch number asked for (k, k + W, ...: skipping the
    others' batches) and send ("batch", n, batch, position after it). Ends at EOF (the training
    process closed it or is gone); an exception is sent as ("error", ...) and ends it. It exits
    without the interpreter's teardown (torch's takes a second or more on a busy machine)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the training process's to handle
    torch.set_num_threads(1)
    conn = Connection(fd)
    try:
        _serve(conn)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        os._exit(0)


def _serve(conn: Connection) -> None:
    n: int | None = None
    try:
        paths, payload, k, count = pickle.loads(conn.recv_bytes())
        sys.path[:] = paths
        stream = pickle.loads(payload)
        conn.send_bytes(dumps(("ready", None, None, None)))
        at = 0  # the batch the stream is at
        while True:
            try:
                n = pickle.loads(conn.recv_bytes())
            except EOFError:
                return
            if n < at:
                raise RuntimeError(f"batch {n} was asked for after batch {at - 1}")
            while at < n:
                stream.skip_batch()
                at += 1
            batch = stream.next_batch()
            at += 1
            conn.send_bytes(dumps(("batch", n, batch, stream.position)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the training process is gone
    except BaseException as e:
        _send_error(conn, n, e)


def _send_error(conn: Connection, n: int | None, error: BaseException) -> None:
    try:
        pickled: bytes | None = pickle.dumps(error)
    except Exception:
        pickled = None
    try:
        conn.send_bytes(pickle.dumps(("error", n, pickled, type(error).__name__, str(error),
                                      "".join(traceback.format_exception(error)))))
    except OSError:
        pass
