"""bench/finetune.py at a tiny size: for every task it compares, a couple of parity steps (both
trainers on the same batches, dropout off: the per-step losses equal, then the same test scores
for both) and a couple of timed steps per side, so that the benchmark's task paths keep running
(the timings themselves are the benchmark's, in bench/RESULTS.md)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.trainer.conftest import T5_RECIPE

pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "finetune.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_finetune", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
