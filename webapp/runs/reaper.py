"""Crashed runs: a run whose worker process died on this host is marked crashed at once
(mark_dead_claims), one whose worker went silent after RUN_HEARTBEAT_TIMEOUT_S (mark_stale_runs).
Callers: the periodic task (webapp.runs.tasks.reap_stale_runs), `manage.py reap_runs`, a resume
(webapp.runs.services.run_resume) and a worker about to claim a run (webapp.runs.execution)."""
from __future__ import annotations

import logging
import os
import socket
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from webapp.server.storage import is_disk_full
from webapp.runs.events import send_run_event, status_event
from webapp.runs.models import LogLine, Run, RunStatus
from webapp.runs.queueing import announce_end

log = logging.getLogger(__name__)


def mark_dead_claims(*, run_id=None, now=None) -> int:
    """Mark running runs claimed by a process of this host that no longer exists (a killed pool
    child) as crashed at once, without waiting for the heartbeat timeout; only `run_id` when
    given. Callers: run_execute (Celery redelivers a dead child's task at once) and the reaper."""
    now = now or timezone.now()
    host = socket.gethostname()
    running = Run.objects.filter(status=RunStatus.RUNNING, claimed_by__startswith=f"{host}:")
    if run_id is not None:
        running = running.filter(pk=run_id)
    count = 0
    for run in running:
        pid = run.claimed_by.rpartition(":")[2]
        if not pid.isdigit() or _process_alive(int(pid)):
            continue
        message = (f"The worker process that was training it (pid {pid} on {host}) died. Resume continues from "
                   "its last checkpoint.")
        with _unless_disk_full(run):
            if Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, claimed_by=run.claimed_by).update(
                    status=RunStatus.CRASHED, error=message, finished_at=now):
                count += 1
                _announce_crash(run, message)
    return count


@contextmanager
def _unless_disk_full(run: Run):
    """The reaper's write for one run; a full disk skips it (logged) instead of stopping the pass:
    the next pass tries again, and a worker still waiting to record its run's end writes it first
    (_record_end) as soon as there is room."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        log.warning("The disk is full: run %s could not be marked crashed now; the next pass tries again", run.pk)


def _announce_crash(run: Run, message: str) -> None:
    """After a reaper marked `run` crashed: its log line, its status event and run_ended's listeners."""
    run.refresh_from_db()
    LogLine.objects.create(run=run, text=message)
    send_run_event(run.id, status_event(run))
    announce_end(run.id, run.status)


def _process_alive(pid: int) -> bool:
    """Whether a process of this host runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def mark_stale_runs(*, now=None, run_id=None) -> int:
    """Mark running runs whose worker went silent (no heartbeat for RUN_HEARTBEAT_TIMEOUT_S) as
    crashed, only the run `run_id` when given; returns how many. Callers: the periodic task
    (webapp.runs.tasks.reap_stale_runs), `manage.py reap_runs`, run_resume and run_execute."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=int(getattr(settings, "RUN_HEARTBEAT_TIMEOUT_S", 120)))
    stale = Run.objects.filter(status=RunStatus.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    if run_id is not None:
        stale = stale.filter(pk=run_id)
    count = 0
    for run in stale:
        seen = run.heartbeat_at or run.started_at
        message = (
            f"The worker stopped sending heartbeats (last seen {seen:%Y-%m-%d %H:%M:%S} UTC on "
            f"{run.claimed_by or 'an unknown worker'})."
        )
        with _unless_disk_full(run):
            changed = Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, heartbeat_at=run.heartbeat_at).update(
                status=RunStatus.CRASHED, error=message, finished_at=now
            )
            if changed:
                count += 1
                _announce_crash(run, message)
    return count
