"""T5 multi-task training: several labelled datasets in one text-to-text run, mixed by the
strategies of the T5 study (Raffel et al. 2020, section 3.5.2).

Each dataset is one task with its own prefix ("summarize: ", "classify: "); classification
datasets are written as text to text with the label as the target word (a pair as
"sentence1: A sentence2: B"), regression ones with the score rounded to 0.2 as text (T5's
STS-B). The rate at which each task's examples are drawn:

- examples-proportional with an artificial limit K: r_m = min(e_m, K) / sum_n min(e_n, K)
  (K = 0: no limit);
- temperature-scaled: the proportional rates (with K) raised to 1/T and renormalised; T = 1 is
  examples-proportional, a large T approaches equal mixing (T = 2 in the paper's comparison);
- equal: 1 / M each.

MixedStream draws the task of every training example at those rates (seeded), then the task's
next example in its own seeded per-epoch order; its place is the number of examples drawn, so a
resumed run draws the same sequence on. Validation scores each task apart
(Text2TextStep.finish_validation: `exact_match/<task>`, `rouge_l/<task>` and their means).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trainer.errors import ConfigError
from trainer.finetune.config import MIX_DATASET_TASKS as TEXT_TASKS
from trainer.finetune.config import STRATEGIES, mix_task_names
from trainer.prep.labelled.tasks import TASKS as DATASET_TASKS
from trainer.training.data import DataPosition

PER_TASK_METRICS = ("exact_match", "rouge_l")  # scored per task, and their mean over the tasks
BLOCK = 4096  # task draws made at a time (each block seeded by its index, so any place can be found again)


def mixing_rates(sizes: Sequence[int], strategy: str, *, limit: int = 0, temperature: float = 1.0) -> list[float]:
    """The share of training examples drawn from each task, given its number of training examples."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"mixing must be one of {', '.join(STRATEGIES)}, not {strategy!r}.")
    if not sizes or any(int(n) <= 0 for n in sizes):
        raise ConfigError("Every task of a multi-task run needs training examples.")
    if strategy == "equal":
        return [1.0 / len(sizes)] * len(sizes)
    capped = np.array([min(int(n), int(limit)) if limit else int(n) for n in sizes], dtype=np.float64)
    rates = capped / capped.sum()
    if strategy == "temperature":
        if not temperature > 0:
            raise ConfigError(f"mixing_temperature must be above 0, not {temperature!r}.")
        rates = rates ** (1.0 / float(temperature))
        rates = rates / rates.sum()
    return [float(r) for r in rates]


# ---------------------------------------------------------------------------- the tasks
def as_text(example: dict, task: str) -> dict:
    """A labelled example of the dataset task `task` as {"input", "target"}: a text-to-text one as it
    is, one with a class as its label word, one with a score as that score in words (by the task's
    kind of label, TaskSpec.labels)."""
    if task not in TEXT_TASKS:
        raise ConfigError(f"A {task} dataset cannot be written as text to text; multi-task mixing takes "
                          f"{', '.join(TEXT_TASKS)} datasets.")
    if "target" in example:
        return {"input": example["input"], "target": example["target"]}
    if DATASET_TASKS[task].labels == "classes":
        return {"input": source_of(example), "target": str(example["label"])}
    return {"input": source_of(example), "target": score_word(example["label"])}  # a score


def source_of(example: dict) -> str:
    """A classification or regression example's input as T5 writes it: the text, or a pair as
    "sentence1: A sentence2: B"."""
    if "text" in example:
        return str(example["text"])
    return f"sentence1: {example['sentence1']} sentence2: {example['sentence2']}"


def score_word(value: Any) -> str:
    """A regression score as T5's target text for STS-B: rounded to the nearest 0.2, one decimal."""
    return f"{round(float(value) * 5) / 5:.1f}"


@dataclass
class MixTask:
    name: str
    prefix: str
    splits: dict[str, list[dict]]  # split -> {"input", "target", "prefix", "task"}


