"""Score a fine-tuned checkpoint on a labelled dataset, as its run scored its test split:

    evaluate_checkpoint(checkpoint, dataset, split="test", out_dir=None) -> Evaluation

The model, tokenizer, collator and task step are rebuilt from the checkpoint alone (its weights
with their task head, its tokenizer, and the FinetuneConfig its trainer_state.json records), the
split is scored with trainer.training.engine.score (what the run's test split got), and with
out_dir the same files are written as a run writes beside its checkpoints: test_metrics.json and
trainer.finetune.report's predictions and per-class report. `python -m trainer evaluate` calls it.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer import finetune as tasks
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.metrics import METRICS

METRICS_FILE = "test_metrics.json"


@dataclass
class Evaluation:
    metrics: dict[str, float]
    primary: str          # the task's main metric (a key of metrics)
    report: dict | None   # trainer.finetune.report.test_report: confusion matrix and per-class table
    examples: int
    task: str


def finetuned_config(folder: Path, /, **changes: Any) -> FinetuneConfig:
    """The FinetuneConfig a fine-tuned checkpoint was trained with (its trainer_state.json), with
    `changes`; ConfigError with a sentence for a checkpoint of another kind."""
    from trainer.training.checkpoints import read_state

    try:
        saved = read_state(folder).get("config") or {}
    except (OSError, ValueError):
        saved = {}
    if not isinstance(saved, dict) or not saved.get("task") or "dataset" not in saved:
        raise ConfigError(f"{folder} is not a checkpoint of a fine-tuning run (its trainer_state.json names no "
                          f"task), so it has no test report to compute; fine-tune it first.")
    fields = {k: v for k, v in saved.items() if k != "max_steps"}  # how long it trained does not matter here
    return FinetuneConfig.from_dict({**fields, "extra_datasets": [], **changes})


def trained_labels(model: Any, config: FinetuneConfig, meta: dict) -> list[str]:
    """The labels in the order the model's outputs are: its head's (task_config), the words a T5
    classifier writes (label_words), else the dataset's."""
    head = getattr(model, "task_config", None)
    if head is not None and getattr(head, "labels", None):
        return [str(x) for x in head.labels]
    if config.label_words:
        return [str(x) for x in config.label_words]
    return [str(x) for x in meta.get("labels") or []]


def evaluate_checkpoint(checkpoint: str | Path, dataset: str | Path, *, split: str = "test",
                        out_dir: str | Path | None = None, batch_size: int | None = None,
                        device: str = "auto", pack: bool = True) -> Evaluation:
    """Score `split` of the labelled dataset folder `dataset` with the fine-tuned `checkpoint`;
    its batches packed as a fine-tuning run packs them (engine.packing) unless pack=False."""
    from models_lib.checkpoint import load_model
    from trainer.finetune import report
    from trainer.finetune.engine import _batches, packing
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer
    from trainer.training.engine import score, setup_runtime
    from trainer.training.sinks import NullSink

    checkpoint, dataset = Path(checkpoint), Path(dataset)
    config = finetuned_config(checkpoint, checkpoint=str(checkpoint), dataset=str(dataset), device=device,
                              **({"batch_size": batch_size} if batch_size else {}))
    meta = read_meta(dataset)
    if meta.get("task") != config.task:
        raise ConfigError(f"{checkpoint.name} was fine-tuned for {config.task.replace('_', ' ')}, and the dataset is "
                          f"a {str(meta.get('task')).replace('_', ' ')} dataset: choose a dataset of its task.")
    examples = list(iter_examples(dataset, split))
    if not examples:
        raise ConfigError(f"The dataset's {split} split is empty, so there is nothing to score.")
    device, precision = setup_runtime(config)
    try:
        model = load_model(checkpoint, map_location="cpu")
    except (OSError, ValueError) as e:
        raise ConfigError(f"The checkpoint {checkpoint.name} cannot be loaded: {e}") from None
    task = tasks.for_family(config.task, str(getattr(model.config, "family", "")))
    labels = trained_labels(model, config, meta)
    collator = task.build_collator(load_tokenizer(checkpoint), labels, config.max_length, config)
    model = model.to(device).eval()
    forward = task.step(config, model, device, task=task, labels=labels)
    forward.sink = NullSink()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    batches = _batches(examples, packing(task, model, collator) if pack else collator, config.batch_size)
    values = score(model, forward, batches, device=device,
                   autocast=autocast)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
        report.write_test_outputs(out, forward, examples)
    return Evaluation(metrics=values, primary=METRICS[task.metrics].primary, report=forward.test_report(),
                      examples=len(examples), task=task.name)
