"""Real processes: a worker told to stop (SIGTERM, Celery's warm shutdown) stops its training run
at the next step with a checkpoint, puts it back in the queue and exits; a second worker resumes
the run from that checkpoint and finishes it, with every metric step once.

The workers use a Redis of their own, so the session's live stack never takes the run."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.livestack import RedisServer, send_train_task, start_worker, stop_process, wait_until
from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run, RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STEPS = 150



def test_sigterm_requeues_the_run_from_a_checkpoint_and_the_next_worker_finishes_it(alice, tmp_path):
    broker = RedisServer(tmp_path / "redis").start()
    _, tokenizer = make_data(alice, real=True)
    config = RunConfig(**{**TINY_TRAINING, "max_steps": STEPS, "checkpoint_every": 10_000, "eval_every": 10_000,
                          "log_every": 1, "num_threads": 1})
    run = make_run(alice, tokenizer=tokenizer, config=config.to_dict(), max_steps=STEPS)
    logs = {"a": tmp_path / "worker-a.log", "b": tmp_path / "worker-b.log"}

    def read_logs() -> str:
        return "\n".join(f"----- {p.name}\n{p.read_text(errors='replace')[-5000:]}" for p in logs.values() if p.exists())

    def row() -> Run:
        return Run.objects.get(pk=run.pk)

    first = start_worker("shutdown-a", logs["a"], redis_url=broker.url, queues="cpu")
    second = None
    try:
        send_train_task(run.id, "cpu", broker.url)
        wait_until("the first worker training the run", lambda: row().current_step >= 1, 180, read_logs, poll=0.1)
        first.send_signal(signal.SIGTERM)
        told = time.monotonic()
        try:
            first.wait(timeout=120)  # without a graceful stop it trains all STEPS first, then exits
        except subprocess.TimeoutExpired:
            pytest.fail("The worker did not exit after SIGTERM\n" + read_logs())
        print(f"the worker exited {time.monotonic() - told:.1f} s after SIGTERM")  # a figure, not a test

        stopped = row()
        assert stopped.status == RunStatus.QUEUED, (stopped.status, stopped.error, read_logs())
        assert stopped.claimed_by == "" and 0 < stopped.current_step < STEPS
        step = stopped.current_step
        assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [step]
        texts = list(LogLine.objects.filter(run=run).values_list("text", flat=True))
        assert any("shutting down" in t and f"step {step}" in t for t in texts), texts

        second = start_worker("shutdown-b", logs["b"], redis_url=broker.url, queues="cpu")
        wait_until("the second worker finishing the run", lambda: row().is_finished, 300, read_logs, poll=0.1)
        done = row()
        assert done.status == RunStatus.SUCCEEDED and done.current_step == STEPS, (done.status, done.error)
        texts = list(LogLine.objects.filter(run=run).values_list("text", flat=True))
        assert any(t.startswith("Resuming on ") and f"checkpoint at step {step}" in t for t in texts), texts
        assert sorted(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [step, STEPS]
        train_steps = list(MetricPoint.objects.filter(run=run, split="train").order_by("step")
                           .values_list("step", flat=True))
        assert train_steps == list(range(1, STEPS + 1))  # every step once: none lost, none twice
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)
        broker.stop()
