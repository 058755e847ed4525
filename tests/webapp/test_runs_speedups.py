"""The run options compile and activation_checkpointing from the launch form and the API, the
way every runtime setting is taken (webapp/runs/launch.py ADVANCED_FIELDS); ELMo's refusal of
activation checkpointing is a sentence on the field. Training is not run here
(tests/trainer/test_speedups.py trains with them)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_data
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

FORM = {"name": "fast run", "family": "bert", "preset": "bert-tiny", "objectives": ["mlm", "nsp"], "max_steps": 120,
        "batch_size": 16, "seq_len": 64, "lr": 1e-4, "warmup_steps": 10, "grad_accum": 1, "eval_every": 50,
        "checkpoint_every": 60, "masking": "dynamic", "seed": 3, "device": "cpu", "mask_prob": 0.15,
        "schedule": "linear", "weight_decay": 0.01, "clip_grad": 1.0, "eval_batches": 5, "log_every": 10,
        "precision": "auto", "num_threads": 0}


def post_form(client, tokenizer, **changes):
    data = {**FORM, "corpus": tokenizer.corpus_id, "tokenizer": tokenizer.id, **changes}
    return client.post(reverse("runs:new"), data)


def test_the_form_shows_and_takes_the_options(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    page = alice_client.get(reverse("runs:new"))
    html = page.content.decode()
    assert 'name="compile"' in html and 'name="activation_checkpointing"' in html
    assert "torch.compile" in html and "recompute each transformer block" in html.lower()
    response = post_form(alice_client, tokenizer, compile="on", activation_checkpointing="on")
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get()
    assert run.config["compile"] == "on" and run.config["activation_checkpointing"] is True
    post_form(alice_client, tokenizer, name="plain")
    plain = Run.objects.get(name="plain")
    # compile "auto": on with a CUDA GPU, off on the CPU (trainer.training.speedups.compiles)
    assert plain.config["compile"] == "auto" and plain.config["activation_checkpointing"] is False


def test_the_form_refuses_activation_checkpointing_for_elmo_on_the_field(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer, family="elmo", preset="elmo-tiny", objectives=["bilm"],
                         activation_checkpointing="on")
    assert response.status_code == 200
    errors = " ".join(response.context["form"].errors.get("activation_checkpointing", []))
    assert "ELMo's model does not offer it; turn it off for ELMo." in errors
    assert not Run.objects.exists()


def test_the_api_takes_the_options_and_refuses_other_values(alice, alice_api, enqueued):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "compile": "on",
                                             "activation_checkpointing": True}, format="json")
    assert response.status_code == 201, response.json()
    config = response.json()["config"]
    assert config["compile"] == "on" and config["activation_checkpointing"] is True
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "compile": "sometimes"}, format="json")
    assert response.status_code == 400 and "compile" in response.json()["error"]
    assert Run.objects.count() == 1


def test_data_workers_is_taken_from_the_form_and_the_api_and_auto_when_left_out(alice, alice_client, alice_api,
                                                                                enqueued):
    _, tokenizer = make_data(alice)
    html = alice_client.get(reverse("runs:new")).content.decode()
    assert 'name="data_workers"' in html and "Data worker processes" in html
    assert post_form(alice_client, tokenizer, name="two", data_workers=2).status_code == 302
    assert post_form(alice_client, tokenizer, name="auto").status_code == 302  # an older form: the default
    assert Run.objects.get(name="two").config["data_workers"] == 2
    assert Run.objects.get(name="auto").config["data_workers"] == -1
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "data_workers": 0}, format="json")
    assert response.status_code == 201 and response.json()["config"]["data_workers"] == 0
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "data_workers": 65}, format="json")
    assert response.status_code == 400 and "data_workers" in response.json()["error"]
