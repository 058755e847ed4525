"""A launch while the task queue (Redis) is down: the run fails with a sentence saying so, instead
of a 500 and a run queued forever with no task to train it."""
from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError

from tests.webapp.runs_helpers import make_data
from webapp.runs import queueing, tasks
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)  # the task is sent when the launch commits, as in production


def test_a_launch_while_the_broker_is_down_fails_the_run_with_a_sentence(alice, alice_api, monkeypatch):
    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.train_run, "apply_async", broker_down)
    _, tokenizer = make_data(alice)
    r = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "family": "bert", "max_steps": 5,
                                      "warmup_steps": 1, "device": "cpu"}, format="json")
    assert r.status_code == 201, r.content
    run = Run.objects.get(pk=r.json()["id"])
    assert (run.status, run.error) == (RunStatus.FAILED, queueing.QUEUE_DOWN)
    assert run.log_lines.filter(text=queueing.QUEUE_DOWN).exists()
    page = alice_api.get(f"/api/runs/{run.id}/").json()
    assert page["status"] == "failed" and "task queue (Redis) did not answer" in page["error"]
