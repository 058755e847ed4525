"""A worker's warm shutdown as a run sees it (issue 11, point 1): the stop check turns true at once,
and the stopped run is queued again with its task sent again, unless a cancel was asked for
meanwhile. (tests/e2e/own_broker/test_worker_shutdown.py does it with real workers and SIGTERM.)"""
from __future__ import annotations

import os
import signal

import pytest

from tests.webapp.runs_helpers import make_run
from webapp.runs import execution
from webapp.runs import shutdown
from webapp.runs.models import Run, RunStatus
from webapp.runs.sink import DatabaseChannelsSink, StopCheck

ME = "host:123"

pytestmark = pytest.mark.django_db


@pytest.fixture
def shutting_down():
    shutdown._requested.set()
    yield
    shutdown._requested.clear()


def test_the_notice_signal_makes_the_stop_check_true_without_asking_the_database(alice, django_assert_num_queries):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by=ME)
    check = StopCheck(run.id, claimed_by=ME, every_s=3600)
    assert check() is False
    previous = signal.getsignal(shutdown.NOTICE)
    try:
        shutdown._listen()  # what a pool process does when it starts
        os.kill(os.getpid(), shutdown.NOTICE)  # what the main process sends it on SIGTERM
        with django_assert_num_queries(0):
            assert check() is True
    finally:
        signal.signal(shutdown.NOTICE, previous)
        shutdown._requested.clear()


def test_a_stopped_run_is_queued_again_with_its_task(alice, shutting_down, enqueued,
                                                      django_capture_on_commit_callbacks):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by=ME, current_step=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert execution.requeue_on_shutdown(run, DatabaseChannelsSink(run.id, claimed_by=ME), me=ME, step=7)
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.current_step, run.heartbeat_at) == (RunStatus.QUEUED, "", 7, None)
    assert [call[1]["args"] for call in enqueued] == [[str(run.id)]]
    assert run.log_lines.filter(text__contains="shutting down: the run stopped at step 7 and is queued again").exists()


def test_a_cancel_asked_for_meanwhile_wins(alice, shutting_down, enqueued):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by=ME, cancel_requested=True)
    assert not execution.requeue_on_shutdown(run, DatabaseChannelsSink(run.id, claimed_by=ME), me=ME, step=7)
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING and not enqueued  # _finish records the cancel


def test_nothing_is_requeued_when_the_worker_is_not_shutting_down(alice, enqueued):
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by=ME)
    assert not execution.requeue_on_shutdown(run, DatabaseChannelsSink(run.id, claimed_by=ME), me=ME, step=7)
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING and not enqueued