def load_tasks(config: Any) -> list[MixTask]:
    """The run's main dataset (with source_prefix) and each of extra_datasets, as text examples."""
    from trainer.prep.labelled import iter_examples, read_meta

    specs = [{"dataset": config.dataset, "prefix": config.source_prefix}, *config.extra_datasets]
    tasks = []
    for name, spec in zip(mix_task_names(config.to_dict()), specs):
        folder = Path(str(spec["dataset"]))
        meta = read_meta(folder)
        prefix = str(spec.get("prefix") or "")
        if meta["task"] not in TEXT_TASKS:
            raise ConfigError(f"The dataset of task {name!r} is a {meta['task']} dataset; multi-task mixing "
                              f"takes {', '.join(TEXT_TASKS)} datasets.")
        splits = {split: [{**as_text(ex, meta["task"]), "prefix": prefix, "task": name}
                          for ex in iter_examples(folder, split)] for split in ("train", "validation", "test")}
        if not splits["train"]:
            raise ConfigError(f"The dataset of task {name!r} has no training examples.")
        tasks.append(MixTask(name, prefix, splits))
    return tasks


def rates_for(config: Any, tasks: Sequence[MixTask]) -> list[float]:
    return mixing_rates([len(t.splits["train"]) for t in tasks], config.mixing, limit=config.mixing_limit,
                        temperature=config.mixing_temperature)


def describe(tasks: Sequence[MixTask], rates: Sequence[float], strategy: str) -> str:
    parts = [f"{t.name} {r:.1%} ({len(t.splits['train']):,} examples)" for t, r in zip(tasks, rates)]
    return f"Multi-task mixing ({strategy}): " + ", ".join(parts) + "."


