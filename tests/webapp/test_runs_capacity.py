"""A run waits for a worker that can give it its devices (webapp.runs.capacity): its queue says
how many it needs ("gpu.x2"), a worker consumes the queues of the counts it can give, workers
advertise that in Redis, the page and the API say what a queued run waits for (and when no live
worker can take it), and the task checks again when it starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
from celery import Celery
from django.urls import reverse

from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from trainer.errors import ConfigError
from webapp.runs import execution
from webapp.runs import capacity, services
from webapp.runs.models import Run, RunStatus

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def create(owner, tokenizer, **training) -> Run:
    return services.run_create(owner=owner, name="", corpus=None, tokenizer=tokenizer, family="bert",
                               preset="bert-tiny", objectives=["mlm", "nsp"], training=training)


@pytest.fixture
def registry(settings, monkeypatch):
    """The workers' keys in the suite's Redis, empty at the start and the end; pages read them afresh."""
    monkeypatch.setattr(capacity, "CACHE_S", 0)
    client = capacity._redis()

    def clear() -> None:
        for key in client.scan_iter(match=capacity.KEY_PREFIX + "*"):
            client.delete(key)

    def advertise(name: str, queues: list[str], **capacities) -> None:
        client.set(capacity.KEY_PREFIX + name, json.dumps({"name": name, "queues": queues, **capacities,
                                                           "at": time.time()}), ex=30)

    clear()
    yield advertise
    clear()


def selected(**kinds) -> Celery:
    """A Celery app whose worker was started with -Q <kinds> (a fresh one: the suite's stays as it is)."""
    app = Celery("capacity-test", set_as_current=False)
    app.amqp.queues.select(list(kinds["queues"]))
    return app


# ---------------------------------------------------------------------------- routing
def test_a_run_goes_to_the_queue_of_its_device_count(alice, enqueued, settings, django_capture_on_commit_callbacks):
    _, tokenizer = make_data(alice)
    with django_capture_on_commit_callbacks(execute=True):
        two = create(alice, tokenizer, device="cuda", devices=2)
    assert two.queue == "gpu.x2"
    assert enqueued == [((), {"args": [str(two.id)], "queue": "gpu.x2"})]  # the message waits there
    assert create(alice, tokenizer, device="cuda", devices=1).queue == "gpu"
    assert create(alice, tokenizer, device="cuda", devices="all").queue == "gpu"  # resolved by its worker
    assert create(alice, tokenizer, device="cpu", devices=3).queue == "cpu.x3"
    settings.RUN_DEFAULT_QUEUE = "gpu"
    assert create(alice, tokenizer, device="auto", devices=4).queue == "gpu.x4"


def test_a_worker_consumes_the_queues_of_the_device_counts_it_can_give(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one_gpu = selected(queues=["gpu"])
    assert capacity.serve_queues(one_gpu.amqp.queues, gpus=1)["queues"] == ["gpu"]
    assert "gpu.x2" not in one_gpu.amqp.queues.consume_from  # a 2-device run never reaches it

    four = selected(queues=["gpu"])
    advertised = capacity.serve_queues(four.amqp.queues, gpus=4, memory=8 * 2**30)
    assert advertised == {"gpus": 4, "cpu_processes": None, "queues": ["gpu", "gpu.x2", "gpu.x3", "gpu.x4"],
                          "gpu_slices": ["0,1,2,3"], "memory": 8 * 2**30}

    shared = selected(queues=["gpu"])  # two pool processes: two runs at once, each on two GPUs of its own
    advertised = capacity.serve_queues(shared.amqp.queues, gpus=4, processes=2, memory=8 * 2**30)
    assert advertised["gpus"] == 2 and advertised["gpu_slices"] == ["0,1", "2,3"]
    assert advertised["memory"] == 4 * 2**30  # each pool process trains a run of its own
    assert advertised["queues"] == ["gpu", "gpu.x2"]

    both = selected(queues=["cpu", "gpu"])
    assert capacity.serve_queues(both.amqp.queues, gpus=2, cpu_processes=3)["queues"] == [
        "cpu", "cpu.x2", "cpu.x3", "gpu", "gpu.x2"]

    cpu_only = selected(queues=["cpu", "jobs"])  # a CPU worker takes no GPU run, whatever its processes
    assert capacity.serve_queues(cpu_only.amqp.queues, cpu_processes=2)["queues"] == ["cpu", "cpu.x2", "jobs"]


def test_a_gpu_worker_counts_its_gpus_or_takes_worker_gpus(monkeypatch, settings):
    import torch

    monkeypatch.delenv("WORKER_GPUS", raising=False)
    assert capacity.count_gpus() == torch.cuda.device_count()  # asked in a subprocess
    monkeypatch.setenv("WORKER_GPUS", "3")
    app = selected(queues=["gpu"])
    assert capacity.serve_queues(app.amqp.queues)["gpus"] == 3
    settings.RUN_MAX_DEVICES = 2
    app = selected(queues=["cpu"])
    assert capacity.serve_queues(app.amqp.queues)["queues"] == ["cpu", "cpu.x2"]


def test_each_pool_process_of_a_gpu_worker_gets_gpus_of_its_own(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert capacity.gpu_slices(4, 2) == ["0,1", "2,3"]
    assert capacity.gpu_slices(3, 2) == ["0", "1"]
    assert capacity.gpu_slices(8, 1) == ["0,1,2,3,4,5,6,7"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")  # the worker's own share of the machine
    assert capacity.gpu_slices(4, 2) == ["3,5", "6,7"]
    assert capacity.gpu_slices(2, 2) == ["3", "5"]  # WORKER_GPUS=2: the first two it sees
    with pytest.raises(ConfigError, match=r"has 3 pool processes \(--concurrency 3\) but gives 2 GPUs: each process "
                                          r"trains one run on GPUs of its own. Start it with --concurrency 2 or fewer."):
        capacity.gpu_slices(2, 3)

    import billiard.process

    class Child:
        index = 1

    monkeypatch.setattr(capacity, "ADVERTISED", {"name": "gpu@m", "gpu_slices": ["3,5", "6,7"], "gpus": 2})
    monkeypatch.setattr(billiard.process, "current_process", lambda: Child())
    capacity.on_child_start()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"

    from celery.signals import worker_process_init

    import webapp.celery  # noqa: F401 - connects the receivers

    connected = [ref() if isinstance(ref, weakref.ReferenceType) else ref for _, ref in worker_process_init.receivers]
    assert capacity.on_child_start in connected


def test_a_gpu_worker_with_more_processes_than_gpus_does_not_start():
    """A real worker: Celery swallows an exception from a signal handler, so the refusal must exit."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", WORKER_GPUS="1")
    out = subprocess.run([sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "gpu", "--concurrency", "2",
                          "--loglevel", "INFO", "-n", f"gpu-refused-{os.getpid()}@%h"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "(--concurrency 2) but gives 1 GPU: each process trains one run on GPUs of its own" in out.stdout + out.stderr


def test_the_queue_names_read_back():
    assert [capacity.parse_queue(q) for q in ("gpu", "gpu.x2", "cpu.x16", "jobs", "gpu.x1", "a.xb")] == [
        ("gpu", 1), ("gpu", 2), ("cpu", 16), ("jobs", 1), ("gpu.x1", 1), ("a.xb", 1)]


# ---------------------------------------------------------------------------- what a queued run waits for
NOBODY_CAN = ("Waiting for a worker with 2 GPUs. No worker running now can give it 2 GPUs (the most one gives is 1); "
              "it starts when one that can joins, or cancel it and launch it on fewer devices.")


def test_the_page_and_the_api_say_a_run_waits_for_a_worker_with_its_gpus(alice, alice_client, alice_api, registry):
    run = make_run(alice, queue="gpu.x2", config={**RunConfig(**TINY_TRAINING).to_dict(), "devices": 2})

    def said() -> tuple[str, str]:
        page = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
        body = alice_api.get(f"/api/runs/{run.id}/").json()
        return page, body["waiting"]

    registry("gpu@one", ["gpu"], gpus=1)  # a one-GPU machine's worker
    page, api = said()
    assert api == NOBODY_CAN and NOBODY_CAN in page

    registry("gpu@two", ["gpu", "gpu.x2"], gpus=2)  # a machine with two joins
    page, api = said()
    assert api == "Waiting for a worker with 2 GPUs." and "Waiting for a worker with 2 GPUs." in page
    assert "No worker" not in page

    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    assert alice_api.get(f"/api/runs/{run.id}/").json()["waiting"] == ""


def test_the_waiting_sentence_when_no_worker_serves_the_kind_or_redis_is_away(alice, alice_api, registry, settings):
    cpu = make_run(alice, queue="cpu.x2")
    one = make_run(alice, queue="gpu")
    registry("gpu@one", ["gpu"], gpus=1)
    assert capacity.waiting(cpu) == ("Waiting for a worker that can start 2 CPU processes. No worker is taking runs "
                                     "from the cpu queue now; it starts when one does.")
    assert capacity.waiting(one) == "Waiting for a worker on the gpu queue."
    registry("cpu@box", ["cpu", "cpu.x2"], cpu_processes=2)
    assert capacity.waiting(cpu) == "Waiting for a worker that can start 2 CPU processes."
    listed = {r["id"]: r["waiting"] for r in alice_api.get("/api/runs/").json()}
    assert listed == {str(cpu.id): "Waiting for a worker that can start 2 CPU processes.",
                      str(one.id): "Waiting for a worker on the gpu queue."}

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing answers: say only what it waits for
    assert capacity.waiting(cpu) == "Waiting for a worker that can start 2 CPU processes."


def test_a_worker_advertises_itself_while_it_lives(registry, monkeypatch):
    monkeypatch.setattr(capacity, "ADVERTISED", {"name": "gpu@machine", "queues": ["gpu", "gpu.x2"], "gpus": 2,
                                                 "cpu_processes": None})
    capacity.beat()
    [seen] = capacity.live_workers()
    assert seen["name"] == "gpu@machine" and seen["queues"] == ["gpu", "gpu.x2"] and seen["gpus"] == 2
    capacity.withdraw()
    assert capacity.live_workers() == []


# ---------------------------------------------------------------------------- the task checks again
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_cannot_give_the_run_its_devices_fails_it_with_a_sentence(alice, monkeypatch):
    _, tokenizer = make_data(alice, real=True)
    config = RunConfig(**{**TINY_TRAINING, "devices": 2, "num_threads": 1})
    run = make_run(alice, tokenizer=tokenizer, config=config.to_dict(), queue="cpu.x2")
    monkeypatch.setattr(capacity, "ADVERTISED", {"name": "cpu@small", "queues": ["cpu"], "gpus": None,
                                                 "cpu_processes": 1})
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == ("This run asks for 2 CPU processes, but the worker that took it (cpu@small) gives one run "
                         "at most 1. Clone it with devices set to 1 or fewer (raise grad_accum to keep the effective "
                         "batch), or start a worker that has 2.")


def test_devices_all_is_what_the_worker_gives(monkeypatch, settings):
    settings.RUN_MAX_DEVICES = 4
    assert capacity.devices_here(RunConfig(devices="all", device="cpu")) == 1  # the CPU: one process
    assert capacity.devices_here(RunConfig(devices=3, device="cpu")) == 3
    settings.RUN_MAX_DEVICES = 2
    with pytest.raises(ConfigError, match="asks for 3 CPU processes, but the worker that took it"):
        capacity.devices_here(RunConfig(devices=3, device="cpu"))
