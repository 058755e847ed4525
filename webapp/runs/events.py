"""The one way a run's news reaches its websocket group ("run-<id>").

Every sender (the metrics sink in a worker, the cancel/reaper services in the web process)
calls `send_run_event`; the consumer in consumers.py forwards each message by its type:
run.metrics, run.log, run.status, run.checkpoint, run.heartbeat.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
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
    try:
        async_to_sync(layer.group_send)(run_group(run_id), payload)
    except Exception:  # noqa: BLE001 - see docstring
        log.warning("Could not publish %s for run %s", payload.get("type"), run_id, exc_info=True)


def status_event(run) -> dict[str, Any]:
    """The run.status message for a Run row (also what the dashboard's status badge shows)."""
    return {
        "type": "run.status",
        "status": run.status,
        "status_label": run.get_status_display(),
        "error": run.error,
        "step": run.current_step,
        "max_steps": run.max_steps,
        "cancel_requested": run.cancel_requested,
        "finished": run.is_finished,
    }
