"""A run with devices: 2, for real: run_execute starts torchrun (two processes over gloo) and relays
rank 0's events to the database; cancel stops every process; killing one process crashes the run,
which then resumes from its last checkpoint (webapp.runs.multiproc)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from trainer.training.checkpoints import list_checkpoints
from webapp.runs import execution
from webapp.runs import multiproc, services
from webapp.runs.models import LogLine, MetricPoint, Run, RunStatus

HANG_GUARD_S = 240  # only against a hang; nothing here measures time


@pytest.fixture
def no_broker(monkeypatch):
    from webapp.runs import tasks

    monkeypatch.setattr(tasks.train_run, "apply_async", lambda *a, **kw: None)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(multiproc, "POLL_S", 0.2)


def two_device_run(owner, **changes) -> Run:
    _, tokenizer = make_data(owner, real=True)
    config = RunConfig(**{**TINY_TRAINING, "devices": 2, "num_threads": 1, **changes})
    return make_run(owner, tokenizer=tokenizer, config=config.to_dict(), max_steps=config.max_steps)


def train_steps(run: Run) -> list[int]:
    return list(MetricPoint.objects.filter(run=run, split="train").order_by("step").values_list("step", flat=True))


def ranks(run: Run) -> dict[int, int]:
    """{rank: pid} of the run's training processes still alive (read from /proc)."""
    config = str(run.folder / multiproc.CONFIG_NAME)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = dict(item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if config.encode() in cmdline and b"train" in cmdline and b"RANK" in environ:
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
            if state != "Z":
                found[int(environ[b"RANK"])] = int(entry.name)
    return found


def in_background(run: Run) -> threading.Thread:
    from django.db import connection

    def execute():
        try:
            execution.run_execute(run_id=run.id)
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=execute, daemon=True)
    thread.start()
    return thread


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_two_device_run_reports_each_step_once_through_the_task(alice, fast):
    run = two_device_run(alice)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.current_step == 20 and run.tokens_seen > 0
    assert train_steps(run) == [1, 5, 10, 15, 20]  # rank 0 alone reports
    assert list(run.checkpoints.order_by("step").values_list("step", flat=True)) == [10, 20]
    assert LogLine.objects.filter(run=run, text__contains="on 2 cpu processes").exists()
    assert LogLine.objects.filter(run=run, text__contains="4 x 1 x 2 processes = 8 sequences").exists()
    assert not ranks(run)


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_every_process_after_a_checkpoint(alice, fast):
    run = two_device_run(alice, max_steps=100_000, warmup_steps=1, checkpoint_every=100_000)
    thread = in_background(run)
    wait_for(lambda: len(ranks(run)) == 2 and train_steps(run), "both processes to train")
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED, run.error
    assert not ranks(run)  # every process is gone
    assert run.checkpoints.filter(step=run.current_step).exists()  # saved on the way out


@pytest.mark.django_db(transaction=True)
def test_killing_one_process_crashes_the_run_and_it_resumes_from_its_checkpoint(alice, fast, no_broker):
    run = two_device_run(alice, max_steps=100_000, warmup_steps=1, checkpoint_every=10)
    thread = in_background(run)
    wait_for(lambda: run.checkpoints.exists() and len(ranks(run)) == 2, "the first checkpoint")
    os.kill(ranks(run)[1], signal.SIGKILL)
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED
    assert "A training process stopped unexpectedly" in run.error and "Resume continues" in run.error
    assert not ranks(run)

    # the newest complete checkpoint on disk, which resume reads: rank 0 may have finished writing
    # one whose event the killed run never relayed
    last = list_checkpoints(run.folder)[-1][0]
    assert last >= run.checkpoints.order_by("-step").first().step
    Run.objects.filter(pk=run.pk).update(config={**run.config, "max_steps": last + 5}, max_steps=last + 5)
    services.run_resume(run=Run.objects.get(pk=run.pk))
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.current_step == last + 5
    steps = train_steps(run)
    assert steps == sorted(set(steps)) and steps[-1] == last + 5
    assert LogLine.objects.filter(run=run, text__contains=f"Resuming from step-{last:08d}").exists()


def test_the_form_launches_on_two_devices_and_the_run_page_shows_the_effective_batch(alice, alice_client, enqueued):
    from django.urls import reverse

    from tests.webapp.test_runs import post_form

    _, tokenizer = make_data(alice)
    assert 'name="devices"' in alice_client.get(reverse("runs:new")).content.decode()
    response = post_form(alice_client, tokenizer, devices=2, strategy="ddp", grad_accum=2)
    run = Run.objects.get()
    assert response.status_code == 302 and run.config["devices"] == 2 and run.config["strategy"] == "ddp"
    page = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert "effective batch 64 (16 x 2 x 2 devices)" in page

    post_form(alice_client, tokenizer)  # left out: one device, strategy auto
    assert Run.objects.order_by("-created_at").first().config["devices"] == 1


def test_a_run_asking_for_more_devices_than_any_worker_gives_waits_and_says_so(alice, alice_api, enqueued,
                                                                               monkeypatch):
    from webapp.runs import capacity

    monkeypatch.setattr(capacity, "live_workers", lambda: [{"name": "cpu@box", "queues": ["cpu", "cpu.x2", "cpu.x4"]}])
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "devices": 5, "device": "cpu"},
                              format="json")
    assert response.status_code == 201 and response.json()["queue"] == "cpu.x5"  # queued: a worker may join
    assert ("No worker running now can give it 5 CPU processes (the most one gives is 4)"
            in response.json()["waiting"])
