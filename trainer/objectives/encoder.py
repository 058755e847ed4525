"""The encoder objectives: masked LM and what extends it.

- `mlm` (`MLMCollator`): single segments, `[CLS] sentences... [SEP]`, MLM labels. Its masking
  unit (trainer.objectives.masking: "token", "word", "phrase", "ngram", "span") is an option,
  so whole-word (BERT-wwm), phrase (ERNIE), n-gram (ALBERT) and span (SpanBERT) masking work
  for every collator below. ELECTRA's generator input and DistilBERT's student input are
  this batch (trainer.objectives.electra, trainer.objectives.distill).
- `nsp` (`NSPCollator`): pairs `[CLS] A [SEP] B [SEP]`, segment ids 0/1, MLM + NSP labels.
- `sop` (`SOPCollator`): the same layout over two consecutive segments of one document,
  swapped half the time (ALBERT's sentence-order prediction); MLM + SOP labels.
- `sbo` (`SpanBERTCollator`): single segments with span masking, MLM labels + span-boundary pairs.
- `unilm` (`UniLMCollator`): consecutive pairs, each example in one of UniLM's four attention
  modes, with a (B, T, T) self-attention mask; MLM labels (seq2seq: in the target only).

Their batches are `MaskedBatch`es (plus the fields of the objective that extends MLM); the
losses are computed by the model (models_lib heads) and collected by `PreTrainingStep`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError
from trainer.flop_units import matmul_flops, output_vocab
from trainer.charts import MetricSpec, StatSpec
from trainer.objectives.base import Batch, Objective, Step, StepOutput
from trainer.objectives.examples import Example, SentencePairs, SpecialIds, example_rng, truncate_pair_slices
from trainer.objectives.packing import PackableBatch
from trainer.objectives.masking import (
    IGNORE_INDEX, MASKING_UNITS, SEQ2SEQ, UNILM_MODE_PROBS, Masker, unilm_attention_masks,
)

NSP_IS_NEXT, NSP_NOT_NEXT = 0, 1  # Hugging Face's convention
SOP_ORIGINAL, SOP_SWAPPED = 0, 1  # the same convention: 0 = the segments in their document's order

# ---------------------------------------------------------------------------- batches
@dataclass
class MaskedBatch(PackableBatch):
    """A masked-LM batch; the objectives that extend MLM add their fields in a subclass. Packed
    (trainer.objectives.packing), its per-token fields are (R, L)."""

    token_type_ids: torch.Tensor         # (B, T) long, 0 = segment A, 1 = segment B
    mlm_labels: torch.Tensor             # (B, T) long, -100 = not predicted
    span_ids: torch.Tensor | None = None  # (B, T) long: masked unit (word, phrase, n-gram, span)
                                          # of each token, numbered per row; -1 = none. Not a
                                          # model input (for inspection).
    # Known on the host when collated, so that the model need not ask the device (a sync in every
    # step, and a graph break when compiled):
    mlm_positions: torch.Tensor | None = None  # (M,) long: flat indices (row * T + column) of the
                                               # positions with an MLM label, row-major (the MLM head's)
    full: bool = False                     # every row is real to its end: the model is given no mask

    def varying_dims(self) -> dict[str, tuple[int, ...]]:
        """A packed batch's rows and their length (R, L) and its real tokens (N) change from batch
        to batch; a padded batch's length (its longest example) too, and its rows are marked with
        it: a batch that packing leaves as it is (no row to save) then shares the graphs after the
        backbone with the packed ones, where B rows stand for R. The examples (B) do not change."""
        dims = (0, 1)
        out: dict[str, tuple[int, ...]] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, torch.Tensor) or f.name in ("starts", "real_tokens", "mlm_positions"):
                continue
            if value.shape[:2] == self.input_ids.shape:  # per token (B, T), or per token pair (B, T, T: UniLM's)
                out[f.name] = dims + ((2,) if value.dim() == 3 else ())
            elif f.name in ("sbo_pairs", "sbo_labels"):  # one row per masked span token
                out[f.name] = (0,)
        for name in ("real_tokens", "mlm_positions"):
            if getattr(self, name) is not None:
                out[name] = (0,)
        return out

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """input_ids, attention_mask (None for a full batch), token_type_ids and mlm_labels
        (models_lib names), `packed` for a packed batch and `mlm_positions` where known."""
        inputs = {"input_ids": self.input_ids, "attention_mask": None if self.full else self.attention_mask,
                  "token_type_ids": self.token_type_ids, "mlm_labels": self.mlm_labels}
        if self.segments is not None:
            inputs["packed"] = self.packed
        if self.mlm_positions is not None:
            inputs["mlm_positions"] = self.mlm_positions
        return inputs


@dataclass
class NSPBatch(MaskedBatch):
    nsp_labels: torch.Tensor | None = None   # (B,) long, 0 = IsNext, 1 = NotNext

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {**super().model_inputs(), "nsp_labels": self.nsp_labels}


@dataclass
class SOPBatch(MaskedBatch):
    sop_labels: torch.Tensor | None = None   # (B,) long, 0 = original order, 1 = swapped

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {**super().model_inputs(), "sop_labels": self.sop_labels}


@dataclass
class SpanBatch(MaskedBatch):
    sbo_pairs: torch.Tensor | None = None    # (N, 5) long, one row per masked span token:
                                             # batch row, left boundary s-1, right boundary e+1,
                                             # target position, position in its span (0-based)
    sbo_labels: torch.Tensor | None = None   # (N,) long, the original token at each target

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {**super().model_inputs(), "sbo_pairs": self.sbo_pairs, "sbo_labels": self.sbo_labels}


@dataclass
class UniLMBatch(MaskedBatch):
    self_attention_mask: torch.Tensor | None = None  # (B, T, T) bool, True = query may attend key
    lm_mode: torch.Tensor | None = None      # (B,) long, UniLM mode (trainer.objectives.masking.UNILM_MODES)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The (B, T, T) self-attention mask of each example's mode as the attention mask."""
        return {**super().model_inputs(), "attention_mask": self.self_attention_mask}


