"""Encoder-decoder objectives (T5 and BART): each turns a piece of text into an encoder input
and a decoder target, both ending with EOS.

- `span_corruption` (T5's default, Raffel et al. 2020 section 3.1.4): 15% of the tokens are
  noise, in spans of mean length 3. As in T5, the noise tokens and the other tokens are each
  split into the same number of segments (uniformly among the ways to do so, every segment
  non-empty) and interleaved, text first: nonnoise_0 noise_0 nonnoise_1 noise_1 ... with
  round(n_noise / 3) spans (at least one). Each noise span becomes one sentinel in the input
  (`<extra_id_0>`, `<extra_id_1>`, ... in order); the target is each sentinel followed by the
  tokens it replaced, then the next unused sentinel (the paper's example ends so), then EOS.
  Shapes are fixed: from seq_len, `span_corruption_lengths` picks (as T5's
  random_spans_helper does) the longest raw text whose corrupted input, EOS included, fits
  seq_len; the target length follows. Every input is padded to exactly seq_len, every
  target to exactly target_len (shorter texts at the corpus' end included).
- `prefix_lm`: the text split at a uniformly random point; input = prefix, target = the rest.
- `t5_mlm` (the T5 study's "BERT-style"): round(15%) of the tokens corrupted, each with
  probability 0.9 the mask token, else a random ordinary token; target = the original text.
- `deshuffle`: input = the tokens in a random order; target = the original text.
- `drop_tokens`: each token dropped from the input with probability 0.15 (i.i.d.); target =
  the dropped tokens in order.
- `text_infilling` (BART, Lewis et al. 2020): span lengths ~ Poisson(3) drawn until they cover
  30% of the tokens (the last one cut to fit); each span, 0-length ones included, becomes ONE
  mask token; target = the original text. Spans are placed at random without touching, so
  every mask in the input stands for exactly one span.
- `sentence_permutation` (BART): the sentences of a piece of one document (whole sentences,
  boundaries from the shards' sentences.npy) in a random order other than the original
  (when there are at least two); target = the original text.

The 15% rates are the run's mask_prob (default 0.15). Texts come from the corpus as one stream
of fixed-length chunks (documents simply concatenated, as T5 does) except for sentence
permutation (trainer.objectives.examples.TextLayout). Every random choice comes from the example's
generator (trainer.objectives.examples.example_rng), so static and dynamic masking and exact resume
work as for MLM.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError
from trainer.charts import LM_METRICS as LM_CHARTS, LM_STATS
from trainer.objectives.base import Batch, Objective, Step, StepOutput
from trainer.objectives.examples import Example, SpecialIds, TextLayout, example_rng
from trainer.objectives.masking import IGNORE_INDEX, mask_budget

# Published constants.
NOISE_DENSITY = 0.15        # T5: 15% of the tokens corrupted
MEAN_NOISE_SPAN = 3.0       # T5: mean span length 3
T5_MLM_MASK_RATE = 0.9      # T5's BERT-style objective: 90% mask token, 10% random token
INFILL_RATIO = 0.3          # BART: 30% of the tokens masked
INFILL_POISSON = 3.0        # BART: span lengths ~ Poisson(lambda=3)

SENTINELS_NEEDED = ("Span corruption needs a tokenizer with T5 sentinel tokens (<extra_id_0> ...); "
                    "train a Unigram tokenizer with sentinel tokens.")


def _round(x: float) -> int:
    """Round half up (the same on every platform)."""
    return int(np.floor(x + 0.5))


# ---------------------------------------------------------------------------- span corruption
def _noise_counts(n: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a text of n tokens: round(density * n) clipped to
    1..n-1, and round(noise / mean_span) spans, at least 1 and at most what both the noise
    and the other tokens can fill with non-empty segments."""
    if n < 2:
        return 0, 0
    noise = min(max(_round(n * noise_density), 1), n - 1)
    spans = max(1, min(_round(noise / mean_span), noise, n - noise))
    return noise, spans


