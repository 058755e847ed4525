"""What every objective is made of: its spec, its collator, its batch type and its step.

An `Objective` is one pre-training objective as the launch form, the validator, the data
pipeline, the trainer and the dashboard see it. It names

- its spec: label and help for the form, whether it reads T5's sentinel tokens, whether its
  examples are sentence pairs it builds itself (`pairs`, a SentencePairs: the instance table,
  each example's flag, the head that learns it and what the head's classes mean), whether its
  model fills masks (the explorer's fill-mask tool), the RunConfig settings it reads;
- its data: a `Collator` class (any class that satisfies the `Collator` protocol: examples in,
  one of its `Batch` types out), the masking units it takes (the first is its default);
- its step: a `Step` class (forward pass, loss and the metric counts of a batch);
- its metrics: the keys its step reports, and how the dashboard charts them (`charts`,
  `stats`, `chart_specs`; trainer.charts).

Objectives combine: MLM is a `base` objective that another one (NSP, SOP, SBO, RTD,
distillation, UniLM's modes) may extend; such a set is trained with the collator and step of
the objective that extends it (`trainer.objectives.resolve`). Every other objective trains alone.

A Batch is a dataclass of tensors; each objective family has its own (masked-LM batches carry
MLM labels and token types, a causal LM's only its labels), and a model's forward arguments
come from `model_inputs()`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from trainer.charts import ChartSpec, MetricSpec, StatSpec

if TYPE_CHECKING:
    from trainer.objectives.examples import Example, SentencePairs
    from trainer.config import RunConfig


# ---------------------------------------------------------------------------- batches
@dataclass
class Batch:
    """A model batch: the fields every batch has; objective families add their own."""

    input_ids: torch.Tensor              # (B, T) long
    attention_mask: torch.Tensor         # (B, T) long, 1 = real token (padding mask)

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """A batch with `fn` applied to every tensor that is set."""
        return dataclasses.replace(self, **{f.name: fn(getattr(self, f.name)) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})

    def to(self, device: str | torch.device) -> "Batch":
        return self.map(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> "Batch":
        return self.map(lambda t: t.pin_memory())

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of the model's forward (models_lib names)."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    @property
    def n_tokens(self) -> int:
        """Real (non-padding) tokens in the batch (what tokens/s counts)."""
        return int(self.attention_mask.sum())

    @property
    def n_positions(self) -> int:
        """Positions the model computes, padding included (n_tokens / n_positions is the fill)."""
        return int(self.input_ids.numel())

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def varying_dims(self) -> dict[str, tuple[int, ...]]:
        """{field: its dims whose size changes from batch to batch}: what a compiled model marks
        dynamic up front (trainer.training.speedups.mark_dynamic), so that a new size does not
        compile the model again. None here: a batch of fixed shapes (full rows of seq_len)."""
        return {}


@runtime_checkable
class Collator(Protocol):
    """Examples in, one batch out. Built with `Objective.build_collator`'s keyword arguments.

    A collator that wants raw text rather than sentence-based examples says how in `layout`
    (a TextLayout; None or absent for sentence-based examples)."""

    seq_len: int

    @property
    def needs_word_starts(self) -> bool: ...

    def __call__(self, examples: Sequence["Example"]) -> Batch: ...


# ---------------------------------------------------------------------------- steps
@dataclass
class StepOutput:
    loss: torch.Tensor                                    # what backward() uses (0-dim)
    losses: dict[str, torch.Tensor]                       # named parts, each a mean over its `weights`
    weights: dict[str, torch.Tensor | float]              # what each mean is over (targets, sequences, tokens)
    ratios: dict[str, tuple[torch.Tensor | float, torch.Tensor | float]] = field(default_factory=dict)
                                                          # name -> (hits, total), e.g. accuracies


class Step:
    """One training step of an objective: the forward pass, the loss and the metric counts of a
    batch. Subclasses say how; `perplexities` and `loss_weights` tell validation how to
    rebuild the loss and which perplexities to report."""

    # metric -> the loss it is exp() of ("loss": the total), reported in validation
    perplexities: ClassVar[dict[str, str]] = {}

    def __init__(self, config: "RunConfig", model: nn.Module, device: str):
        self.config, self.model, self.device = config, model, device

    @property
    def loss_weights(self) -> dict[str, float]:
        """How the named losses add up to the loss (validation recomputes it from their means)."""
        return {}

    def __call__(self, batch: Any, *, train: bool) -> StepOutput:
        raise NotImplementedError

    # Extra state to checkpoint (a sampler's RNG); JSON/tensors only, loads with weights_only=True.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def start_validation(self) -> None:
        """Called before each evaluation."""

    def finish_validation(self) -> dict[str, float]:
        """Called after each evaluation: metrics over the whole validation set that per-batch
        ratios cannot give (F1, MCC, correlations), which a step gathers while it is called with
        train=False. Merged into the validation values."""
        return {}


# ---------------------------------------------------------------------------- objectives
@dataclass(frozen=True)
class Objective:
    """One objective; see the module docstring."""

    name: str
    label: str
    help: str
    collator: type                      # a class satisfying Collator
    step: type[Step]
    metrics: tuple[str, ...] = ()       # the metric keys its step reports
    charts: tuple[MetricSpec, ...] = ()  # how the dashboard draws them (trainer.charts)
    stats: tuple[StatSpec, ...] = ()     # the numbers it adds above the charts
    chart_specs: tuple[ChartSpec, ...] = ()  # charts of its own that trainer.charts.CHARTS lacks
    units: tuple[str, ...] = ("token",)  # masking units it takes; the first is its default
    pairs: SentencePairs | None = None   # its examples are sentence pairs made as this says (the table,
                                         # the flag, its head and what the head's classes mean); None:
                                         # single segments or raw text
    base: bool = False                   # another objective may extend it (MLM)
    requires: tuple[str, ...] = ()       # objectives it is trained with (NSP needs MLM)
    combines: tuple[str, ...] = ()       # base objectives it may be trained with (MLM)
    families: tuple[str, ...] = ()       # families that may train it besides those that list it
                                         # (a new objective for an existing family says so here)
    needs_sentinels: bool = False        # reads T5's sentinel tokens (<extra_id_0>, ...) from the tokenizer
    packs: bool = False                  # its step takes packed batches (trainer.objectives.packing): the
                                         # run's batches are packed, so padding is not computed
    settings: dict[str, tuple[float, float]] = field(default_factory=dict)  # the RunConfig fields it reads
                                         # (beyond the common ones) -> their inclusive bounds
    collator_settings: tuple[str, ...] = ()  # RunConfig fields (of `settings`) its collator takes by name
    collator_label: str = ""             # how error messages name its batches ("MLM + NSP (BERT)")
    prepare: Callable[..., Any] | None = None  # (config, model, *, vocab_size, data_dir, device) -> the
                                               # Step's extra keyword arguments (a teacher)
    inspect: Callable[..., Any] | None = None  # (checkpoint_dir, batch, tokenizer, seed) -> per example,
                                               # what the run's model makes of it (the masking inspector)
    fills_masks: bool = False            # the model it trains predicts masked tokens: the explorer's
                                         # fill-mask tool asks checkpoints of runs with it (MLM)
    inspector_note: str = ""             # what the masking inspector says of its batches when they hide
                                         # nothing to show (the LMs: how each token is predicted)
    head_flops: Callable[..., float] | None = None  # (model config, Workload) -> forward FLOPs per input token
                                         # of the head it adds to an encoder family's model (NSP's pair
                                         # classifier, SBO's span head); trainer.training.flops counts it

    @property
    def pair_examples(self) -> bool:
        """Its examples are sentence pairs it builds itself (so single-segment packing does not apply)."""
        return self.pairs is not None

    def build_collator(self, *, special: Any, seq_len: int, masking_unit: str | None = None,
                       mask_prob: float = 0.15, seed: int = 0, phrase_breaks: Any = None,
                       **options: Any) -> Collator:
        from trainer.errors import ConfigError

        unit = masking_unit or self.units[0]
        if unit not in self.units:
            raise ConfigError(f"{self.collator_label or self.label} cannot use {unit!r} masking; it takes "
                              f"{', '.join(self.units)}.")
        return self.collator(special=special, seq_len=seq_len, mask_prob=mask_prob, seed=seed,
                             masking_unit=unit, phrase_breaks=phrase_breaks, **options)
