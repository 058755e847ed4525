"""The masking inspector page and API: a run's real batches, each token with its role."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import TINY_TRAINING, make_data, make_run
from trainer.config import RunConfig
from webapp.jobs.models import JobStatus
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice):
    corpus, tokenizer = make_data(alice, real=True)
    return make_run(alice, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED, name="tiny")


def inspect(api, run, seed=0):
    return api.post("/api/explore/inspect/", {"run": str(run.id), "seed": seed}, format="json")


def test_the_api_shows_the_runs_batch_with_roles_segments_and_pair_labels(alice_api, run):
    response = inspect(alice_api, run)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["objectives"] == ["mlm", "nsp"] and body["masking"] == "dynamic" and len(body["examples"]) == 4
    for ex in body["examples"]:
        assert ex["pair"]["task"] == "nsp" and {t["segment"] for t in ex["tokens"]} == {0, 1}
        assert ex["tokens"][0]["role"] == "special" and ex["electra"] is None
    roles: set[str] = set()
    for seed in range(4):
        roles |= {t["role"] for ex in inspect(alice_api, run, seed).json()["examples"] for t in ex["tokens"]}
    assert {"masked", "random", "kept", "special", "none"} <= roles  # 80/10/10 over a few batches
    assert inspect(alice_api, run, 1).json()["examples"] != body["examples"]


def test_the_page_draws_chips_with_a_legend_and_a_reload_button(alice_client, run):
    page = alice_client.get(reverse("explorer:inspect") + f"?run={run.id}&seed=2")
    html = page.content.decode()
    assert page.status_code == 200 and page.context["sample"]["seed"] == 2
    assert "inspect-chip role-masked" in html and "inspect-boundary" in html and "NSP: " in html
    assert 'id="inspect-reload"' in html and 'value="3"' in html and "js/explorer_inspect.js" in html


def test_a_run_whose_data_is_not_ready_says_so(alice, alice_api, alice_client):
    corpus, tokenizer = make_data(alice, status=JobStatus.PROCESSING)
    pending = make_run(alice, corpus=corpus, tokenizer=tokenizer)
    response = inspect(alice_api, pending)
    assert response.status_code == 400 and "tokenizer is not ready" in response.json()["error"]
    page = alice_client.get(reverse("explorer:inspect") + f"?run={pending.id}")
    assert "tokenizer is not ready" in page.content.decode()


def test_other_users_runs_are_not_found(bob_api, bob_client, anon_api, run):
    assert inspect(bob_api, run).status_code == 404
    assert bob_client.get(reverse("explorer:inspect") + f"?run={run.id}").status_code == 404
    assert inspect(anon_api, run).status_code in (401, 403)


def test_for_an_electra_run_the_page_shows_generator_samples_and_discriminator_verdicts(alice, alice_api, alice_client):
    from models_lib.checkpoint import save_model
    from trainer.config import RunConfig
    from trainer.training.steps import build
    from trainer.prep.tokenization import load_tokenizer
    from webapp.runs.models import Checkpoint

    corpus, tokenizer = make_data(alice, real=True)
    config = RunConfig(family="electra", preset="electra-tiny", objectives=["mlm", "rtd"], seq_len=64,
                       batch_size=4, max_steps=10, warmup_steps=1, model_overrides={"hidden_size": 64, "num_heads": 2})
    run = make_run(alice, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED, name="electra",
                   family="electra", preset="electra-tiny", objectives=["mlm", "rtd"], config=config.to_dict())
    bundle = load_tokenizer(tokenizer.folder)
    model, _ = build(config, vocab_size=bundle.vocab_size, pad_id=bundle.pad_id, device="cpu")
    ckpt = Checkpoint.objects.create(run=run, step=10, path=f"runs/{run.id}/checkpoints/step-00000010")
    save_model(model, ckpt.folder)

    body = inspect(alice_api, run).json()
    view = body["examples"][0]["electra"]
    assert view["generator"] and view["discriminator"] and "generator replaced" in view["message"]
    page = alice_client.get(reverse("explorer:inspect") + f"?run={run.id}&seed=0").content.decode()
    assert "electra-verdict" in page and "P(replaced)" in page


def test_a_t5_run_shows_its_inputs_beside_the_decoder_targets(alice, alice_api, alice_client):
    corpus, tokenizer = make_data(alice, real=True, algorithm="unigram", extra_ids=100)
    config = RunConfig(**{**TINY_TRAINING, "family": "t5", "preset": "t5-tiny", "objectives": ["span_corruption"],
                          "masking_unit": "", "optimizer": "", "model_overrides": {}})
    t5 = make_run(alice, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED, name="t5",
                  family="t5", preset="t5-tiny", objectives=["span_corruption"], config=config.to_dict())
    body = inspect(alice_api, t5).json()
    ex = body["examples"][0]
    sentinels = [t["token"] for t in ex["tokens"] if t["role"] == "sentinel"]
    assert sentinels and [t["token"] for t in ex["target"]["tokens"] if t["role"] == "sentinel"][:-1] == sentinels
    html = alice_client.get(reverse("explorer:inspect") + f"?run={t5.id}").content.decode()
    assert "inspect-chip role-sentinel" in html and "Decoder target" in html and "role-target" in html
