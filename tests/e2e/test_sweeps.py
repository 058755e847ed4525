"""A sweep end to end with real processes: four tiny trials on the live stack's worker of
concurrency 2 (two at a time), each a run of its own that a worker claims; when the last ends,
the sweep has picked the trial with the best validation loss, and its checkpoint opens in the
explorer."""
from __future__ import annotations

import pytest

from tests.livestack import ready_corpus, ready_tokenizers, token_session, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BASE = {"family": "bert", "preset": "bert-tiny", "objectives": ["mlm"],
        "model_overrides": {"hidden_size": 64, "num_heads": 2, "num_layers": 1}, "max_steps": 10, "batch_size": 4,
        "seq_len": 32, "warmup_steps": 2, "eval_every": 5, "eval_batches": 2, "checkpoint_every": 10,
        "log_every": 5, "device": "cpu", "num_threads": 1}


def test_a_sweep_of_four_trials_runs_two_at_a_time_and_picks_the_best(live_stack, django_user_model):
    s = token_session(django_user_model, "sweeper")
    corpus = ready_corpus(s, live_stack, 150_000)
    tok = ready_tokenizers(s, live_stack, corpus, {"wp": {"algorithm": "wordpiece"}})["wp"]
    api = live_stack.url + "/api"
    r = s.post(f"{api}/sweeps/", json={
        "name": "lr x warmup", "base": {"tokenizer": tok, **BASE},
        "space": [{"name": "lr", "values": [1e-4, 3e-3]}, {"name": "warmup_steps", "values": [0, 2]}],
        "metric": "loss", "direction": "minimize", "sampler": "grid", "n_trials": 4, "parallelism": 2,
    })
    assert r.status_code == 201, r.text
    sweep = r.json()
    assert len(sweep["trials"]) == 2  # the parallelism: two queued at once
    sweep = wait_for(s, f"{api}/sweeps/{sweep['id']}/", "status", {"finished", "failed", "cancelled"}, 600,
                     live_stack)
    assert sweep["status"] == "finished", (sweep, live_stack.logs())
    trials = sweep["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 4, (trials, live_stack.logs())
    assert {(t["params"]["lr"], t["params"]["warmup_steps"]) for t in trials} == {
        (1e-4, 0), (1e-4, 2), (3e-3, 0), (3e-3, 2)}
    best = min(trials, key=lambda t: (t["value"], t["number"]))
    assert sweep["best_trial"] == best["number"] and sweep["best_value"] == best["value"]
    runs = [s.get(f"{api}/runs/{t['run']}/").json() for t in trials]
    assert all(run["status"] == "succeeded" and run["config"]["lr"] == t["params"]["lr"]
               for run, t in zip(runs, trials))
    # never more than two trials at once: each run started after all but one of the earlier ones ended
    spans = sorted((run["started_at"], run["finished_at"]) for run in runs)
    for i, (start, _) in enumerate(spans):
        assert sum(1 for other_start, other_end in spans[:i] if other_end > start) <= 1, spans
    ckpt = sweep["best_checkpoint"]
    assert ckpt and ckpt["step"] == 10
    listed = s.get(f"{api}/runs/{best['run']}/checkpoints/").json()
    assert ckpt["id"] in {c["id"] for c in listed} and ckpt["explore_url"].endswith(f"?checkpoint={ckpt['id']}")