def _corrupted_lengths(n: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(input length, target length), EOS included, of a text of n tokens after span corruption."""
    noise, spans = _noise_counts(n, noise_density, mean_span)
    if spans == 0:
        return n + 1, 2  # nothing to corrupt: the text; the target is one sentinel and EOS
    return n - noise + spans + 1, noise + spans + 2


def span_corruption_lengths(seq_len: int, noise_density: float = NOISE_DENSITY,
                            mean_span: float = MEAN_NOISE_SPAN) -> tuple[int, int]:
    """(raw_len, target_len): the most text tokens whose corrupted input, EOS included, fits
    seq_len, and the length of their target (sentinels + noise + final sentinel + EOS).

    Corrupting never lengthens the text (a span of >= 1 token becomes one sentinel), so the
    search starts at seq_len - 1 and grows while the input still fits; input length never
    decreases as the text grows, so the first miss ends it."""
    if seq_len < 3:
        raise ConfigError("Span corruption needs a seq_len of at least 3 (a token, a sentinel and EOS), "
                          f"not {seq_len}.")
    if not 0 < noise_density < 1:
        raise ConfigError(f"The noise density must be between 0 and 1, not {noise_density}.")
    if mean_span < 1:
        raise ConfigError(f"The mean noise span length must be at least 1, not {mean_span}.")
    n = max(2, seq_len - 1)
    while _corrupted_lengths(n + 1, noise_density, mean_span)[0] <= seq_len:
        n += 1
    return n, _corrupted_lengths(n, noise_density, mean_span)[1]


def random_segmentation(n_items: int, n_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of n_segments non-empty consecutive segments of n_items, uniformly among all
    such splits (n_segments - 1 distinct cut points out of the n_items - 1 gaps)."""
    if n_segments <= 1:
        return np.array([n_items], dtype=np.int64)
    cuts = np.sort(rng.choice(n_items - 1, size=n_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [n_items]])).astype(np.int64)


def span_noise_mask(n: int, rng: np.random.Generator, noise_density: float = NOISE_DENSITY,
                    mean_span: float = MEAN_NOISE_SPAN) -> np.ndarray:
    """(n,) bool, True = noise: T5's interleaved segments, starting with non-noise."""
    noise, spans = _noise_counts(n, noise_density, mean_span)
    if spans == 0:
        return np.zeros(n, dtype=bool)
    lengths = np.empty(2 * spans, dtype=np.int64)
    lengths[0::2] = random_segmentation(n - noise, spans, rng)
    lengths[1::2] = random_segmentation(noise, spans, rng)
    return np.repeat(np.tile([False, True], spans), lengths)


def replace_runs(ids: np.ndarray, mask: np.ndarray, sentinels: Sequence[int]) -> np.ndarray:
    """ids with every maximal run of mask=True replaced by one sentinel, the k-th run by sentinels[k]."""
    if not mask.any():
        return ids.copy()
    starts = mask & ~np.concatenate([[False], mask[:-1]])
    run = np.cumsum(starts) - 1
    out = np.where(starts, np.asarray(sentinels, dtype=np.int64)[np.maximum(run, 0)], ids)
    return out[~mask | starts]


