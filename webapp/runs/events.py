"""The one way a run's news reaches its websocket group ("run-<id>").

Every sender (the metrics sink in a worker, the cancel/reaper services in the web process)
calls `send_run_event`; the consumer in consumers.py forwards each message by its type:
run.metrics, run.log, run.status, run.checkpoint, run.heartbeat, run.samples.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def run_group(run_id) -> str:
    return f"run-{run_id}"


def send_run_event(run_id, payload: dict[str, Any]) -> None:
    """Publish `payload` (its "type" names the consumer handler, e.g. "run.metrics").

    Publishing is best effort: a Redis hiccup must never stop a training run, and the
    database stays the source of truth (a page that reconnects fetches what it missed).
    """
    layer = get_channel_layer()
    if layer is None:
        return
    payload = {**payload, "sent_at": time.time()}  # every event says when the server emitted it
    future = asyncio.run_coroutine_threadsafe(layer.group_send(run_group(run_id), payload), _publisher_loop())
    try:
        future.result(timeout=PUBLISH_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - see docstring
        future.cancel()
        log.warning("Could not publish %s for run %s", payload.get("type"), run_id, exc_info=True)


# How long a sender waits for Redis to take one event before it gives up on it.
PUBLISH_TIMEOUT_S = 5.0

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _publisher_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for publishing, running in a daemon thread of its own.

    One loop for the life of the process keeps one Redis connection open. `async_to_sync` in a
    thread without an event loop (a Celery worker's) would make a new loop, thread and Redis
    connection for every event, and each event's delay would include connecting."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="run-events-publisher", daemon=True).start()
        return _loop


def _forget_loop_after_fork() -> None:
    """A forked child (Celery's pool) has no copy of the parent's thread: it starts its own loop."""
    global _loop, _loop_lock
    _loop, _loop_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_after_fork)


def status_event(run) -> dict[str, Any]:
    """The run.status message for a Run row (also what the dashboard's status badge shows).
    `waiting`: what a queued run waits for (webapp.runs.capacity), shown in the page's note."""
    from webapp.runs.capacity import waiting

    return {
        "type": "run.status",
        "status": run.status,
        "status_label": run.get_status_display(),
        "error": run.error,
        "step": run.current_step,
        "max_steps": run.max_steps,
        "cancel_requested": run.cancel_requested,
        "finished": run.is_finished,
        "waiting": waiting(run),
    }
