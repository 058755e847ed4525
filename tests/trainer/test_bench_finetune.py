"""bench/finetune.py at a tiny size: for every task it compares, a couple of parity steps (both
trainers on the same batches, dropout off: the per-step losses equal, then the same test scores
for both) and a couple of timed steps per side, so that the benchmark's task paths keep running
(the timings themselves are the benchmark's, in bench/RESULTS.md)."""
from __future__ import annotations

import re

import pytest

from tests.trainer.conftest import T5_RECIPE
from tests.trainer.bench_helpers import bench_module

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bench():
    with bench_module("finetune") as module:
        yield module


@pytest.fixture(scope="module")
def t5_checkpoint(tmp_path_factory, sentinel_tokenizer_dir, make_family_config):
    """A tiny T5 after 4 span-corruption steps (its weights matter little: the bench compares two
    trainers from the same start)."""
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    config = make_family_config("t5", max_steps=4, checkpoint_every=4, eval_every=4, warmup_steps=1,
                                **T5_RECIPE)
    return train(config, data_dir=sentinel_tokenizer_dir, out_dir=tmp_path_factory.mktemp("t5"),
                 sink=ListSink()).last_checkpoint


@pytest.mark.parametrize("task", ["classification", "pair_classification", "regression", "token_classification",
                                  "extractive_qa", "text_to_text"])
def test_the_bench_trains_both_sides_of_each_task_with_equal_losses_on_equal_batches(
        bench, task, request, capsys):
    checkpoint = (request.getfixturevalue("t5_checkpoint") if task == "text_to_text"
                  else request.getfixturevalue("trained_run")[0].last_checkpoint)
    assert bench.main(["--task", task, "--checkpoint", str(checkpoint), "--steps", "2", "--batch-size", "4",
                       "--max-length", "48", "--max-target-length", "8", "--lr", "1e-3", "--seeds", "0",
                       "--parity-steps", "3", "--threads", "1", "--reference-sampling", "random"]) == 0
    out = capsys.readouterr().out
    steps = re.search(r"largest over the (\d+) steps (\S+) .*; ours logged (\d+) steps, transformers (\d+)", out)
    assert steps, out
    assert steps.group(1) == steps.group(3) == steps.group(4) == "3"
    assert float(steps.group(2)) < 1e-5  # the same computation, step for step
    scores = re.search(r"test metrics after these steps.*?: (.*)\n", out).group(1)
    pairs = re.findall(r"(\w+) (\S+) / (\S+?)(?:,|$)", scores)
    # the same weights (to the last bits) score the same through the read-back: a rank correlation of nearly
    # tied predictions may move in its fourth decimal
    assert pairs and all(a == b or abs(float(a) - float(b)) <= 1e-3 for _, a, b in pairs), scores
    assert re.search(rf"{task}, 1 seed\(s\), 2 steps x 4, 1 thread\(s\):\n  ours \(group_by_length on\) vs "
                     r"transformers \(random\): test \w+ \S+ vs \S+ .* training speed ours / transformers", out), out


def test_the_reference_can_train_on_our_schedule_which_differs_from_its_own_in_the_warm_up(
        bench, trained_run, monkeypatch, capsys):
    """Trainer's linear warm-up is one update behind ours (its first update has lr 0); the bench can
    hand it ours, and then, dropout off, the two trainers' losses agree through warm-up and decay."""
    import torch
    from transformers import get_scheduler

    from trainer.finetune.config import FinetuneConfig

    config = FinetuneConfig(checkpoint="unused", dataset="unused", max_steps=10, warmup_ratio=0.2, lr=1e-3)
    lrs = {}
    for name in ("ours", "transformers"):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
        scheduler = (bench.our_schedule(optimizer, config) if name == "ours" else
                     get_scheduler("linear", optimizer, num_warmup_steps=config.warmup_steps, num_training_steps=10))
        lrs[name] = []
        for _ in range(10):  # Trainer's order: the update at the current lr, then the scheduler's step
            lrs[name].append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
    assert lrs["ours"] == pytest.approx([5e-4, 1e-3, 1e-3, 8.75e-4, 7.5e-4, 6.25e-4, 5e-4, 3.75e-4, 2.5e-4, 1.25e-4])
    assert lrs["transformers"][0] == 0.0 and lrs["transformers"][1] == pytest.approx(5e-4)  # one update behind
    assert lrs["transformers"][2:] == pytest.approx(lrs["ours"][2:])

    made = []
    real = bench.our_schedule
    monkeypatch.setattr(bench, "our_schedule", lambda *a: made.append(real(*a)) or made[-1])
    assert bench.main(["--task", "classification", "--checkpoint", str(trained_run[0].last_checkpoint), "--steps", "3",
                       "--batch-size", "4", "--max-length", "48", "--lr", "1e-3", "--seeds", "0",
                       "--parity-steps", "10", "--parity-schedule", "run", "--threads", "1",
                       "--reference-sampling", "random", "--reference-schedule", "ours"]) == 0
    # the parity run, then the timed one: Trainer stepped our schedule once per update
    assert [s.last_epoch for s in made] == [10, 3]
    out = capsys.readouterr().out
    assert "dropout off, lr 0.001, warm-up 1 steps, linear decay, Trainer on our schedule" in out
    diff = float(re.search(r"largest over the 10 steps (\S+)", out).group(1))
    assert diff < 1e-5  # on one schedule, warm-up and decay included, the same losses step for step
    assert "transformers, random, schedule ours:" in out