# ---------------------------------------------------------------------------- text infilling
def infilling_spans(n: int, rng: np.random.Generator, *, ratio: float = INFILL_RATIO,
                    poisson: float = INFILL_POISSON, max_spans: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BART's text-infilling spans over a text of n tokens -> (starts, lengths, drawn).

    Lengths ~ Poisson(poisson) are drawn until they cover round(ratio * n) tokens, the last
    cut to fit; `drawn` holds each span's length as drawn (before that cut). By Wald's
    identity the pooled mean of `drawn` over many texts is the Poisson mean, while the
    spans that were not cut are a little shorter on average (the one that crosses the
    budget tends to be a long one). The spans, in random order,
    are placed with a random number of kept tokens between them, at least one where there
    are enough, so spans never touch. max_spans bounds the count (the input grows by one
    token per 0-length span): 0-length spans beyond it are dropped. Sorted by start."""
    budget = _round(ratio * n) if n > 0 else 0
    lengths: list[int] = []
    drawn: list[int] = []
    covered = 0
    while covered < budget:
        for length in rng.poisson(poisson, size=max(4, int(2 * (budget - covered) / max(poisson, 1.0)) + 4)):
            drawn.append(int(length))
            lengths.append(min(int(length), budget - covered))
            covered += lengths[-1]
            if covered >= budget:
                break
    lens = np.asarray(lengths, dtype=np.int64)
    full = np.asarray(drawn, dtype=np.int64)
    if max_spans is not None and len(lens) > max_spans:
        zeros = np.flatnonzero(lens == 0)
        drop = zeros[len(zeros) - min(len(zeros), len(lens) - max_spans):]
        keep = np.ones(len(lens), dtype=bool)
        keep[drop] = False
        lens, full = lens[keep], full[keep]
    k = len(lens)
    if k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = rng.permutation(k)
    lens, full = lens[order], full[order]
    kept = n - int(lens.sum())
    inner = k - 1 if kept >= k - 1 else 0        # tokens reserved between spans
    free = kept - inner                          # spread over k + 1 gaps (stars and bars)
    bars = np.sort(rng.choice(free + k, size=k, replace=False))
    gaps = np.diff(np.concatenate([[-1], bars])) - 1  # the k gaps before each span
    gaps[1:] += 1 if inner else 0
    starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(lens)[:-1]])
    return starts.astype(np.int64), lens, full


def infill(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, mask_id: int) -> np.ndarray:
    """ids with each span [start, start + length) replaced by one mask token (inserted for 0)."""
    out: list[np.ndarray] = []
    pos = 0
    for s, L in zip(starts.tolist(), lengths.tolist()):
        out.append(ids[pos:s])
        out.append(np.array([mask_id], dtype=np.int64))
        pos = s + L
    out.append(ids[pos:])
    return np.concatenate(out).astype(np.int64)


# ---------------------------------------------------------------------------- batches
@dataclass
class Seq2SeqBatch(Batch):
    """input_ids / attention_mask are the encoder's."""

    labels: torch.Tensor                  # (B, L) long: decoder targets, -100 at padding
    decoder_input_ids: torch.Tensor       # (B, L) long: labels shifted right, starting with the
                                          # decoder start id (= pad, T5's)
    decoder_attention_mask: torch.Tensor  # (B, L) long, 1 = real target token

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "decoder_input_ids": self.decoder_input_ids, "decoder_attention_mask": self.decoder_attention_mask,
                "labels": self.labels}

    @property
    def n_tokens(self) -> int:
        """The encoder's and the decoder's real tokens (what tokens/s counts)."""
        return int(self.attention_mask.sum()) + int(self.decoder_attention_mask.sum())

    @property
    def n_positions(self) -> int:
        """The encoder's and the decoder's positions, padding included."""
        return int(self.input_ids.numel()) + int(self.decoder_input_ids.numel())


