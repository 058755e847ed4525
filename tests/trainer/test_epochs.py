"""`epochs` (passes over the train split) instead of max_steps, for fine-tuning and pre-training;
the two are exclusive, and a fine-tuning YAML's settings are checked before its dataset is ingested.
Warm-up steps from warmup_ratio are rounded up, as transformers rounds them."""
from __future__ import annotations

import json
import math

import pytest

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig


@pytest.mark.parametrize("cls, fields", [(FinetuneConfig, {"checkpoint": "c", "dataset": "d"}),
                                         (RunConfig, {})])
def test_epochs_and_max_steps_are_exclusive(cls, fields):
    with pytest.raises(ConfigError, match="max_steps .* or as epochs .* not both"):
        cls.from_dict({**fields, "epochs": 2, "max_steps": 100})
    config = cls.from_dict({**fields, "epochs": 2})
    assert config.max_steps == 0 and config.epochs == 2  # the steps come from the train split
    assert cls.from_dict(config.to_dict()).epochs == 2  # what a run row stores reads back
    assert cls.from_dict({**fields, "epochs": 0, "max_steps": 100}).max_steps == 100  # 0 epochs: not given
    with pytest.raises(ConfigError, match="max_steps must be between 1"):
        cls.from_dict({**fields, "max_steps": 0})
    with pytest.raises(ConfigError, match="epochs must be"):
        cls.from_dict({**fields, "epochs": -1})


def test_warmup_ratio_is_rounded_up_as_in_transformers():
    from types import SimpleNamespace

    from transformers.training_args import TrainingArguments

    for steps, ratio in ((25, 0.1), (300, 0.1), (7, 0.06), (1000, 0.06), (10, 0.0), (3, 0.5)):
        ours = FinetuneConfig(checkpoint="c", dataset="d", max_steps=steps, warmup_ratio=ratio).warmup_steps
        # transformers' own rounding (a ratio below 1 is a share of the steps), without building its arguments
        assert ours == TrainingArguments.get_warmup_steps(SimpleNamespace(warmup_steps=ratio), steps), (steps, ratio)
    assert FinetuneConfig(checkpoint="c", dataset="d", max_steps=25, warmup_ratio=0.1).warmup_steps == 3


def test_fine_tuning_for_two_epochs_trains_ceil_2n_over_batch_steps(trained_run, tmp_path, capsys):
    from trainer.cli import main
    from trainer.prep.labelled import read_meta

    (tmp_path / "tune.yaml").write_text(
        f"checkpoint: {trained_run[2]}\ndataset: {{demo: classification}}\noutput_dir: out\nepochs: 2\n"
        f"batch_size: 64\nmax_length: 32\neval_every: 1000\ncheckpoint_every: 1000\nlog_every: 5\ndevice: cpu\n")
    assert main(["finetune", str(tmp_path / "tune.yaml")]) == 0
    n = read_meta(tmp_path / "out" / "dataset")["sizes"]["train"]
    assert n % 64  # a last batch of an epoch that the next one completes
    steps = math.ceil(2 * n / 64)
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train[-1]["step"] == steps and train[-1]["values"]["progress"] == 1.0
    assert train[-1]["values"]["epoch"] == pytest.approx(steps * 64 / n)  # every example seen twice, and a few thrice
    out = capsys.readouterr().out
    assert f"2 epochs of {n:,} training examples, 64 a step: {steps:,} steps." in out
    assert f"step {steps:>6}/{steps}" in out
    # the last line counts passes as the metrics do (issue 31, point 4: it said "epoch 1" after "epoch 2.00")
    assert f"tokens seen, {steps * 64 / n:.2f} epochs)." in out and "test @ " in out


def test_pre_training_for_epochs_counts_the_train_splits_sequences(tokenizer_dir, tmp_path):
    from tests.trainer.conftest import tiny_config
    from trainer.objectives.examples import SpecialIds
    from trainer.prep.tokenization import load_tokenizer
    from trainer.training.data import build_train_stream
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    fields = {**tiny_config().to_dict(), "batch_size": 32, "grad_accum": 2, "warmup_steps": 1, "eval_every": 1000,
              "checkpoint_every": 1000}
    del fields["max_steps"]
    config = RunConfig.from_dict({**fields, "epochs": 0.5})
    special = SpecialIds.from_tokenizer(load_tokenizer(tokenizer_dir))
    sequences = build_train_stream(config, tokenizer_dir, special).epoch_size
    steps = math.ceil(0.5 * sequences / 64)
    sink = ListSink()
    result = train(config, data_dir=tokenizer_dir, out_dir=tmp_path, sink=sink)
    assert result.final_step == steps
    assert f"0.5 epochs of {sequences:,} training sequences, 64 a step: {steps:,} steps." in sink.lines

    with pytest.raises(ConfigError, match=f"warmup_steps \\(500\\) is more than the {steps} steps"):
        train(config.replace(warmup_steps=500), data_dir=tokenizer_dir, out_dir=tmp_path / "again", sink=ListSink())


def test_a_bad_setting_is_refused_before_the_dataset_is_ingested(trained_run, tmp_path, capsys, monkeypatch):
    from trainer.cli import main
    from trainer.prep import labelled

    def ingest(*args, **kwargs):
        raise AssertionError("the dataset was ingested before the settings were checked")

    monkeypatch.setattr(labelled, "ingest", ingest)
    monkeypatch.setattr(labelled, "write_demo_dataset", ingest)
    for setting, message in (("max_steps: 0", "max_steps must be between 1"),
                             ("max_steps: 10\nepochs: 3", "not both"),
                             ("learning_rate: 0.1", "Unknown fine-tuning field: learning_rate.")):
        (tmp_path / "tune.yaml").write_text(f"checkpoint: {trained_run[2]}\ndataset: {{demo: classification}}\n"
                                            f"output_dir: out\n{setting}\n")
        assert main(["finetune", str(tmp_path / "tune.yaml")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_length_given_replaces_the_other_one_of_the_settings_it_starts_from():
    """The launch form, a sweep's trials and a follow-up of a multi-task run all start from
    settings that already say how long to train (length_from)."""
    from trainer.config import length_from

    base = {"max_steps": 500, "epochs": 0, "lr": 1e-3}
    assert length_from(base, {"epochs": 2}) == {"max_steps": 0, "epochs": 0, "lr": 1e-3}
    assert length_from({"max_steps": 0, "epochs": 2}, {"max_steps": 40}) == {"max_steps": 0, "epochs": 0}  # the caller adds 40
    assert length_from(base, {"lr": 1.0}) is base  # no length given: as it was
    assert length_from(base, {"epochs": 0, "max_steps": None}) is base  # nothing said
    assert length_from(base, {"epochs": 2, "max_steps": 9}) is base  # both: the config refuses them
