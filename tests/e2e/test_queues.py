"""Short jobs never wait behind training (real processes): with both slots of the training
worker busy, a corpus uploaded next is ingested and a tokenizer trained by the jobs worker."""
from __future__ import annotations

import pytest

from tests.livestack import demo_corpus_text, token_session, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ingest_and_tokenizer_run_while_training_fills_every_slot(live_stack, django_user_model):
    s = token_session(django_user_model, "queues")
    api = live_stack.url + "/api"

    def ready_corpus(name: str) -> dict:
        r = s.post(f"{api}/corpora/", data={"name": name}, files={"file": (f"{name}.txt", demo_corpus_text(200_000).encode())})
        assert r.status_code == 201, r.text
        return wait_for(s, f"{api}/corpora/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)

    def ready_tokenizer(corpus: dict) -> dict:
        r = s.post(f"{api}/tokenizers/", json={"corpus": corpus["id"], "algorithm": "wordpiece", "vocab_size": 1500})
        assert r.status_code == 201, r.text
        return wait_for(s, f"{api}/tokenizers/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)

    corpus = ready_corpus("first")
    tok = ready_tokenizer(corpus)
    assert tok["status"] == "ready", tok
    long_run = {"corpus": corpus["id"], "tokenizer": tok["id"], "family": "bert", "preset": "bert-tiny",
                "objectives": ["mlm"], "max_steps": 1_000_000, "batch_size": 4, "seq_len": 32, "warmup_steps": 1,
                "eval_every": 1_000_000, "checkpoint_every": 1_000_000, "device": "cpu"}
    runs = [s.post(f"{api}/runs/", json={**long_run, "name": f"busy {i}"}).json()["id"] for i in range(2)]
    for run_id in runs:  # both slots of the training worker (concurrency 2) are taken
        wait_for(s, f"{api}/runs/{run_id}/", "status", {"running"}, 120, live_stack)

    second = ready_corpus("second")
    assert second["status"] == "ready", second
    assert ready_tokenizer(second)["status"] == "ready"
    assert all(s.get(f"{api}/runs/{run_id}/").json()["status"] == "running" for run_id in runs)
    for run_id in runs:
        assert s.post(f"{api}/runs/{run_id}/cancel/").status_code == 200
    for run_id in runs:
        wait_for(s, f"{api}/runs/{run_id}/", "status", {"cancelled", "failed", "crashed", "succeeded"}, 120, live_stack)