# ---------------------------------------------------------------------------- collators
@dataclass
class Seq2SeqCollator:
    """Common part of the encoder-decoder collators: `pair` makes one example's (input,
    target), both ending with EOS; `__call__` pads them into a Batch with labels (-100 at
    padding), decoder_input_ids (labels shifted right after the decoder start id, T5's
    convention: the pad id) and decoder_attention_mask.

    The constructor takes build_collator's arguments; mask_prob is the noise rate of the
    objectives that have one at 15%, masking_unit must be "token"."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = NOISE_DENSITY
    seed: int = 0
    masking_unit: str = "token"
    phrase_breaks: np.ndarray | None = field(default=None, repr=False)

    objective: ClassVar[str] = ""
    fixed_shapes: ClassVar[bool] = False  # pad to (seq_len, target_len) instead of the longest

    def __post_init__(self) -> None:
        if self.masking_unit != "token":
            raise ConfigError(f"The {self.objective} objective corrupts tokens; it takes no "
                              f"{self.masking_unit!r} masking.")
        if self.seq_len < 3:
            raise ConfigError(f"The {self.objective} objective needs a seq_len of at least 3, not {self.seq_len}.")
        if not 0 < self.mask_prob < 1:
            raise ConfigError(f"The noise rate (mask_prob) must be between 0 and 1, not {self.mask_prob}.")

    @property
    def needs_word_starts(self) -> bool:
        return False

    @property
    def layout(self) -> TextLayout:
        """seq_len - 1 tokens of text: room for EOS in the input and in the target."""
        return TextLayout("chunks", self.seq_len - 1)

    @property
    def target_len(self) -> int:
        """The longest target (fixed-shape objectives pad every target to it)."""
        return self.seq_len

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _eos(self, ids: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(ids, dtype=np.int64), [self.special.eos]]).astype(np.int64)

    def __call__(self, examples: Sequence[Example]) -> Seq2SeqBatch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        pairs = [self.pair(ex, example_rng(self.seed, ex.variant, ex.uid)) for ex in examples]
        B = len(pairs)
        if self.fixed_shapes:
            T, L = self.seq_len, self.target_len
        else:
            T, L = max(len(i) for i, _ in pairs), max(len(t) for _, t in pairs)
        pad = self.special.pad
        input_ids = np.full((B, T), pad, dtype=np.int64)
        attention = np.zeros((B, T), dtype=np.int64)
        labels = np.full((B, L), IGNORE_INDEX, dtype=np.int64)
        for b, (inp, tgt) in enumerate(pairs):
            if len(inp) > T or len(tgt) > L:
                raise ValueError(f"{self.objective}: an example of {len(inp)} input / {len(tgt)} target tokens "
                                 f"exceeds ({T}, {L})")
            input_ids[b, :len(inp)] = inp
            attention[b, :len(inp)] = 1
            labels[b, :len(tgt)] = tgt
        decoder_mask = (labels != IGNORE_INDEX).astype(np.int64)
        decoder_inputs = np.full((B, L), pad, dtype=np.int64)  # position 0: the decoder start id
        decoder_inputs[:, 1:] = np.where(labels[:, :-1] == IGNORE_INDEX, pad, labels[:, :-1])
        t = torch.from_numpy
        return Seq2SeqBatch(input_ids=t(input_ids), attention_mask=t(attention), labels=t(labels),
                            decoder_input_ids=t(decoder_inputs), decoder_attention_mask=t(decoder_mask))


@dataclass
class SpanCorruptionCollator(Seq2SeqCollator):
    """T5's span corruption (see the module docstring), at fixed shapes (seq_len, target_len)."""

    mean_span: float = MEAN_NOISE_SPAN

    objective: ClassVar[str] = "span_corruption"
    fixed_shapes: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.special.sentinels:
            raise ConfigError(SENTINELS_NEEDED)
        self.raw_len, self._target_len = span_corruption_lengths(self.seq_len, self.mask_prob, self.mean_span)
        needed = _noise_counts(self.raw_len, self.mask_prob, self.mean_span)[1] + 1
        if needed > len(self.special.sentinels):
            raise ConfigError(
                f"Span corruption at seq_len {self.seq_len} makes up to {needed - 1} noise spans and needs "
                f"{needed} sentinel tokens; the tokenizer has {len(self.special.sentinels)}. Use a shorter "
                "seq_len or train a tokenizer with more sentinel tokens (T5 uses 100).")

    @property
    def layout(self) -> TextLayout:
        return TextLayout("chunks", self.raw_len)

    @property
    def target_len(self) -> int:
        return self._target_len

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a[:self.raw_len], dtype=np.int64)
        noise = span_noise_mask(len(ids), rng, self.mask_prob, self.mean_span)
        sentinels = self.special.sentinels
        k = int((noise & ~np.concatenate([[False], noise[:-1]])).sum())  # noise spans
        inputs = replace_runs(ids, noise, sentinels)
        # The target is the complement: the kept runs become the sentinels. The text starts
        # with kept tokens, so kept run j precedes noise span j and takes its sentinel.
        target = replace_runs(ids, ~noise, sentinels) if k else np.zeros(0, dtype=np.int64)
        target = np.concatenate([target, [sentinels[k]]]).astype(np.int64)
        return self._eos(inputs), self._eos(target)


