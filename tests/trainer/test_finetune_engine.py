"""Fine-tuning end to end on the demo datasets (trainer/finetune): a pre-trained checkpoint's
encoder with a fresh head, trained by the pre-training loop, scored by the task's metrics on the
validation split as it trains and on the test split at the end."""
from __future__ import annotations

import json
import math

import pytest
import torch

from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


@pytest.fixture(scope="module")
def base_checkpoint(trained_run):
    return trained_run[0].last_checkpoint


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    root, out = tmp_path_factory.mktemp("labelled"), {}
    for name in ("classification", "regression", "multilabel", "token_classification"):
        source = write_demo_dataset(name, root / DEMOS[name].filename)
        preview = sniff(source, source.name)
        out[name] = ingest(source, root / name, original_filename=source.name, task=preview.task,
                           mapping=preview.mapping).task and root / name
    return out


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=60, batch_size=16, max_length=64, lr=2e-3, eval_every=30, checkpoint_every=60,
                    log_every=10, device="cpu")
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


def test_classification_learns_well_above_chance_and_reports_what_it_predicts(base_checkpoint, datasets, tmp_path):
    from models_lib.checkpoint import load_model
    from sklearn.metrics import accuracy_score

    from trainer.finetune.tasks import CLASSIFICATION
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    result, sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", max_steps=300,
                         eval_every=150, checkpoint_every=300)
    assert result.status == "succeeded" and result.final_step == 300
    valid = [v for _, split, v in sink.events if split == "valid"]
    assert len(valid) == 2 and {"accuracy", "f1_macro", "f1_micro", "mcc", "loss"} <= set(valid[-1])
    (step, _, test), = [e for e in sink.events if e[1] == "test"]
    labels = read_meta(datasets["classification"])["labels"]
    # five packages: chance is 0.2, the bound twice that (0.4). Calibrated on the stored tokenizers
    # (2026-12-02, two processes, identical): test accuracy 0.733, a margin of 0.33 above the bound.
    assert step == 300 and test["accuracy"] > 2 / len(labels), test
    assert json.loads((tmp_path / "run" / "test_metrics.json").read_text()) == pytest.approx(test)
    # The checkpoint is a native classifier with the dataset's labels, and its own predictions
    # on the test split give the accuracy the run reported.
    model = load_model(result.last_checkpoint).eval()
    assert type(model).__name__ == "EncoderForSequenceClassification" and model.task_config.labels == labels
    examples = list(iter_examples(datasets["classification"], "test"))
    collate = CLASSIFICATION.build_collator(load_tokenizer(result.last_checkpoint), labels, 64)
    with torch.no_grad():
        batch = collate(examples)
        predicted = model.predict(model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits)
    assert accuracy_score(batch.labels.tolist(), predicted.tolist()) == pytest.approx(test["accuracy"])


@pytest.mark.parametrize("name, primary", [("regression", "pearson"), ("multilabel", "f1_micro"),
                                           ("token_classification", "entity_f1")])
def test_every_task_trains_and_is_scored_by_its_metrics(base_checkpoint, datasets, tmp_path, name, primary):
    result, sink = _tune(base_checkpoint, datasets[name], tmp_path / name)
    assert result.status == "succeeded"
    for split in ("valid", "test"):
        values = [v for _, s, v in sink.events if s == split][-1]
        assert primary in values and math.isfinite(values[primary]), (split, values)
    assert any(f"Test split: {primary}" in line for line in sink.lines)


