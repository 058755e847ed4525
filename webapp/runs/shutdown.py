"""A worker's warm shutdown (SIGTERM) as training runs see it.

Celery's warm shutdown stops taking tasks and waits for the running ones to end: for a training
run that is the whole run. Instead, when a worker's main process starts shutting down (Celery's
worker_shutting_down signal), it sends NOTICE to its pool processes; in each one `requested()`
turns true, the run's StopCheck (webapp.runs.sink) stops the training loop at its next step, the
engine saves a checkpoint, and execution.requeue_on_shutdown puts the run back in the queue for
the next worker, which resumes it from that checkpoint. The task then returns and the worker
exits.

The receivers connect when webapp.celery imports this module, in every process of a worker; in
the web process they never fire.
"""
from __future__ import annotations

import os
import signal
import threading

from celery import signals


NOTICE = signal.SIGUSR2  # unused by Celery's pool processes (its remote debugger takes it only when asked to)

_requested = threading.Event()
_worker = None  # this main process's WorkController, once the worker is made


def requested() -> bool:
    """Whether this process's worker is shutting down."""
    return _requested.is_set()


@signals.worker_init.connect
def _remember_worker(sender=None, **kwargs) -> None:
    global _worker
    _worker = sender


@signals.worker_process_init.connect
def _listen(**kwargs) -> None:
    """In each pool process (and in a solo pool's only process): NOTICE sets the flag."""
    _requested.clear()
    signal.signal(NOTICE, _on_notice)


def _on_notice(signum, frame) -> None:
    _requested.set()


@signals.worker_shutting_down.connect
def _tell_pool(**kwargs) -> None:
    """In the main process, from its SIGTERM/SIGINT/SIGQUIT handler: set the flag here (a solo or
    threads pool runs tasks in this process) and send NOTICE to every pool process."""
    _requested.set()
    pool = getattr(_worker, "pool", None)
    try:
        pids = pool.info.get("processes", []) if pool is not None else []
    except Exception:  # noqa: BLE001 - a pool that cannot say: its tasks run as Celery decides
        pids = []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, NOTICE)
        except ProcessLookupError:
            pass
