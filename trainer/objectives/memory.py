"""Objectives of the models with a segment memory: Transformer-XL's causal LM over consecutive
segments (`xl_lm`) and XLNet's permutation LM (`plm`).

Both read the corpus as the papers' batched streams (TextLayout "streams",
trainer.training.data): the stream (documents one after another, each followed by EOS) is cut
into one contiguous part per batch row, and batch k holds segment k of every part, in order.
The Step keeps each layer's memory (the model's `mems`, detached) from one batch to the next,
so row b of a batch continues row b of the previous one; validation keeps its own memory,
started empty at each evaluation, and also scores every segment without memory, so the
dashboard shows how much the memory helps (`perplexity` and `perplexity_no_memory`). The
training memory is checkpointed with the step's state, so a resumed run goes on reading it.

Transformer-XL: a segment of seq_len tokens is labelled with the seq_len tokens that follow
each position (the streams overlap by one token), so the last position predicts the next
segment's first token.

XLNet (Yang et al. 2019, section 2 and appendix A): each row is [A, SEP, B, SEP, CLS], A and B
the segment cut at a random point (token types 0, 1 and 2 for CLS, read through the relative
segment encoding). Partial prediction: spans are chosen as targets, about 1/K of the tokens
(K = `plm_k`, 6 for base): repeatedly a span length n in 1..5 (P(n) proportional to 1/n), a
context of K*n tokens, and n consecutive tokens of it as targets, as the paper's span-based
prediction. The factorisation order puts every other token first (they see each other and no
target) and the targets after them in a random order: a target's query stream sees the context
and the targets before it, its content stream also itself (`perm_mask`, `target_mapping`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from trainer.charts import ORANGE, VALID, ChartSpec, MetricSpec, StatSpec
from trainer.charts import LM_METRICS as LM_CHARTS
from trainer.charts import LM_STATS
from trainer.errors import ConfigError
from trainer.objectives.base import Batch, Objective, Step, StepOutput
from trainer.objectives.denoising import LM_METRICS
from trainer.objectives.examples import Example, SpecialIds, TextLayout, example_rng
from trainer.objectives.lm import LMBatch
from trainer.objectives.masking import IGNORE_INDEX

MAX_SPAN = 5  # XLNet's span lengths: 1 to 5 tokens
PLM_K_BOUNDS = (2.0, 32.0)


# ---------------------------------------------------------------------------- Transformer-XL
@dataclass
class SegmentCollator:
    """Consecutive segments of the batched streams: input_ids (B, seq_len), labels the next tokens."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = 0.15
    seed: int = 0
    masking_unit: str = "token"
    phrase_breaks: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.masking_unit != "token":
            raise ConfigError(f"Transformer-XL's language model masks nothing; it takes no {self.masking_unit!r} "
                              "masking.")

    @property
    def needs_word_starts(self) -> bool:
        return False

    @property
    def layout(self) -> TextLayout:
        return TextLayout("streams", self.seq_len, doc_sep=self.special.eos, overlap=1)

    def __call__(self, examples: Sequence[Example]) -> LMBatch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        rows = np.stack([np.asarray(ex.a, dtype=np.int64) for ex in examples])  # (B, seq_len + 1)
        if rows.shape[1] != self.seq_len + 1:
            raise ValueError(f"a segment has {rows.shape[1]} tokens, not seq_len + 1 = {self.seq_len + 1}")
        ids = torch.from_numpy(rows[:, :-1].copy())
        return LMBatch(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.from_numpy(rows[:, 1:].copy()))


class MemoryStep(Step):
    """Carries the model's memory from batch to batch (one for training, one for validation);
    in validation also scores each batch without memory (`lm_loss_no_memory`, weight 0 in the
    validation loss)."""

    perplexities = {"perplexity": "lm_loss", "perplexity_no_memory": "lm_loss_no_memory"}

    def __init__(self, config: Any, model: Any, device: str):
        super().__init__(config, model, device)
        self.mems: list[torch.Tensor] | None = None
        self.valid_mems: list[torch.Tensor] | None = None

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"lm_loss": 1.0, "lm_loss_no_memory": 0.0}

    def start_validation(self) -> None:
        self.valid_mems = None

    def state_dict(self) -> dict[str, Any]:
        """The training memory, so a resumed run's first batch reads what it would have read."""
        return {"mems": [t.detach().cpu() for t in self.mems]} if self.mems else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mems = state.get("mems")
        self.mems = [t.to(self.device) for t in mems] if mems else None

    def forward(self, batch: Any, mems: list[torch.Tensor] | None, use_mems: bool) -> Any:
        raise NotImplementedError

    def targets(self, batch: Any) -> torch.Tensor:
        return batch.labels

    def __call__(self, batch: Any, *, train: bool) -> StepOutput:
        mems = self.mems if train else self.valid_mems
        if mems is not None and mems[0].shape[0] != batch.input_ids.shape[0]:
            mems = None  # another number of streams: nothing to continue
        out = self.forward(batch, mems, True)
        if train:
            self.mems = out.mems
        else:
            self.valid_mems = out.mems
        targets = self.targets(batch)
        predicted = targets != IGNORE_INDEX
        n = predicted.sum()
        hits = ((out.logits.detach().argmax(-1) == targets) & predicted).sum()
        losses = {"lm_loss": out.loss.detach().float()}
        weights: dict[str, Any] = {"lm_loss": n}
        if not train:
            losses["lm_loss_no_memory"] = self.forward(batch, None, False).loss.detach().float()
            weights["lm_loss_no_memory"] = n
        return StepOutput(out.loss, losses, weights, {"lm_acc": (hits, n)})


