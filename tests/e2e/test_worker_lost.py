"""Real processes: killing the pool child that trains a run marks the run crashed within seconds
(not after the heartbeat timeout), and the run can be resumed."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tests.livestack import demo_corpus_text, token_session, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_killed_pool_child_leaves_a_crashed_run_at_once(live_stack, django_user_model, settings):
    assert settings.RUN_HEARTBEAT_TIMEOUT_S >= 60  # so only the new path can be quick enough
    s = token_session(django_user_model, "killed")
    api = live_stack.url + "/api"
    r = s.post(f"{api}/corpora/", data={"name": "c"}, files={"file": ("c.txt", demo_corpus_text(200_000).encode())})
    corpus = wait_for(s, f"{api}/corpora/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)
    r = s.post(f"{api}/tokenizers/", json={"corpus": corpus["id"], "algorithm": "wordpiece", "vocab_size": 1500})
    tok = wait_for(s, f"{api}/tokenizers/{r.json()['id']}/", "status", {"ready", "failed"}, 180, live_stack)
    r = s.post(f"{api}/runs/", json={"corpus": corpus["id"], "tokenizer": tok["id"], "family": "bert",
                                     "preset": "bert-tiny", "objectives": ["mlm"], "max_steps": 1_000_000,
                                     "batch_size": 4, "seq_len": 32, "warmup_steps": 1, "eval_every": 1_000_000,
                                     "checkpoint_every": 20, "device": "cpu"})
    run_id = r.json()["id"]
    wait_for(s, f"{api}/runs/{run_id}/", "status", {"running"}, 120, live_stack)
    deadline = time.time() + 120
    while not s.get(f"{api}/runs/{run_id}/checkpoints/").json() and time.time() < deadline:
        time.sleep(0.5)  # a checkpoint to resume from
    from webapp.runs.models import Run

    pid = int(Run.objects.get(pk=run_id).claimed_by.rpartition(":")[2])
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    run = wait_for(s, f"{api}/runs/{run_id}/", "status", {"crashed", "failed", "succeeded", "cancelled"}, 45,
                   live_stack)
    assert run["status"] == "crashed" and f"pid {pid}" in run["error"], run
    assert time.time() - killed < 45
    assert s.post(f"{api}/runs/{run_id}/resume/").status_code == 200
    wait_for(s, f"{api}/runs/{run_id}/", "status", {"running"}, 120, live_stack)
    assert s.post(f"{api}/runs/{run_id}/cancel/").status_code == 200
    wait_for(s, f"{api}/runs/{run_id}/", "status", {"cancelled", "failed", "crashed"}, 120, live_stack)
