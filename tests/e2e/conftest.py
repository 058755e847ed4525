"""End-to-end tests: tasks go to a real broker and real workers, never run in the test's process."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def tasks_go_to_the_broker():
    """Whatever an earlier test left in Celery's app (task_always_eager), a task sent here reaches
    the live stack's workers: run eagerly, a run would train in the test's own process instead."""
    from webapp.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = previous
