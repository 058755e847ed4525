"""In-bounds settings that would exhaust memory (issue 22, point 4): the one size check counts the
activations of batch_size x seq_len (max_length) as well as the parameters, against what the
live worker on the run's queue advertises (a 400 at launch), and again in the worker before it
allocates (the run fails with the sentence)."""
from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_data
from tests.webapp.test_runs_finetune import FAST, ready_demo, tiny_checkpoint
from webapp.runs import capacity, services
from webapp.runs.models import Run, RunKind, RunStatus

pytestmark = pytest.mark.django_db

HUGE = {"batch_size": 8192, "max_length": 8192}


@pytest.fixture
def cpu_worker(monkeypatch):
    """advertise(): one live CPU worker in the suite's Redis that gives one run 8 GB, as a worker
    advertises itself (call it after slow setup: the key expires as a silent worker's does)."""
    monkeypatch.setattr(capacity, "CACHE_S", 0)
    client = capacity._redis()
    key = capacity.KEY_PREFIX + "cpu@box"
    for stale in client.scan_iter(match=capacity.KEY_PREFIX + "*"):  # a worker an earlier test killed
        client.delete(stale)  # still advertises until its key expires: the largest memory would be its

    def advertise() -> None:
        client.set(key, json.dumps({"name": "cpu@box", "queues": ["cpu"], "gpus": None, "cpu_processes": 1,
                                    "memory": 8 * 2**30, "at": time.time()}), ex=capacity.TTL_S)

    yield advertise
    client.delete(key)
    capacity._cache = (0.0, None)  # no later test reads this one's workers


def test_a_finetune_launch_whose_activations_do_not_fit_the_worker_is_a_400(
        alice, alice_api, cpu_worker, eager, enqueued, django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    url = reverse("api-finetune")
    cpu_worker()
    refused = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **HUGE}, format="json")
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error.startswith("This fine-tuning run: batch_size = 8,192 sequences of max_length = 8,192 tokens keep "
                            "about "), error
    assert "GB of activations for the backward pass" in error
    assert "more than the 8.0 GB of memory a worker on the cpu queue gives one run" in error
    assert "Use a smaller batch_size or max_length" in error and not enqueued
    # ordinary settings still pass the same check
    with django_capture_on_commit_callbacks(execute=True):
        created = alice_api.post(url, {"checkpoint": str(base.id), "dataset": str(dataset.id), **FAST}, format="json")
    assert created.status_code == 201, created.content
    assert len(enqueued) == 1


def test_a_pretraining_launch_names_seq_len(alice, cpu_worker, enqueued):
    from trainer.errors import ConfigError

    _, tokenizer = make_data(alice)
    cpu_worker()
    kwargs = dict(owner=alice, name="", corpus=None, tokenizer=tokenizer, family="bert", preset="bert-tiny",
                  objectives=["mlm", "nsp"])
    with pytest.raises(ConfigError, match=r"This run's model: batch_size = 8,192 sequences of seq_len = 512 tokens "
                                          r"keep about [\d,.]+ GB of activations .* or turn on "
                                          r"activation_checkpointing\."):
        services.run_create(**kwargs, training={"batch_size": 8192, "seq_len": 512, "device": "cpu"})
    services.run_create(**kwargs, training={"batch_size": 32, "seq_len": 128, "device": "cpu"})


@pytest.mark.django_db(transaction=True)
def test_without_a_live_worker_the_worker_refuses_before_allocating(alice, eager, monkeypatch,
                                                                      django_capture_on_commit_callbacks):
    monkeypatch.setattr(capacity, "live_workers", lambda: [])  # none advertises: the launch cannot tell
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    base = tiny_checkpoint(alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.finetune_create(owner=alice, checkpoint=base, dataset=dataset, training={**FAST, **HUGE})
    run = Run.objects.get(pk=run.pk)
    assert run.kind == RunKind.FINETUNE and run.status == RunStatus.FAILED
    assert "batch_size = 8,192 sequences of max_length = 8,192 tokens keep about" in run.error
    assert "of memory this machine has free" in run.error and not run.checkpoints.exists()
