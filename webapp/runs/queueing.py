"""A run's way into the queue and its announcements, shared by the launch commands
(webapp.runs.services), the worker's execution (webapp.runs.execution) and the reaper
(webapp.runs.reaper): its task sent once the transaction commits, its status event published, and
run_ended's listeners told how it ended."""
from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from webapp.runs.events import send_run_event, status_event
from webapp.runs.models import LogLine, Run, RunStatus
from webapp.runs.signals import run_ended

log = logging.getLogger(__name__)

QUEUE_DOWN = ("The run could not be queued because the task queue (Redis) did not answer. Once Redis and a "
              "worker are running, resume it (or clone it, if it has no checkpoint yet).")


def enqueue(run: Run) -> None:
    """Send the run's task once the transaction commits; when the broker does not answer, the run
    fails with QUEUE_DOWN instead of staying queued with no task (and the request gets no 500)."""
    from webapp.runs.tasks import train_run

    run_id, queue = str(run.id), run.queue

    def send() -> None:
        try:
            train_run.apply_async(args=[run_id], queue=queue)
        except Exception:  # noqa: BLE001 - the broker is down: say so on the run's page
            log.exception("Could not enqueue run %s", run_id)
            if Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
                    status=RunStatus.FAILED, error=QUEUE_DOWN, finished_at=timezone.now()):
                LogLine.objects.create(run_id=run_id, text=QUEUE_DOWN)

    transaction.on_commit(send)


def announce_end(run_id, status: str) -> None:
    """Tell run_ended's listeners (webapp.sweeps); their failure is logged, never the run's."""
    try:
        run_ended.send(sender=Run, run_id=run_id, status=status)
    except Exception:  # noqa: BLE001
        log.exception("A listener of run %s's end failed", run_id)


def ended_on_commit(run: Run) -> None:
    run_id, status = run.id, run.status
    transaction.on_commit(lambda: announce_end(run_id, status))


def publish_on_commit(run: Run) -> None:
    payload, run_id = status_event(run), run.id
    transaction.on_commit(lambda: send_run_event(run_id, payload))