@dataclass
class PrefixLMCollator(Seq2SeqCollator):
    """The text split at a uniformly random point (both parts non-empty); input = the prefix,
    target = the rest."""

    objective: ClassVar[str] = "prefix_lm"

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        split = int(rng.integers(1, len(ids))) if len(ids) >= 2 else len(ids)
        return self._eos(ids[:split]), self._eos(ids[split:])


@dataclass
class T5MLMCollator(Seq2SeqCollator):
    """The T5 study's BERT-style objective: round(mask_prob * n) tokens chosen, each replaced by
    the mask token with probability 0.9, else by a random ordinary token; the target is the
    whole original text."""

    objective: ClassVar[str] = "t5_mlm"

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        inputs = ids.copy()
        chosen = rng.choice(len(ids), size=mask_budget(len(ids), self.mask_prob), replace=False)
        to_mask = rng.random(len(chosen)) < T5_MLM_MASK_RATE
        inputs[chosen[to_mask]] = self.special.mask
        replacements = self.special.replacement_ids
        inputs[chosen[~to_mask]] = replacements[rng.integers(0, len(replacements), int((~to_mask).sum()))]
        return self._eos(inputs), self._eos(ids)


@dataclass
class DeshuffleCollator(Seq2SeqCollator):
    """Input = the text's tokens in a random order; target = the text."""

    objective: ClassVar[str] = "deshuffle"

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        return self._eos(rng.permutation(ids)), self._eos(ids)


@dataclass
class DropTokensCollator(Seq2SeqCollator):
    """Each token dropped from the input with probability mask_prob (independently); the
    target is the dropped tokens in their order."""

    objective: ClassVar[str] = "drop_tokens"

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        drop = rng.random(len(ids)) < self.mask_prob
        return self._eos(ids[~drop]), self._eos(ids[drop])


