"""Fine-tuning techniques (issue 9, section 3). Each is a FinetuneConfig setting, off by default but
length grouping:

    llrd                     layer-wise lr decay f in (0, 1]: over model.layer_groups()
                             ([embeddings, layer 0, ..., layer L-1, head]) the head trains at lr,
                             layer L-1 at lr*f, ..., layer 0 at lr*f^L, the embeddings at lr*f^(L+1).
                             The optimizer has one group per (layer group, decay or not), each with
                             its own lr, which the schedule scales; biases and norms take no weight
                             decay, as everywhere (trainer.training.optim).
    freeze_embeddings        the embeddings never train; freeze_layers k: nor do layers 0..k-1.
    freeze_layers            Frozen parameters get requires_grad False and stay out of the optimizer,
                             so every checkpoint holds them exactly as pre-trained.
    gradual_unfreeze_every   ULMFiT's gradual unfreezing, every n steps: only the head trains for the
                             first n steps, then one more layer group from the top joins every n
                             steps, down to what freeze_* leaves trainable. The optimizer holds all
                             of those groups from the start (one schedule, one state); a group still
                             frozen has no gradient, so AdamW leaves it alone (its decay included).
    early_stopping_patience  stop after that many evaluations in a row without a better primary
                             metric (trainer.finetune.metrics.METRICS[task.metrics]); the run ends
                             "succeeded". Each new best is saved as a checkpoint and named in
                             out_dir/best.json; the test split is scored with the best weights.
    class_weights            "balanced": n_samples / (n_classes * count_c) over the train split's
                             label counts (classification, token classification: tags per word),
                             passed to the loss as the model's class_weights, in training and
                             validation alike.
    group_by_length          (on by default) each epoch's shuffled order is rearranged so that a
                             batch holds examples of similar length (trainer.finetune.engine.
                             length_grouped_order), and dynamic padding pads little; every
                             task's collator tokenises ahead (tasks.encodes_ahead) and uses it,
                             but multi-task mixing keeps its draws' order. A resumed run goes on
                             in the order it started with (engine.batch_order).

    tuning = prepare(model, config, sink)     # freezing, the optimizer and its schedule, unfreezing
    loop = FinetuneLoop(config, tuning=tuning, metrics=task.metrics, model=..., ...)
    loop.run(should_stop); loop.restore_best()  # then score the test split
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from trainer.errors import ConfigError
from trainer.finetune import lora
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.metrics import METRICS, TaskMetrics
from trainer.training.engine import Loop
from trainer.training.optim import build_optimizer, no_decay_ids, split_decay
from trainer.training.sinks import MetricsSink

BEST_FILE = "best.json"


# ---------------------------------------------------------------------------- class weights
def balanced_class_weights(counts: Sequence[int]) -> list[float]:
    """n_samples / (n_classes * count_c) per class (scikit-learn's "balanced"). A class the
    counts never show weighs 1.0, the average weight of a training example."""
    n, k = sum(counts), len(counts)
    if n <= 0:
        raise ValueError("balanced class weights need at least one counted example")
    return [n / (k * c) if c > 0 else 1.0 for c in counts]


def class_weights_for(config: FinetuneConfig, task: Any, meta: dict, labels: Sequence[str]) -> list[float] | None:
    """The weight of each label (in `labels` order) per config.class_weights; None for "none".
    ConfigError where the task has no classes to balance or the dataset lacks its counts."""
    if config.class_weights == "none":
        return None
    if not task.balances_classes:  # the task says whether its classes can be weighed (Task.balances_classes)
        raise ConfigError(f"class_weights: balanced weighs the classes of classification and token classification; "
                          f"a {task.name} run cannot use it (set class_weights: none).")
    counts = (meta.get("label_counts") or {}).get("train") or {}
    per_label = [int(counts.get(label, 0)) for label in labels]
    if not any(per_label):
        raise ConfigError("class_weights: balanced needs the train split's label counts, which this dataset's "
                          "dataset.json lacks; ingest the dataset again.")
    return balanced_class_weights(per_label)


# ---------------------------------------------------------------------------- freezing and the optimizer
def group_name(i: int, n_groups: int) -> str:
    """A layer group's name in log lines: "the embeddings", "layer 3", "the head"."""
    return "the embeddings" if i == 0 else "the head" if i == n_groups - 1 else f"layer {i - 1}"


def layer_lrs(n_groups: int, lr: float, factor: float) -> list[float]:
    """Each layer group's peak lr, bottom up: lr * factor ** (how far below the head it is)."""
    return [lr * factor ** (n_groups - 1 - i) for i in range(n_groups)]


def frozen_groups(config: FinetuneConfig, n_groups: int, checkpoint: str = "the checkpoint") -> set[int]:
    """The layer groups that freeze_embeddings and freeze_layers keep from training."""
    layers = n_groups - 2
    if config.freeze_layers > layers:
        raise ConfigError(f"freeze_layers is {config.freeze_layers}, but {checkpoint}'s encoder has {layers} "
                          f"separately trained layer{'s' * (layers != 1)}; freeze at most {layers}.")
    frozen = set(range(1, config.freeze_layers + 1))
    if config.freeze_embeddings:
        frozen.add(0)
    return frozen


class GradualUnfreezing:
    """Which layer groups train at each step: the head alone for the first `every` steps, then
    one more group from the top every `every` steps, skipping the ones frozen for good."""

    def __init__(self, groups: list[list[nn.Parameter]], frozen: set[int], every: int):
        self.groups, self.every = groups, every
        self.order = [i for i in reversed(range(len(groups))) if i not in frozen]  # the head first
        self.open = 0  # how many of `order` train now

    def trainable(self, step: int) -> int:
        """How many groups of `order` train in the update after `step` updates."""
        return min(len(self.order), 1 + step // self.every)

    def apply(self, step: int) -> list[int]:
        """Set requires_grad for the update after `step` updates; returns the groups it unfroze."""
        n = self.trainable(step)
        if n == self.open:
            return []
        for rank, i in enumerate(self.order):
            for p in self.groups[i]:
                p.requires_grad_(rank < n)
        opened, self.open = self.order[self.open:n], n
        return opened


@dataclass
class Tuning:
    """What prepare() made of the settings for one model."""

    groups: list[list[nn.Parameter]]  # model.layer_groups(), bottom up
    frozen: set[int]                  # by freeze_*: requires_grad False, not in the optimizer
    lrs: list[float]                  # each group's peak lr
    optimizer: torch.optim.Optimizer
    scheduler: Any
    unfreezing: GradualUnfreezing | None


def prepare(model: nn.Module, config: FinetuneConfig, sink: MetricsSink | None = None,
            checkpoint: str = "the checkpoint") -> Tuning:
    """Freeze per freeze_*, build the optimizer (one group per layer group and decay, head first,
    each at its layer-wise lr) and its schedule, and start gradual unfreezing. Logs what is on."""
    groups = model.layer_groups()
    n = len(groups)
    frozen = frozen_groups(config, n, checkpoint)
    for i in frozen:
        for p in groups[i]:
            p.requires_grad_(False)
    lrs = layer_lrs(n, config.lr, config.llrd)
    no_decay = no_decay_ids(model)
    param_groups = []
    for i in reversed(range(n)):  # the head first: the loop logs the first group's lr, the peak one
        decay, plain = split_decay(groups[i], no_decay)
        for params, weight_decay in ((decay, config.weight_decay), (plain, 0.0)):
            if params:
                param_groups.append({"params": params, "weight_decay": weight_decay, "lr": lrs[i],
                                     "layer_group": i})
    optimizer, scheduler = build_optimizer(model, config.optim, config.max_steps, groups=param_groups)
    unfreezing = None
    if config.gradual_unfreeze_every:
        unfreezing = GradualUnfreezing(groups, frozen, config.gradual_unfreeze_every)
        unfreezing.apply(0)
    if sink is not None:
        for line in describe(config, n, frozen, lrs, unfreezing):
            sink.log(line)
    return Tuning(groups, frozen, lrs, optimizer, scheduler, unfreezing)


def describe(config: FinetuneConfig, n: int, frozen: set[int], lrs: list[float],
             unfreezing: GradualUnfreezing | None) -> list[str]:
    lines = []
    if config.llrd < 1:
        lines.append(f"Layer-wise lr decay {config.llrd:g}: the head at lr {lrs[-1]:.3g}, {group_name(n - 2, n)} at "
                     f"{lrs[-2]:.3g}, down to the embeddings at {lrs[0]:.3g}.")
    if frozen:
        names = ", ".join(group_name(i, n) for i in sorted(frozen))
        lines.append(f"Frozen (they stay as pre-trained): {names}.")
    if unfreezing is not None:
        every, total = unfreezing.every, len(unfreezing.order)
        lines.append(f"Gradual unfreezing: the head trains alone at first; one more layer group joins every "
                     f"{every} steps (all {total} from step {(total - 1) * every + 1}).")
    if config.class_weights != "none":
        lines.append(f"Class weights: {config.class_weights}.")
    return lines


# ---------------------------------------------------------------------------- early stopping
class EarlyStopping:
    """The best value of the primary metric so far, and how many evaluations since it."""

    def __init__(self, metrics: TaskMetrics, patience: int):
        self.metrics, self.patience, self.key = metrics, patience, metrics.primary
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_checkpoint: Path | None = None
        self.waited = 0

    def update(self, step: int, values: dict[str, float]) -> bool:
        """Record one evaluation; True when it is a new best (a missing or non-finite value never is)."""
        value = values.get(self.key)
        if value is not None and math.isfinite(value) and self.metrics.better(value, self.best):
            self.best, self.best_step, self.waited = float(value), step, 0
            return True
        self.waited += 1
        return False

    @property
    def exhausted(self) -> bool:
        return self.waited >= self.patience


class FinetuneLoop(Loop):
    """The pre-training Loop plus gradual unfreezing (before each update) and early stopping
    (after each evaluation)."""

    def __init__(self, config: FinetuneConfig, *, tuning: Tuning, metrics: str | TaskMetrics, **kwargs: Any):
        """metrics: the task's TaskMetrics (Task.scores()), or its key of trainer.finetune.metrics.METRICS;
        its primary metric is watched."""
        super().__init__(config, optimizer=tuning.optimizer, scheduler=tuning.scheduler, **kwargs)
        self.tuning = tuning
        self.early = (EarlyStopping(METRICS[metrics] if isinstance(metrics, str) else metrics,
                                    config.early_stopping_patience)
                      if config.early_stopping_patience else None)
        if self.early is not None and not self.valid:
            raise ConfigError("early_stopping_patience needs a validation split to watch, and this dataset's is "
                              "empty; set it to 0 or ingest the dataset with a validation split.")
        self.stopped = ""  # why the run ends early

    def should_end(self) -> bool:
        return bool(self.stopped)

    def train_step(self) -> None:
        unfreezing = self.tuning.unfreezing
        if unfreezing is not None:
            opened = unfreezing.apply(self.state.step)
            if opened and self.state.step > 0:
                names = ", ".join(group_name(i, len(self.tuning.groups)) for i in opened)
                self.sink.log(f"Step {self.state.step + 1}: unfreezing {names} ({unfreezing.open} of "
                              f"{len(unfreezing.order)} layer groups train now).")
        super().train_step()

    def maybe_eval(self, force: bool = False) -> None:
        before = self.last_eval_step
        super().maybe_eval(force)
        if self.last_eval_step == before:
            return
        self.report_samples()
        early = self.early
        if early is None:
            return
        step = self.state.step
        if early.update(step, self.state.valid_metrics):
            self.keep_best()
        elif early.exhausted and not self.stopped:
            best = "no finite value yet" if early.best is None else f"{early.best:.4f} (step {early.best_step})"
            self.stopped = (f"Early stopping at step {step}: validation {early.key} has not improved on {best} for "
                            f"{early.waited} evaluations in a row (early_stopping_patience {early.patience}).")
            self.sink.log(self.stopped)

    def report_samples(self) -> None:
        """The validation's generated samples (a generative step's input, output and reference
        for the first samples_shown examples): to out_dir/samples.json and to the sink's
        optional `samples(step, rows)` (the web app streams them to the run's page)."""
        from trainer.finetune import report

        samples = getattr(self.forward, "samples", None)
        if not samples:
            return
        step, rows = self.state.step, report.sample_rows(samples)
        try:
            report.write_samples(Path(self.out_dir), step, rows)
        except OSError as e:
            self.sink.log(f"The samples of the validation at step {step} could not be written: {e}")
        send = getattr(self.sink, "samples", None)
        if callable(send):
            send(step, rows)

    def save_checkpoint(self) -> Path:
        """A checkpoint of a LoRA run holds the merged weights: a plain model of its class."""
        from models_lib.core import lora as adapters

        with adapters.merged(self.model):
            return super().save_checkpoint()

    def kept_besides(self) -> set[int]:
        """Early stopping's best checkpoint stays whatever keep_last says (best.json names it)."""
        early = self.early
        return {early.best_step} if early is not None and early.best_step is not None else set()

    def keep_best(self) -> None:
        """Save the weights of a new best evaluation as a checkpoint (unless this step has one) and
        name it in out_dir/best.json."""
        early, step = self.early, self.state.step
        assert early is not None and early.best is not None
        folder = self.last_checkpoint if self.last_checkpoint_step == step else self.save_checkpoint()
        assert folder is not None
        early.best_checkpoint = folder
        if lora.is_adapted(self.model):
            lora.save_adapters(self.model, folder)  # to restore the unmerged adapters exactly
        best = {"step": step, "metric": early.key, "value": early.best,
                "higher_is_better": early.metrics.higher_is_better, "checkpoint": folder.name}
        path = Path(self.out_dir) / BEST_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(best, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        self.sink.log(f"New best validation {early.key} {early.best:.4f} at step {step}; kept as {folder.name} "
                      f"({BEST_FILE}).")

    def restore_best(self) -> bool:
        """Load the best checkpoint's weights into the model (with early stopping on); False when
        there is none, and the model keeps its last weights."""
        import safetensors.torch

        early = self.early
        if early is None:
            return False
        if early.best_checkpoint is None:
            self.sink.log(f"No evaluation gave a finite {early.key}; the test split is scored with the last weights.")
            return False
        device = str(next(self.model.parameters()).device)
        if lora.is_adapted(self.model):
            lora.restore(self.model, early.best_checkpoint)
        else:
            safetensors.torch.load_model(self.model, str(early.best_checkpoint / "model.safetensors"), strict=True,
                                         device=device)
        self.sink.log(f"Scoring the test split with the best checkpoint, {early.best_checkpoint.name} "
                      f"({early.key} {early.best:.4f} at step {early.best_step}).")
        return True