@dataclass
class Encoded:
    """One example laid out as a sequence with its special tokens, before masking."""

    ids: np.ndarray                      # (T,) int64
    types: np.ndarray                    # (T,) int64
    starts: np.ndarray | None = None     # (T,) word-start flags, None when not needed
    maskable: np.ndarray | None = None   # (T,) bool: where masks may go (None: every ordinary token)
    source_len: int = 0                  # UniLM: length of [CLS] A [SEP]
    mode: int = 0                        # UniLM mode


@dataclass
class Row:
    """One corrupted example."""

    inputs: np.ndarray
    types: np.ndarray
    labels: np.ndarray
    units: np.ndarray                    # (U, 4) masked units, see trainer.objectives.masking.Masked
    encoded: Encoded


def _flags(starts: np.ndarray | None, part: slice | int, needed: bool) -> np.ndarray | None:
    if not needed:
        return None
    if starts is None:
        raise ValueError("this masking unit needs word boundaries, and the example has none (a_starts/b_starts)")
    return starts[:part] if isinstance(part, int) else starts[part]


@dataclass
class MLMCollator:
    """Masked-LM batches of single segments: `[CLS] tokens [SEP]`, padded to the longest.

    masking_unit picks how tokens are chosen (trainer.objectives.masking.MASKING_UNITS); every unit but
    "token" needs word-start flags on the examples. phrase_breaks (a bool per token id, from
    trainer.objectives.masking.phrase_break_table) tells "phrase" masking where phrases end."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = 0.15
    seed: int = 0
    masking_unit: str = "token"
    phrase_breaks: np.ndarray | None = field(default=None, repr=False)

    batch_type: ClassVar[type[MaskedBatch]] = MaskedBatch

    def __post_init__(self) -> None:
        if self.masking_unit not in MASKING_UNITS:
            raise ConfigError(f"Unknown masking unit {self.masking_unit!r}; choose one of {', '.join(MASKING_UNITS)}.")
        self.masker = Masker(self.special, self.masking_unit, self.mask_prob, self.phrase_breaks)

    @property
    def needs_word_starts(self) -> bool:
        return self.masker.needs_words

    def encode(self, ex: Example, rng: np.random.Generator) -> Encoded:
        """One example as a sequence with its special tokens."""
        n = self.seq_len - 2
        a = ex.a[:n]
        ids = np.concatenate([[self.special.cls], a, [self.special.sep]]).astype(np.int64)
        starts = _flags(ex.a_starts, n, self.needs_word_starts)
        if starts is not None:
            starts = np.concatenate([[1], starts, [1]]).astype(np.uint8)
        return Encoded(ids, np.zeros_like(ids), starts)

    def corrupt(self, ex: Example) -> Row:
        rng = example_rng(self.seed, ex.variant, ex.uid)
        enc = self.encode(ex, rng)
        m = self.masker(enc.ids, rng, word_starts=enc.starts, maskable=enc.maskable)
        return Row(m.inputs, enc.types, m.labels, m.units, enc)

    def __call__(self, examples: Sequence[Example]) -> Batch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        rows = [self.corrupt(ex) for ex in examples]
        T = max(len(r.inputs) for r in rows)
        B = len(rows)
        input_ids = np.full((B, T), self.special.pad, dtype=np.int64)
        attention = np.zeros((B, T), dtype=np.int64)
        types = np.zeros((B, T), dtype=np.int64)
        labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
        for i, r in enumerate(rows):
            n = len(r.inputs)
            input_ids[i, :n] = r.inputs
            attention[i, :n] = 1
            types[i, :n] = r.types
            labels[i, :n] = r.labels
        batch = self.batch_type(*(torch.from_numpy(a) for a in (input_ids, attention, types, labels)),
                                mlm_positions=torch.from_numpy(np.flatnonzero(labels != IGNORE_INDEX)),
                                full=bool(attention.all()))
        if self.masking_unit != "token":
            batch.span_ids = torch.from_numpy(_span_ids(rows, T))
        batch = self.finish(batch, examples, rows)
        self.check(batch, B)
        return batch

    def finish(self, batch: MaskedBatch, examples: Sequence[Example], rows: Sequence[Row]) -> MaskedBatch:
        """Add the objective's own fields to the padded batch."""
        return batch

    def check(self, batch: MaskedBatch, n: int) -> None:
        B, T = batch.input_ids.shape
        if B != n or T > self.seq_len:
            raise ValueError(f"collated batch has shape {(B, T)}, expected ({n}, <= {self.seq_len})")
        for name in ("attention_mask", "token_type_ids", "mlm_labels"):
            if getattr(batch, name).shape != (B, T):
                raise ValueError(f"{name} has shape {tuple(getattr(batch, name).shape)}, expected {(B, T)}")
        for name in ("nsp_labels", "sop_labels", "lm_mode"):
            t = getattr(batch, name, None)
            if t is not None and t.shape != (B,):
                raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {(B,)}")
        if batch.span_ids is not None and batch.span_ids.shape != (B, T):
            raise ValueError(f"span_ids has shape {tuple(batch.span_ids.shape)}, expected {(B, T)}")