class SegmentLMStep(MemoryStep):
    def forward(self, batch: LMBatch, mems: list[torch.Tensor] | None, use_mems: bool) -> Any:
        return self.model(batch.input_ids, labels=batch.labels, mems=mems, use_mems=use_mems)


# ---------------------------------------------------------------------------- XLNet
@dataclass
class PLMBatch(Batch):
    token_type_ids: torch.Tensor   # (B, T) long: 0 = A and its SEP, 1 = B and its SEP, 2 = CLS
    perm_mask: torch.Tensor        # (B, T, T) float, 1 = query i may not see key j
    target_mapping: torch.Tensor   # (B, P, T) float one-hot rows: the position of each target slot
    labels: torch.Tensor           # (B, P) long: each slot's token, -100 for an unused slot
    target_positions: torch.Tensor | None = None  # (B, P) long: each slot's position (0 for an unused one)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The model reads the targets as positions (its fast path, the same numbers as the mapping)."""
        return {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids, "perm_mask": self.perm_mask,
                "target_positions": self.target_positions, "labels": self.labels}


def span_targets(is_special: np.ndarray, *, goal: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions to predict (bool (T,)): spans of n = 1..5 tokens (P(n) ~ 1/n), each inside a
    context of k*n tokens (a random part of it before the span, the rest after), until `goal`
    targets or the end of the row; special positions are never targets."""
    T = len(is_special)
    chosen = np.zeros(T, dtype=bool)
    lengths = np.arange(1, MAX_SPAN + 1)
    p = 1.0 / lengths
    p /= p.sum()
    cur = n_chosen = 0
    while cur < T and n_chosen < goal:
        n = min(int(rng.choice(lengths, p=p)), goal - n_chosen)
        context = k * n
        left = int(rng.integers(context))
        begin = cur + left
        end = begin + n
        if end > T:
            break
        span = np.arange(begin, end)
        span = span[~is_special[span]]
        chosen[span] = True
        n_chosen += len(span)
        cur = end + (context - left)
    return chosen


def factorisation_masks(targets: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(perm_mask (T, T) float, order (m,) target positions in their factorisation order): the
    non-targets come first, the targets after them in a random order."""
    order = rng.permutation(np.flatnonzero(targets))
    return order_mask(order, len(targets)), order


def order_mask(order: np.ndarray | Sequence[int], length: int) -> np.ndarray:
    """perm_mask (T, T) float of a factorisation order whose last positions are `order` (the
    targets, in order) and whose other positions come first: query i may not see key j when j
    is a target at or after i in the order (so the context sees no target)."""
    order = np.asarray(order, dtype=np.int64)
    targets = np.zeros(length, dtype=bool)
    targets[order] = True
    rank = np.full(length, -1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    return (targets[None, :] & (rank[None, :] >= rank[:, None])).astype(np.float32)


@dataclass
class PLMCollator:
    """XLNet's rows with their factorisation orders (see the module docstring)."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = 0.15
    seed: int = 0
    masking_unit: str = "token"
    phrase_breaks: np.ndarray | None = field(default=None, repr=False)
    plm_k: int = 6

    objective: ClassVar[str] = "plm"

    def __post_init__(self) -> None:
        if self.masking_unit != "token":
            raise ConfigError(f"XLNet's permutation LM masks nothing; it takes no {self.masking_unit!r} masking.")
        if self.seq_len < 8:
            raise ConfigError(f"XLNet's rows need a seq_len of at least 8 (A, B, two [SEP] and [CLS]), "
                              f"not {self.seq_len}.")
        self.plm_k = int(self.plm_k)
        if not PLM_K_BOUNDS[0] <= self.plm_k <= PLM_K_BOUNDS[1]:
            raise ConfigError(f"plm_k must be between {PLM_K_BOUNDS[0]:g} and {PLM_K_BOUNDS[1]:g}, not {self.plm_k}.")

    @property
    def num_predict(self) -> int:
        """Target slots per row: seq_len / K (85 of 512 for K = 6, the paper's)."""
        return max(1, self.seq_len // self.plm_k)

    @property
    def needs_word_starts(self) -> bool:
        return False

    @property
    def layout(self) -> TextLayout:
        return TextLayout("streams", self.seq_len - 3, doc_sep=self.special.eos)

    def row(self, ex: Example) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, token types, perm_mask, target positions in order, is_target) of one example."""
        rng = example_rng(self.seed, ex.variant, ex.uid)
        text = np.asarray(ex.a, dtype=np.int64)
        L = len(text)
        if L < 2:
            raise ValueError("an XLNet row needs at least two tokens of text")
        cut = int(rng.integers(1, L))
        sp = self.special
        ids = np.concatenate([text[:cut], [sp.sep], text[cut:], [sp.sep, sp.cls]])
        types = np.concatenate([np.zeros(cut + 1), np.ones(L - cut + 1), [2]]).astype(np.int64)
        is_special = np.zeros(len(ids), dtype=bool)
        is_special[[cut, len(ids) - 2, len(ids) - 1]] = True
        targets = span_targets(is_special, goal=self.num_predict, k=self.plm_k, rng=rng)
        perm, order = factorisation_masks(targets, rng)
        return ids, types, perm, order, targets

    def __call__(self, examples: Sequence[Example]) -> PLMBatch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        B, T, P = len(examples), self.seq_len, self.num_predict
        input_ids = np.full((B, T), self.special.pad, dtype=np.int64)
        attention = np.zeros((B, T), dtype=np.int64)
        types = np.zeros((B, T), dtype=np.int64)
        perm = np.zeros((B, T, T), dtype=np.float32)
        mapping = np.zeros((B, P, T), dtype=np.float32)
        labels = np.full((B, P), IGNORE_INDEX, dtype=np.int64)
        for b, ex in enumerate(examples):
            ids, tt, pm, order, _ = self.row(ex)
            n = len(ids)
            input_ids[b, :n], attention[b, :n], types[b, :n], perm[b, :n, :n] = ids, 1, tt, pm
            if n < T:  # padding (a short stream) is hidden from every query
                perm[b, :, n:] = 1.0
            for slot, pos in enumerate(order[:P]):
                mapping[b, slot, pos] = 1.0
                labels[b, slot] = ids[pos]
        mapping_t = torch.from_numpy(mapping)
        return PLMBatch(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention),
                        token_type_ids=torch.from_numpy(types), perm_mask=torch.from_numpy(perm),
                        target_mapping=mapping_t, labels=torch.from_numpy(labels),
                        target_positions=mapping_t.argmax(-1))


class PermutationLMStep(MemoryStep):
    def forward(self, batch: PLMBatch, mems: list[torch.Tensor] | None, use_mems: bool) -> Any:
        return self.model(**batch.model_inputs(), mems=mems, use_mems=use_mems)


# ---------------------------------------------------------------------------- registration
MEMORY_CHARTS = (
    *LM_CHARTS,
    MetricSpec("perplexity_no_memory", "without memory", chart="memory_perplexity", splits=VALID, color=ORANGE),
    MetricSpec("perplexity", "with memory", chart="memory_perplexity", splits=VALID),
)
MEMORY_CHART_SPECS = (ChartSpec("memory_perplexity", "Validation perplexity with and without memory", order=25,
                                scale="log", legend="metric", per_token=True),)
MEMORY_STATS = (*LM_STATS, StatSpec("perplexity_no_memory", "perplexity without memory",
                                    metric="perplexity_no_memory", digits=1, order=31))
MEMORY_METRICS = (*LM_METRICS, "lm_loss_no_memory", "perplexity_no_memory")

XL_LM = Objective(
    name="xl_lm",
    label="Causal LM over segments with memory (Transformer-XL)",
    help="Next-token prediction on consecutive segments of seq_len tokens: each batch row continues the "
         "row of the previous batch, whose hidden states (no gradient) the model reads as memory.",
    collator=SegmentCollator, step=SegmentLMStep, metrics=MEMORY_METRICS,
    charts=MEMORY_CHARTS, chart_specs=MEMORY_CHART_SPECS, stats=MEMORY_STATS,
    collator_label="Segments with memory (Transformer-XL)",
    inspector_note="Transformer-XL: every token is predicted from the tokens before it and the memory of the "
                   "row's previous segment (this row continues the same row of the previous batch).",
)

PLM = Objective(
    name="plm",
    label="Permutation LM (XLNet)",
    help="Predict about 1/K of the tokens (spans, K = plm_k) in a random factorisation order, each from the "
         "context and the targets before it, through the query stream; consecutive segments with memory.",
    collator=PLMCollator, step=PermutationLMStep, metrics=MEMORY_METRICS,
    charts=MEMORY_CHARTS, chart_specs=MEMORY_CHART_SPECS, stats=MEMORY_STATS,
    settings={"plm_k": PLM_K_BOUNDS},
    collator_settings=("plm_k",),
    collator_label="Permutation LM (XLNet)",
    inspector_note="XLNet: the targets (numbered in their factorisation order) are predicted last, each from the "
                   "other tokens and the targets numbered before it; no token is replaced.",
)