@dataclass
class TextInfillingCollator(Seq2SeqCollator):
    """BART's text infilling (see `infilling_spans`); target = the original text."""

    ratio: float = INFILL_RATIO
    poisson: float = INFILL_POISSON

    objective: ClassVar[str] = "text_infilling"

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        starts, lengths, _ = self.spans(len(ids), rng)
        return self._eos(infill(ids, starts, lengths, self.special.mask)), self._eos(ids)

    def spans(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # The input (n - covered + spans, plus EOS) must fit seq_len: bounds the 0-length spans.
        covered = _round(self.ratio * n) if n > 0 else 0
        return infilling_spans(n, rng, ratio=self.ratio, poisson=self.poisson,
                               max_spans=self.seq_len - 1 - n + covered)


@dataclass
class SentencePermutationCollator(Seq2SeqCollator):
    """BART's sentence permutation: whole sentences of one document, shuffled into an order
    other than the original when there are at least two; target = the original text."""

    objective: ClassVar[str] = "sentence_permutation"

    @property
    def layout(self) -> TextLayout:
        return TextLayout("sentences", self.seq_len - 1)

    def pair(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ex.a, dtype=np.int64)
        if ex.sentence_starts is None:
            raise ValueError("sentence permutation needs the examples' sentence starts (TextLayout 'sentences')")
        bounds = np.unique(np.concatenate([np.asarray(ex.sentence_starts, dtype=np.int64), [0, len(ids)]]))
        pieces = [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        order = np.arange(len(pieces))
        if len(pieces) > 1:
            while (order == np.arange(len(pieces))).all():  # at least half the orders differ
                order = rng.permutation(len(pieces))
        return self._eos(np.concatenate([pieces[i] for i in order]) if pieces else ids), self._eos(ids)


# ---------------------------------------------------------------------------- step and objectives
class Seq2SeqStep(Step):
    """T5: the encoder reads the corrupted input, the decoder the target shifted right (the
    collator's decoder_input_ids, starting with the pad id); loss and accuracy over the target
    tokens (labels != -100)."""

    perplexities = {"perplexity": "lm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"lm_loss": 1.0}

    def __call__(self, batch: Seq2SeqBatch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, batch.attention_mask, batch.decoder_input_ids,
                         batch.decoder_attention_mask, batch.labels)
        return lm_step_output(out.loss, out.logits, batch.labels)


def lm_step_output(loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> StepOutput:
    """lm_loss and lm_acc of (B, L, V) logits against (B, L) targets (-100 = not predicted);
    validation weights the loss by the number of predicted tokens."""
    predicted = targets != IGNORE_INDEX  # (B, L)
    n = predicted.sum()
    hits = ((logits.detach().argmax(-1) == targets) & predicted).sum()
    return StepOutput(loss, {"lm_loss": loss.detach().float()}, {"lm_loss": n}, {"lm_acc": (hits, n)})


# What the language-model objectives report: the loss and accuracy over the predicted tokens
# (a seq2seq model's target tokens, a causal LM's next tokens) and, in validation, exp(lm_loss).
LM_METRICS = ("lm_loss", "lm_acc", "perplexity")


def _denoising(name: str, collator: type[Seq2SeqCollator], label: str, help: str, collator_label: str,
               **spec: bool) -> Objective:
    return Objective(name=name, label=label, help=help, collator=collator, step=Seq2SeqStep, metrics=LM_METRICS,
                     charts=LM_CHARTS, stats=LM_STATS, collator_label=collator_label, **spec)


SPAN_CORRUPTION = _denoising(
    "span_corruption", SpanCorruptionCollator, "Span corruption (T5)",
    "15% of the tokens (noise density 0.15, the run's mask probability) are corrupted in spans of mean "
    "length 3; each span becomes one sentinel token <extra_id_0>, <extra_id_1>, ... in the input, and "
    "the decoder writes each sentinel followed by the tokens it replaced. T5's default; needs a "
    "tokenizer with sentinel tokens.",
    "T5 span corruption (15%, mean span 3, sentinels)", needs_sentinels=True)
PREFIX_LM = _denoising(
    "prefix_lm", PrefixLMCollator, "Prefix LM (T5 study)",
    "The text is split at a random point: the encoder reads the first part, the decoder writes the rest.",
    "Prefix LM (T5 study)")
T5_MLM = _denoising(
    "t5_mlm", T5MLMCollator, "BERT-style MLM, encoder-decoder (T5 study)",
    "15% of the tokens are corrupted (90% become the mask token, 10% a random token); the decoder "
    "writes the whole original text.",
    "BERT-style MLM, encoder-decoder (T5 study)")
DESHUFFLE = _denoising(
    "deshuffle", DeshuffleCollator, "Deshuffling (T5 study)",
    "The encoder reads the text's tokens in a random order; the decoder writes them in the original order.",
    "Deshuffling (T5 study)")
DROP_TOKENS = _denoising(
    "drop_tokens", DropTokensCollator, "Drop tokens (T5 study)",
    "Each token is left out of the input with probability 0.15; the decoder writes the dropped tokens.",
    "Token dropping (T5 study)")
TEXT_INFILLING = _denoising(
    "text_infilling", TextInfillingCollator, "Text infilling (BART)",
    "Spans with lengths ~ Poisson(3) covering 30% of the tokens are each replaced by ONE mask token "
    "(0-length spans insert one); the decoder writes the original text.",
    "Text infilling (BART)")
SENTENCE_PERMUTATION = _denoising(
    "sentence_permutation", SentencePermutationCollator, "Sentence permutation (BART)",
    "The sentences of a piece of one document are shuffled; the decoder writes them in the original order.",
    "Sentence permutation (BART)")

# The T5 family's objectives, one per run, in the form's order.
DENOISING_OBJECTIVES = (SPAN_CORRUPTION, PREFIX_LM, T5_MLM, DESHUFFLE, DROP_TOKENS, TEXT_INFILLING,
                        SENTENCE_PERMUTATION)