# ---------------------------------------------------------------------------- the sampler
class MixedStream:
    """Training batches whose examples come from the tasks at `rates` (what the loop reads like
    engine.ExampleStream: next_batch, position, epoch_size, collator).

    A collator that encodes ahead (trainer.finetune.tasks.encodes_ahead) has every task's examples
    tokenised once, here. The batches are not grouped by length: the order is the tasks' draws,
    each batch the next `batch_size` of them, so that the number drawn is the whole place a resumed
    run goes on from; grouping would have to sort a window of future draws, moving examples across
    that count (group_by_length does not apply to multi-task runs)."""

    def __init__(self, tasks: Sequence[Sequence[dict]], rates: Sequence[float], collator: Any, *, batch_size: int,
                 seed: int, position: DataPosition | None = None):
        if len(tasks) != len(rates) or not tasks or any(not t for t in tasks):
            raise ConfigError("Every task of a multi-task run needs training examples.")
        from trainer.finetune.tasks import encodes_ahead

        self.tasks, self.collator, self.batch_size, self.seed = [list(t) for t in tasks], collator, batch_size, seed
        self.encoded = [collator.encode(t) for t in self.tasks] if encodes_ahead(collator) else None
        p = np.asarray(rates, dtype=np.float64)
        self.rates = p / p.sum()
        position = position or DataPosition()
        self.drawn = position.epoch * self.epoch_size + position.index
        self._block, self._choices = -1, np.empty(0, dtype=np.int64)
        self.counts = np.zeros(len(self.tasks), dtype=np.int64)  # examples drawn from each task so far
        for b in range(self.drawn // BLOCK):
            self.counts += np.bincount(self._draws(b), minlength=len(self.tasks))
        rest = self._draws(self.drawn // BLOCK)[: self.drawn % BLOCK]
        self.counts += np.bincount(rest, minlength=len(self.tasks))
        self._orders: dict[tuple[int, int], np.ndarray] = {}

    @property
    def epoch_size(self) -> int:
        return sum(len(t) for t in self.tasks)

    @property
    def position(self) -> DataPosition:
        return DataPosition(self.drawn // self.epoch_size, self.drawn % self.epoch_size)

    def _draws(self, block: int) -> np.ndarray:
        if block != self._block:
            rng = np.random.default_rng([self.seed, 0x7A5C, block])
            self._block, self._choices = block, rng.choice(len(self.tasks), size=BLOCK, p=self.rates)
        return self._choices

    def _order(self, task: int, epoch: int) -> np.ndarray:
        key = (task, epoch)
        if key not in self._orders:
            self._orders = {k: v for k, v in self._orders.items() if k[0] != task}
            self._orders[key] = np.random.default_rng([self.seed, task, epoch]).permutation(len(self.tasks[task]))
        return self._orders[key]

    def next_pick(self) -> tuple[int, int]:
        """(task, index of its example) of the next example drawn; moves the place on."""
        task = int(self._draws(self.drawn // BLOCK)[self.drawn % BLOCK])
        count, n = int(self.counts[task]), len(self.tasks[task])
        index = int(self._order(task, count // n)[count % n])
        self.counts[task] += 1
        self.drawn += 1
        return task, index

    def next_example(self) -> dict:
        task, index = self.next_pick()
        return self.tasks[task][index]

    def skip_batch(self) -> None:
        """Move past the next batch without building it (trainer.training.batch_workers)."""
        for _ in range(self.batch_size):
            self.next_pick()

    def next_batch(self) -> Any:
        picked = [self.next_pick() for _ in range(self.batch_size)]
        examples = [self.tasks[t][i] for t, i in picked]
        if self.encoded is None:
            return self.collator(examples)
        return self.collator.collate(examples, [self.encoded[t][i] for t, i in picked])


# ---------------------------------------------------------------------------- per-task scores
def per_task_metrics(tasks: Sequence[str], predictions: Sequence[str], references: Sequence[str],
                     *, lowercase: bool = False) -> dict[str, float]:
    """`<metric>/<task>` for each task and `<metric>/mean` (the tasks' unweighted mean)."""
    from trainer.finetune.metrics import text_to_text_metrics

    values: dict[str, float] = {}
    names = list(dict.fromkeys(tasks))
    for name in names:
        picked = [i for i, t in enumerate(tasks) if t == name]
        scores = text_to_text_metrics([predictions[i] for i in picked], [references[i] for i in picked],
                                      lowercase=lowercase)
        for key in PER_TASK_METRICS:
            values[f"{key}/{name}"] = scores[key]
    for key in PER_TASK_METRICS:
        per = [values[f"{key}/{name}"] for name in names]
        values[f"{key}/mean"] = float(math.fsum(per) / len(per))
    return values


# ---------------------------------------------------------------------------- then one task alone
def best_or_last_checkpoint(out_dir: Path) -> Path | None:
    """What a multi-task run hands on: early stopping's best checkpoint (best.json) when it kept
    one, else its newest. None when it has none."""
    import json

    from trainer.training.checkpoints import checkpoints_dir, list_checkpoints

    try:
        best = json.loads((Path(out_dir) / "best.json").read_text(encoding="utf-8"))
        folder = checkpoints_dir(out_dir) / str(best["checkpoint"])
        if folder.is_dir():
            return folder
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def task_spec(config: Any, name: str) -> dict:
    """{dataset, prefix, name} of the multi-task run's task `name`; ConfigError naming the tasks
    when it is not one of them."""
    names = mix_task_names(config.to_dict())
    if name not in names:
        listed = ", ".join(names) or "none: it has no extra_datasets"
        raise ConfigError(f"then_finetune_on must name one of the tasks of the mix ({listed}), not {name!r}.")
    i = names.index(name)
    spec = {"dataset": config.dataset, "prefix": config.source_prefix} if i == 0 else config.extra_datasets[i - 1]
    return {"dataset": str(spec["dataset"]), "prefix": str(spec.get("prefix") or ""), "name": name}


def then_config(config: Any, name: str, *, checkpoint: str | Path, max_steps: int = 0) -> Any:
    """The second phase of "multi-task, then fine-tuned on one of them" (Raffel et al. 2020,
    section 3.5.3): the same settings on task `name` alone (its dataset and prefix; the dataset's
    own task, so a classification or regression one is T5's label words, text_classify), from the
    multi-task run's checkpoint, for max_steps (0: the multi-task run's length: its max_steps, or
    its epochs, then over this task's train split)."""
    spec = task_spec(config, name)
    length = {"max_steps": int(max_steps), "epochs": 0.0} if max_steps else {}
    return config.replace(checkpoint=str(checkpoint), dataset=spec["dataset"], source_prefix=spec["prefix"],
                          extra_datasets=[], task="", task_name="", **length)