def test_mistakes_are_sentences(base_checkpoint, datasets, tmp_path):
    with pytest.raises(ConfigError, match="The dataset is a regression dataset; it cannot train classification"):
        _tune(base_checkpoint, datasets["regression"], tmp_path / "a", task="classification")
    with pytest.raises(ConfigError, match="Fine-tuning does not offer the task 'ranking' yet"):
        _tune(base_checkpoint, datasets["regression"], tmp_path / "b", task="ranking")
    with pytest.raises(ConfigError, match="The dataset is a regression dataset; it cannot train sft"):
        _tune(base_checkpoint, datasets["regression"], tmp_path / "b", task="sft")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        _tune(tmp_path, datasets["regression"], tmp_path / "c")
    with pytest.raises(ConfigError, match="warmup_ratio must be between 0 and 1, not 2"):
        FinetuneConfig(checkpoint="x", dataset="y", warmup_ratio=2)
    with pytest.raises(ConfigError, match="Name the labelled dataset"):
        FinetuneConfig(checkpoint="x")


def test_the_cli_fine_tunes_a_run_folder_on_a_demo_dataset(trained_run, tmp_path):
    from trainer.cli import main

    _, _, run_folder = trained_run
    config = tmp_path / "tune.yaml"
    config.write_text(f"checkpoint: {run_folder}\ndataset: {{demo: regression}}\noutput_dir: out\n"
                      f"max_steps: 20\nmax_length: 32\neval_every: 10\ncheckpoint_every: 20\ndevice: cpu\n")
    assert main(["finetune", str(config)]) == 0
    assert (tmp_path / "out" / "dataset" / "dataset.json").is_file()
    assert (tmp_path / "out" / "test_metrics.json").is_file()
    assert (tmp_path / "out" / "checkpoints").is_dir()


def test_the_task_registry_loads_no_torch():
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys; from trainer import finetune; finetune.names(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


def test_a_stopped_run_resumes_where_it_stopped_and_ends_as_one_that_never_stopped(base_checkpoint, datasets,
                                                                                     tmp_path):
    import safetensors.torch

    settings = dict(max_steps=20, checkpoint_every=10, eval_every=10, early_stopping_patience=3, lr=2e-3,
                    warmup_ratio=0.0)
    whole, whole_sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "whole", **settings)
    asked = {"n": 0}

    def stop_after_ten():  # asked once per step: stop at step 10
        asked["n"] += 1
        return asked["n"] > 10

    config = FinetuneConfig(checkpoint=str(base_checkpoint), dataset=str(datasets["classification"]),
                            batch_size=16, max_length=64, log_every=10, device="cpu", **settings)
    first = finetune(config, out_dir=tmp_path / "parts", sink=ListSink(), should_stop=stop_after_ten)
    assert first.status == "cancelled" and first.final_step == 10
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        finetune(config, out_dir=tmp_path / "parts", sink=ListSink())
    sink = ListSink()
    second = finetune(config, out_dir=tmp_path / "parts", sink=sink, resume=True)
    assert second.status == "succeeded" and second.final_step == 20
    assert any("Resuming from" in line for line in sink.lines)
    a = safetensors.torch.load_file(str(whole.last_checkpoint / "model.safetensors"))
    b = safetensors.torch.load_file(str(second.last_checkpoint / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    test = lambda events: [v for _, s, v in events if s == "test"][-1]  # noqa: E731
    assert test(sink.events)["accuracy"] == pytest.approx(test(whole_sink.events)["accuracy"])
    best = json.loads((tmp_path / "parts" / "best.json").read_text())
    assert best == json.loads((tmp_path / "whole" / "best.json").read_text())


def test_one_seed_trains_one_way_whether_or_not_the_process_has_trained_before(base_checkpoint, datasets, tmp_path):
    """A worker process trains run after run: the first one measures the CPU's peak for MFU (later
    ones read it from a cache), and that must not move the seeded dropout masks."""
    from trainer.training import flops

    flops._measured.cache_clear()
    sinks = [_tune(base_checkpoint, datasets["classification"], tmp_path / str(i), max_steps=5, log_every=1,
                   eval_every=5, checkpoint_every=5)[1] for i in range(2)]
    first, second = ([v["loss"] for _, v in sink.split("train")] for sink in sinks)
    assert len(first) == 5 and first == second
