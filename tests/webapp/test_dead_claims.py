"""A run whose pool child was killed is marked crashed at once (issue 11, point 1): its claim
names a process of this host that no longer exists."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.webapp.runs_helpers import make_run
from webapp.runs import execution, reaper
from webapp.runs.models import Run, RunStatus


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: its pid names no process now
    return child.pid


def test_a_run_of_a_dead_process_is_crashed_at_once_and_others_are_left(alice):
    host = socket.gethostname()
    dead = make_run(alice, status=RunStatus.RUNNING, claimed_by=f"{host}:{_dead_pid()}")
    alive = make_run(alice, status=RunStatus.RUNNING, claimed_by=f"{host}:{os.getpid()}")
    elsewhere = make_run(alice, status=RunStatus.RUNNING, claimed_by=f"another-host:{_dead_pid()}")
    assert reaper.mark_dead_claims() == 1
    dead.refresh_from_db()
    assert dead.status == RunStatus.CRASHED and "died. Resume continues from its last checkpoint." in dead.error
    assert dead.log_lines.filter(text=dead.error).exists()
    assert {r.status for r in Run.objects.filter(pk__in=[alive.pk, elsewhere.pk])} == {RunStatus.RUNNING}


def test_the_redelivered_task_marks_it_instead_of_leaving_it_running(alice):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by=f"{socket.gethostname()}:{_dead_pid()}")
    execution.run_execute(run_id=run.pk)  # what Celery does with a dead child's task (reject_on_worker_lost)
    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED
