"""Real processes: a worker rides out a Redis restart. Its broker (a redis-server of the test's
own) is stopped while the worker trains a run (its task unacknowledged, as every training task
is until it ends) and started again on the same port: the run trains on throughout, and the
worker takes the next queued run. (With kombu's Redis transport as it is, the worker's consumer
stopped there with "Unrecoverable error: AttributeError" and took no more tasks; webapp/broker.py.)"""
from __future__ import annotations

import pytest

from tests.livestack import RedisServer, send_train_task, start_worker, stop_process, wait_until
from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from webapp.runs import services
from webapp.runs.models import Run, RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]



def test_a_worker_training_a_run_rides_out_a_redis_restart_and_takes_the_next_run(alice, tmp_path):
    broker = RedisServer(tmp_path / "redis").start()
    _, tokenizer = make_data(alice, real=True)
    long = RunConfig(**{**TINY_TRAINING, "max_steps": 1_000_000, "checkpoint_every": 1_000_000,
                        "eval_every": 1_000_000, "num_threads": 1})
    training = make_run(alice, tokenizer=tokenizer, config=long.to_dict(), max_steps=long.max_steps)
    short = RunConfig(**{**TINY_TRAINING, "num_threads": 1})
    waiting = make_run(alice, tokenizer=tokenizer, config=short.to_dict())
    log = tmp_path / "worker.log"

    def logs() -> str:
        return log.read_text(errors="replace") if log.exists() else ""

    def step_of(run) -> int:
        return Run.objects.get(pk=run.pk).current_step

    worker = start_worker("outage", log, redis_url=broker.url, queues="cpu", concurrency=2)
    try:
        send_train_task(training.id, "cpu", broker.url)
        wait_until("training", lambda: step_of(training) >= 1, 180, logs)
        broker.stop()
        wait_until("the worker seeing the broker gone", lambda: "Connection to broker lost" in logs(), 60, logs)
        before = step_of(training)
        broker.start()  # same port, empty: the queues are gone, the worker must reconnect by itself
        wait_until("the worker reconnecting", lambda: logs().count("Connected to ") >= 2 or worker.poll() is not None,
                   120, logs)
        assert worker.poll() is None, "the worker died\n" + logs()[-8000:]

        send_train_task(waiting.id, "cpu", broker.url)
        wait_until("the next run", lambda: Run.objects.get(pk=waiting.pk).is_finished, 240, logs)
        assert Run.objects.get(pk=waiting.pk).status == RunStatus.SUCCEEDED
        assert worker.poll() is None, logs()[-8000:]
        now = Run.objects.get(pk=training.pk)
        assert now.status == RunStatus.RUNNING and now.current_step > before  # trained on through the outage

        services.run_cancel(run=now)
        wait_until("the cancel", lambda: Run.objects.get(pk=training.pk).is_finished, 120, logs)
        assert Run.objects.get(pk=training.pk).status == RunStatus.CANCELLED
    finally:
        stop_process(worker)
        broker.stop()
