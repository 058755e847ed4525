"""The product's spine, end to end, with real processes: a corpus uploaded over HTTP is
ingested by a real Celery worker, a tokenizer is trained, a bert-tiny run launched through
the API trains while a websocket client receives its metric events, and fill-mask answers
from its checkpoint."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
import requests
import websockets

from tests.livestack import demo_corpus_text, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


async def _collect_events(ws_url: str, token: str, stop_when: callable, timeout: float) -> list[dict]:
    events: list[dict] = []
    async with websockets.connect(
        ws_url, additional_headers={"Authorization": f"Token {token}"}, origin="http://127.0.0.1"
    ) as ws:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=2))
            except asyncio.TimeoutError:
                continue
            events.append(msg)
            if stop_when(msg):
                break
    return events


def test_bert_tiny_run_trains_streams_and_answers_fill_mask(live_stack, django_user_model):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user(username="alice", password="alice-password-123")
    token = Token.objects.create(user=user).key
    s = requests.Session()
    s.headers["Authorization"] = f"Token {token}"
    api = live_stack.url + "/api"

    r = s.post(f"{api}/corpora/", data={"name": "docstrings"}, files={"file": ("docs.txt", demo_corpus_text(300_000).encode())})
    assert r.status_code == 201, r.text
    corpus = wait_for(s, f"{api}/corpora/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)
    assert corpus["status"] == "ready", corpus
    assert corpus["stats"]["documents"] > 20

    r = s.post(f"{api}/tokenizers/", json={"corpus": corpus["id"], "algorithm": "wordpiece", "vocab_size": 2000})
    assert r.status_code == 201, r.text
    tok = wait_for(s, f"{api}/tokenizers/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)
    assert tok["status"] == "ready", tok

    r = s.post(
        f"{api}/runs/",
        json={
            "name": "tiny", "corpus": corpus["id"], "tokenizer": tok["id"], "family": "bert",
            "preset": "bert-tiny", "objectives": ["mlm", "nsp"], "max_steps": 60, "batch_size": 8,
            "seq_len": 64, "lr": 5e-4, "warmup_steps": 5, "eval_every": 30, "checkpoint_every": 30, "log_every": 5,
        },
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]

    events = asyncio.run(
        _collect_events(
            f"{live_stack.ws_url}/ws/runs/{run_id}/", token,
            stop_when=lambda m: m.get("type") == "status" and m.get("status") in {"succeeded", "failed", "crashed"},
            timeout=300,
        )
    )
    run = wait_for(s, f"{api}/runs/{run_id}/", "status", {"succeeded", "failed", "crashed", "cancelled"}, 60, live_stack)
    assert run["status"] == "succeeded", (run, live_stack.logs())

    metric_steps = [e["step"] for e in events if e.get("type") == "metrics" and e.get("split") == "train"]
    assert len(metric_steps) >= 3, events[:5]
    assert metric_steps == sorted(metric_steps)

    history = s.get(f"{api}/runs/{run_id}/metrics/").json()
    points = history["points"] if isinstance(history, dict) else history
    train_steps = [p["step"] for p in points if p["split"] == "train"]
    assert len(train_steps) == len(set(train_steps))
    assert any(p["split"] == "valid" for p in points)

    ckpts = s.get(f"{api}/runs/{run_id}/checkpoints/").json()
    ckpts = ckpts["checkpoints"] if isinstance(ckpts, dict) else ckpts
    assert [c["step"] for c in ckpts][-1] == 60

    r = s.post(f"{api}/explore/fill-mask/", json={"checkpoint": ckpts[-1]["id"], "text": "return the [MASK] of the list.", "top_k": 5})
    assert r.status_code == 200, r.text
    masks = r.json()["masks"] if "masks" in r.json() else r.json()["results"]
    assert len(masks) == 1
    probs = [p["prob"] for p in masks[0]["predictions"]]
    assert len(probs) == 5 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
