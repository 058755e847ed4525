"""Real processes: a run on two devices waits in the broker while the only worker can give one
(its page says so), and the worker that can give two, once started, takes it and trains it;
each worker advertises what it gives while it lives and withdraws when it stops.

The workers use a Redis of their own, so the session's live stack never takes the run."""
from __future__ import annotations

import time

import pytest

from tests.livestack import RedisServer, send_train_task, start_worker, stop_process, wait_until
from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from webapp.runs import capacity
from webapp.runs.models import Run, RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]



def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def test_a_two_device_run_waits_for_the_worker_that_can_give_it_two(alice, tmp_path, settings, monkeypatch):
    broker = RedisServer(tmp_path / "redis").start()
    settings.REDIS_URL = broker.url  # the test reads the workers' keys where they write them
    monkeypatch.setattr(capacity, "CACHE_S", 0)
    _, tokenizer = make_data(alice, real=True)
    config = RunConfig(**{**TINY_TRAINING, "devices": 2, "max_steps": 4, "eval_every": 4, "checkpoint_every": 4,
                          "log_every": 1, "num_threads": 1})
    run = make_run(alice, tokenizer=tokenizer, config=config.to_dict(), max_steps=4, queue="cpu.x2")
    logs = {"one": tmp_path / "one.log", "two": tmp_path / "two.log"}

    def read_logs() -> str:
        return "\n".join(f"----- {p.name}\n{p.read_text(errors='replace')[-5000:]}"
                         for p in logs.values() if p.exists())

    def names() -> set[str]:
        return {w["name"].split("-")[0] for w in capacity.live_workers() or []}

    one = start_worker("one", logs["one"], redis_url=broker.url, queues="cpu", env={"RUN_MAX_DEVICES": "1"})
    two = None
    try:
        wait_until("the one-process worker advertising itself", lambda: names() == {"one"}, 60, read_logs)
        send_train_task(run.id, "cpu.x2", broker.url)
        waiting = capacity.waiting(Run.objects.get(pk=run.pk))
        assert "No worker running now can give it 2 CPU processes (the most one gives is 1)" in waiting, waiting
        time.sleep(2)
        assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED  # one never takes it
        assert capacity._redis().llen("cpu.x2") == 1  # it waits in the broker

        two = start_worker("two", logs["two"], redis_url=broker.url, queues="cpu", env={"RUN_MAX_DEVICES": "2"})
        wait_until("the two-process worker finishing the run", lambda: Run.objects.get(pk=run.pk).is_finished,
                   240, read_logs)
        done = Run.objects.get(pk=run.pk)
        assert done.status == RunStatus.SUCCEEDED and done.current_step == 4, (done.error, read_logs())
        assert parent_of(int(done.claimed_by.rpartition(":")[2])) == two.pid  # a pool process of worker two
        assert done.log_lines.filter(text__contains="on 2 cpu processes").exists()

        stop_process(two)  # a warm shutdown withdraws its key
        assert names() == {"one"}
    finally:
        stop_process(one)
        if two is not None:
            stop_process(two)
        broker.stop()