def _span_ids(rows: Sequence[Row], T: int) -> np.ndarray:
    """(B, T) int64: index of the masked unit covering each token (per row), -1 elsewhere."""
    out = np.full((len(rows), T), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        lo, hi = r.units[:, 0], r.units[:, 1]
        n = hi - lo
        out[i, _positions(lo, hi)] = np.repeat(np.arange(len(lo)), n)
    return out


def _positions(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Every position of the ranges [lo[k], hi[k]), concatenated."""
    n = hi - lo
    return np.repeat(lo, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)


@dataclass
class NSPCollator(MLMCollator):
    """Next-sentence-prediction pairs (plus MLM): `[CLS] A [SEP] B [SEP]`, types 0 then 1."""

    batch_type: ClassVar[type[MaskedBatch]] = NSPBatch

    def encode(self, ex: Example, rng: np.random.Generator) -> Encoded:
        if ex.b is None:
            raise ValueError(f"{type(self).__name__} examples need a B segment")
        sa, sb = truncate_pair_slices(len(ex.a), len(ex.b), self.seq_len - 3, rng)
        a, b = ex.a[sa], ex.b[sb]
        s = self.special
        ids = np.concatenate([[s.cls], a, [s.sep], b, [s.sep]]).astype(np.int64)
        types = np.zeros_like(ids)
        types[len(a) + 2:] = 1
        starts = None
        if self.needs_word_starts:
            fa, fb = _flags(ex.a_starts, sa, True), _flags(ex.b_starts, sb, True)
            starts = np.concatenate([[1], fa, [1], fb, [1]]).astype(np.uint8)
        return Encoded(ids, types, starts, source_len=len(a) + 2)

    def finish(self, batch: NSPBatch, examples: Sequence[Example], rows: Sequence[Row]) -> NSPBatch:
        batch.nsp_labels = torch.tensor([NSP_NOT_NEXT if ex.is_random_next else NSP_IS_NEXT for ex in examples],
                                        dtype=torch.long)
        return batch


@dataclass
class SOPCollator(NSPCollator):
    """ALBERT's sentence-order prediction (plus MLM): two consecutive segments of one document
    as `[CLS] A [SEP] B [SEP]`; sop_labels 0 when A comes first in the document, 1 when the
    instance table swapped them (build_sop_instances). Truncation as for NSP."""

    batch_type: ClassVar[type[MaskedBatch]] = SOPBatch

    def finish(self, batch: Batch, examples: Sequence[Example], rows: Sequence[Row]) -> Batch:
        batch.sop_labels = torch.tensor([SOP_SWAPPED if ex.swapped else SOP_ORIGINAL for ex in examples],
                                        dtype=torch.long)
        return batch


@dataclass
class SpanBERTCollator(MLMCollator):
    """SpanBERT: single segments (no NSP) with span masking, plus the span-boundary objective's
    targets. For every masked token t of a span covering tokens s..e (positions in the
    padded batch), one row of sbo_pairs = (batch row, s-1, e+1, t, t-s) and sbo_labels =
    its original token, in row-major token order. Spans never touch
    (trainer.objectives.masking.choose_spans), so the boundary tokens s-1 and e+1 are always unmasked
    ([CLS]/[SEP] at the edges).

    Span lengths are counted in words, relative positions in tokens: a span token with
    t-s >= sbo_max_position (the rows of the SBO head's position table, models_lib's
    SpanBertConfig.max_span_length) gets no SBO row, only its MLM label, as SpanBERT's
    max_pair_targets does."""

    masking_unit: str = "span"
    sbo_max_position: int = 10

    batch_type: ClassVar[type[MaskedBatch]] = SpanBatch

    def __post_init__(self) -> None:
        if self.masking_unit != "span":
            raise ConfigError("The span boundary objective (SpanBERT) needs span masking (masking_unit \"span\").")
        if self.sbo_max_position < 1:
            raise ConfigError("sbo_max_position must be at least 1.")
        super().__post_init__()

    def finish(self, batch: Batch, examples: Sequence[Example], rows: Sequence[Row]) -> Batch:
        parts = []
        for b, r in enumerate(rows):
            lo, hi = r.units[:, 0], r.units[:, 1]
            n = hi - lo
            t = _positions(lo, hi)
            first = np.repeat(lo, n)
            part = np.stack([np.full_like(t, b), first - 1, np.repeat(hi, n), t, t - first], axis=1)
            parts.append(part[part[:, 4] < self.sbo_max_position])
        pairs = torch.from_numpy(np.concatenate(parts).astype(np.int64).reshape(-1, 5))
        batch.sbo_pairs = pairs
        batch.sbo_labels = batch.mlm_labels[pairs[:, 0], pairs[:, 3]].clone()
        return batch

    def check(self, batch: Batch, n: int) -> None:
        super().check(batch, n)
        N = batch.sbo_pairs.shape[0]
        if batch.sbo_pairs.shape != (N, 5) or batch.sbo_labels.shape != (N,):
            raise ValueError(f"sbo_pairs {tuple(batch.sbo_pairs.shape)} / sbo_labels "
                             f"{tuple(batch.sbo_labels.shape)} must be (N, 5) / (N,)")
        if N > int((batch.mlm_labels != IGNORE_INDEX).sum()) or (batch.sbo_labels == IGNORE_INDEX).any():
            raise ValueError("sbo_pairs point at positions without an MLM label")


@dataclass
class UniLMCollator(MLMCollator):
    """UniLM: every example is a pair of consecutive segments `[CLS] A [SEP] B [SEP]` (types 0/1)
    trained in one of four self-attention modes, drawn per example with probabilities 1/3
    bidirectional, 1/3 seq2seq (A = source, B = target), 1/6 left-to-right, 1/6 right-to-left.
    MLM masking as configured, except that seq2seq examples are masked in the target only.

    Emits self_attention_mask (B, T, T) bool (trainer.objectives.masking.unilm_attention_masks, built
    by models_lib.core.masks) and lm_mode (B,) (ids into trainer.objectives.masking.UNILM_MODES).
    Simplifications: the unidirectional modes also use the pair layout, and there is no NSP
    for the bidirectional mode (UniLM adds one there)."""

    batch_type: ClassVar[type[MaskedBatch]] = UniLMBatch

    def encode(self, ex: Example, rng: np.random.Generator) -> Encoded:
        mode = int(rng.choice(len(UNILM_MODE_PROBS), p=UNILM_MODE_PROBS))
        enc = NSPCollator.encode(self, ex, rng)
        enc.mode = mode
        if mode == SEQ2SEQ:
            enc.maskable = np.arange(len(enc.ids)) >= enc.source_len
        return enc

    def finish(self, batch: Batch, examples: Sequence[Example], rows: Sequence[Row]) -> Batch:
        modes = torch.tensor([r.encoded.mode for r in rows], dtype=torch.long)
        sources = torch.tensor([r.encoded.source_len for r in rows], dtype=torch.long)
        batch.self_attention_mask = unilm_attention_masks(modes, batch.attention_mask, sources)
        batch.lm_mode = modes
        return batch

    def check(self, batch: Batch, n: int) -> None:
        super().check(batch, n)
        B, T = batch.input_ids.shape
        m = batch.self_attention_mask
        if m is None or m.shape != (B, T, T) or m.dtype != torch.bool:
            raise ValueError(f"self_attention_mask must be a ({B}, {T}, {T}) bool tensor")


# ---------------------------------------------------------------------------- objectives -> collators


# ---------------------------------------------------------------------------- the step
class PreTrainingStep(Step):
    """BERT-style models whose forward takes the batch's model inputs and returns a models_lib
    PreTrainingOutput; the losses and accuracies of the heads present are collected."""

    perplexities = {"perplexity": "mlm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, "nsp_loss": 1.0, "sop_loss": 1.0, "sbo_loss": 1.0}

    def inputs(self, batch: MaskedBatch) -> dict[str, torch.Tensor]:
        inputs = batch.model_inputs()
        if not getattr(self.model.config, "type_vocab_size", 2):
            inputs["token_type_ids"] = None  # DistilBERT has no token types (single segments only)
        return inputs

    def __call__(self, batch: MaskedBatch, *, train: bool) -> StepOutput:
        out = self.model(**self.inputs(batch))
        return collect(out, batch)


def collect(out: Any, batch: MaskedBatch) -> StepOutput:
    """Losses and accuracies of every head present in a PreTrainingOutput."""
    losses: dict[str, torch.Tensor] = {}
    weights: dict[str, torch.Tensor | float] = {}
    ratios: dict[str, tuple[torch.Tensor | float, torch.Tensor | float]] = {}

    def add(name: str, loss: torch.Tensor | None, logits: torch.Tensor | None, targets: torch.Tensor | None) -> None:
        if loss is None or logits is None or targets is None:
            return
        n = targets.numel()
        losses[f"{name}_loss"] = loss.detach().float()
        weights[f"{name}_loss"] = float(n)
        ratios[f"{name}_acc"] = ((logits.detach().argmax(-1) == targets).sum(), float(n))

    add("mlm", out.mlm_loss, out.mlm_logits, out.mlm_targets)
    add("nsp", out.nsp_loss, out.nsp_logits, getattr(batch, "nsp_labels", None))
    add("sop", getattr(out, "sop_loss", None), getattr(out, "sop_logits", None), getattr(batch, "sop_labels", None))
    add("sbo", getattr(out, "sbo_loss", None), getattr(out, "sbo_logits", None), getattr(out, "sbo_targets", None))
    return StepOutput(out.loss, losses, weights, ratios)


# ---------------------------------------------------------------------------- the objectives
ALL_UNITS = tuple(MASKING_UNITS)

MLM = Objective(
    name="mlm",
    label="Masked language modelling (MLM)",
    help="15% of the tokens are chosen; of those 80% become [MASK], 10% a random token and "
         "10% stay unchanged. The model predicts the original tokens.",
    collator=MLMCollator, step=PreTrainingStep, units=ALL_UNITS, base=True,
    packs=True, fills_masks=True,
    metrics=("mlm_loss", "mlm_acc", "perplexity"),
    collator_label="MLM (BERT without NSP, RoBERTa)",
    charts=(
        MetricSpec("mlm_acc", "MLM accuracy", chart="mlm_acc"),
    ),
    stats=(
        StatSpec("mlm_acc", "MLM accuracy", metric="mlm_acc", splits=("valid", "train"), format="percent", digits=1,
                 order=40),
    ),
)

def pair_head_flops(c: Any, w: Any) -> float:
    """The pooler and the two-way pair classifier, once a row (none without a pooler)."""
    return (matmul_flops(c.hidden_size, c.hidden_size) + matmul_flops(c.hidden_size, 2)) / w.seq_len \
        if c.use_pooler else 0.0


def span_head_flops(c: Any, w: Any) -> float:
    """SBO's head at the predicted positions: boundary pair and position in, then the output layer."""
    H = c.hidden_size
    E = c.embedding_size or H
    return w.predicted * (matmul_flops(3 * H, H) + matmul_flops(H, E) + matmul_flops(E, output_vocab(c)))


NSP = Objective(
    name="nsp",
    label="Next sentence prediction (NSP)",
    help="Inputs are pairs [CLS] A [SEP] B [SEP]; half the time B really follows A in the "
         "document, half the time it comes from another document. The model tells which.",
    collator=NSPCollator, step=PreTrainingStep, units=ALL_UNITS, requires=("mlm",),
    pairs=SentencePairs(random_next=True, head="nsp", meanings=("IsNext", "NotNext")), combines=("mlm",),
    packs=True,
    metrics=("nsp_loss", "nsp_acc"),
    collator_label="MLM + NSP (BERT)", head_flops=pair_head_flops,
    charts=(
        MetricSpec("nsp_acc", "NSP accuracy", chart="nsp_acc"),
    ),
)

SOP = Objective(
    name="sop",
    label="Sentence order prediction (SOP)",
    help="Inputs are two consecutive segments of one document, [CLS] A [SEP] B [SEP]; half the "
         "time they are swapped. The model tells whether they are in their original order (ALBERT).",
    collator=SOPCollator, step=PreTrainingStep, units=ALL_UNITS, requires=("mlm",),
    pairs=SentencePairs(swap_prob=0.5, head="sop", meanings=("in order", "swapped")), combines=("mlm",),
    packs=True,
    metrics=("sop_loss", "sop_acc"),
    collator_label="MLM + SOP (ALBERT)", head_flops=pair_head_flops,
    charts=(
        MetricSpec("sop_acc", "SOP accuracy", chart="sop_acc"),
    ),
)

SBO = Objective(
    name="sbo",
    label="Span boundary objective (SBO)",
    help="Whole spans of words are masked (lengths ~ Geometric(0.2), at most 10); each span token is "
         "also predicted from the two tokens just outside the span and its place in it (SpanBERT).",
    collator=SpanBERTCollator, step=PreTrainingStep, units=("span",), requires=("mlm",), combines=("mlm",),
    packs=True,
    metrics=("sbo_loss", "sbo_acc"),
    collator_label="MLM + SBO (SpanBERT)", head_flops=span_head_flops,
    charts=(
        MetricSpec("sbo_loss", "SBO loss", chart="sbo_loss"),
        MetricSpec("sbo_acc", "SBO accuracy", chart="sbo_acc"),
    ),
)

UNILM = Objective(
    name="unilm",
    label="UniLM attention modes",
    help="Each example is trained with one self-attention mask: bidirectional (1/3), seq2seq (1/3, "
         "source fully visible, target left to right), left-to-right or right-to-left (1/6 each).",
    collator=UniLMCollator, step=PreTrainingStep, units=ALL_UNITS, pairs=SentencePairs(), combines=("mlm",),
    packs=True,
    metrics=(),
    collator_label="UniLM attention modes",
)
