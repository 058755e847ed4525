"""Which tokens an MLM-style objective corrupts: masking units with their published rules,
and UniLM's mode table (its attention masks are built by models_lib.core.masks).

Every function works on one sequence (token ids with its special tokens) and draws all its
randomness from the `numpy.random.Generator` it is given, so a collator that seeds one
generator per example (trainer.objectives.examples.example_rng) gets the same masks for the same
example every time.

Masking units (`MASKING_UNITS`), all with the same budget: round(mask_prob * n) of the n
maskable tokens (at least one), counted in tokens, never a special token.

- "token" (BERT): `mask_tokens`, tokens chosen independently; 80/10/10 decided per token.
- "word" (BERT-wwm): whole words in random order, each taken when it still fits in the budget
  and skipped otherwise (create_pretraining_data.py's do_whole_word_mask), so a word is
  either masked with all its pieces or not at all.
- "phrase" (ERNIE 1.0 phrase-level masking, rule-based chunking; see `phrase_units`): units of
  2-4 consecutive words between punctuation / stopwords, chosen like words.
- "ngram" (ALBERT): n-grams of whole words, n <= 3 with p(n) proportional to 1/n, chosen as
  in ALBERT's create_pretraining_data.py (shuffled starts, shorter n when the budget is nearly
  spent, skipped when overlapping an earlier n-gram).
- "span" (SpanBERT): spans of whole words, length ~ Geometric(0.2) truncated to 1..10 and
  renormalised (mean 3.80), uniform start, kept apart by at least one unmasked word so each
  span's boundary tokens x(s-1), x(e+1) are visible (SpanBERT merges touching spans instead).

For every unit above "token", 80/10/10 is decided per unit: the whole unit becomes [MASK]s,
or random ordinary tokens (each drawn independently), or stays unchanged (SpanBERT's rule;
the BERT-wwm and ALBERT reference scripts decide per token). Labels hold the original ids
of every token of a chosen unit, -100 elsewhere. A unit is never cut to fit the budget
except a span (SpanBERT cuts its last span); so, as in the reference scripts, a short
sequence whose words are all longer than its budget gets no mask, and realised spans are a
little shorter than drawn ones (mean ~3.7 words at length 512, ~3.1 at 128: each
sequence's last span is cut to what is left of the budget).

Words come from per-token word-start flags (trainer.prep.shards' word_starts; for Chinese from
jieba, see trainer.prep.segmenter). A word never crosses a special token, and neither does any
unit (so units stay inside a segment and inside a document of a packed sequence).
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

IGNORE_INDEX = -100  # label of positions that are not predicted (torch cross_entropy's default)

# What happens to a chosen unit (the 80/10/10 rule).
TO_MASK, TO_RANDOM, KEEP = 0, 1, 2

MASKING_UNITS: dict[str, str] = {
    "token": "BERT: 15% of the tokens, chosen one by one.",
    "word": "Whole-word masking (BERT-wwm): when a word is chosen, all of its pieces are masked.",
    "phrase": "ERNIE phrase masking: units of 2-4 consecutive words between punctuation and stopwords.",
    "ngram": "ALBERT n-gram masking: 1- to 3-grams of whole words, p(n) proportional to 1/n.",
    "span": "SpanBERT span masking: spans of whole words, length ~ Geometric(0.2) up to 10 (mean 3.8).",
}

# Published constants.
NGRAM_MAX = 3             # ALBERT: n <= 3
SPAN_P, SPAN_MAX = 0.2, 10  # SpanBERT: Geometric(p=0.2) over lengths 1..10
PHRASE_MIN, PHRASE_MAX = 2, 4


def mask_budget(n_maskable: int, mask_prob: float) -> int:
    """Tokens to corrupt in a sequence with n maskable tokens: round(p * n), at least 1."""
    if n_maskable <= 0:
        return 0
    return min(n_maskable, max(1, int(n_maskable * mask_prob + 0.5)))


# ---------------------------------------------------------------------------- tokens (BERT)
def mask_tokens(ids: np.ndarray, *, rng: np.random.Generator, special: Any,
                mask_prob: float = 0.15, maskable: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """BERT's MLM corruption of one sequence -> (inputs, labels).

    Exactly round(mask_prob * n) of the n non-special tokens are chosen (at least one), like
    create_pretraining_data.py; of those 80% become [MASK], 10% a random ordinary token and
    10% stay as they are. Labels hold the original id at chosen positions, -100 elsewhere.
    `maskable` (bool per token) narrows the candidates further (e.g. UniLM's target segment).
    """
    inputs, labels, _, _ = _mask_tokens(ids, rng, special, mask_prob, maskable)
    return inputs, labels


def _mask_tokens(ids, rng, special, mask_prob, maskable):
    ids = np.asarray(ids, dtype=np.int64)
    inputs = ids.copy()
    labels = np.full_like(ids, IGNORE_INDEX)
    ok = ~special.is_special(ids)
    if maskable is not None:
        ok &= maskable
    candidates = np.flatnonzero(ok)
    if len(candidates) == 0:
        return inputs, labels, candidates, np.zeros(0)
    k = mask_budget(len(candidates), mask_prob)
    chosen = candidates[rng.permutation(len(candidates))[:k]]
    labels[chosen] = ids[chosen]
    u = rng.random(k)
    inputs[chosen[u < 0.8]] = special.mask
    to_random = chosen[(u >= 0.8) & (u < 0.9)]
    inputs[to_random] = special.replacement_ids[rng.integers(0, len(special.replacement_ids), len(to_random))]
    return inputs, labels, chosen, u


# ---------------------------------------------------------------------------- words
@dataclass(frozen=True)
class Words:
    """The maskable words of one sequence: word k covers tokens [start[k], end[k])."""

    start: np.ndarray  # (W,) int64
    end: np.ndarray    # (W,) int64, exclusive
    run: np.ndarray    # (W,) int64: which run of maskable tokens (between special tokens) holds it

    @property
    def n(self) -> int:
        return len(self.start)

    @property
    def lengths(self) -> np.ndarray:
        return self.end - self.start

    def run_ends(self) -> np.ndarray:
        """(W,) index one past the last word of each word's run."""
        if self.n == 0:
            return np.zeros(0, dtype=np.int64)
        last = np.flatnonzero(np.diff(self.run) != 0)  # last word of each run but the final one
        ends = np.concatenate([last + 1, [self.n]])
        return ends[np.searchsorted(ends, np.arange(self.n), side="right")]


def find_words(word_starts: np.ndarray, maskable: np.ndarray) -> Words:
    """Group the maskable tokens into words.

    A word starts at a maskable token flagged as a word start, or at a maskable token that
    follows a non-maskable one (a word cut by truncation still counts as a word), and runs
    up to the next word start or non-maskable token.
    """
    maskable = np.asarray(maskable, dtype=bool)
    T = len(maskable)
    prev_ok = np.concatenate([[False], maskable[:-1]])
    begins = maskable & (np.asarray(word_starts, dtype=bool) | ~prev_ok)
    start = np.flatnonzero(begins)
    stops = np.concatenate([np.flatnonzero(~maskable), [T]])
    next_stop = stops[np.searchsorted(stops, start)]
    next_start = np.concatenate([start[1:], [T]])
    end = np.minimum(next_stop, next_start)
    run = np.cumsum(~maskable)[start] if T else np.zeros(0, dtype=np.int64)
    return Words(start.astype(np.int64), end.astype(np.int64), run.astype(np.int64))


# ---------------------------------------------------------------------------- unit choosers
# Each returns an (U, 2) int64 array of word ranges [lo, hi) chosen for masking.
def _greedy_fill(unit_tokens: np.ndarray, order: np.ndarray, budget: int) -> np.ndarray:
    """BERT-wwm's rule over units in the given order: take a unit whole when it fits in what is
    left of the budget, skip it otherwise; stop when the budget is spent. -> chosen unit ids."""
    cum = np.cumsum(unit_tokens[order])
    k = int(np.searchsorted(cum, budget, side="right"))  # the prefix that fits
    chosen = list(order[:k])
    total = int(cum[k - 1]) if k else 0
    rest = order[k:]
    while total < budget and len(rest):
        fits = np.flatnonzero(unit_tokens[rest] <= budget - total)
        if not len(fits):
            break
        j = fits[0]
        chosen.append(rest[j])
        total += int(unit_tokens[rest[j]])
        rest = rest[j + 1:]
    return np.asarray(chosen, dtype=np.int64)


def choose_words(words: Words, budget: int, rng: np.random.Generator) -> np.ndarray:
    """BERT-wwm: whole words in random order, skipped when they would overflow the budget."""
    chosen = _greedy_fill(words.lengths, rng.permutation(words.n), budget)
    return np.stack([chosen, chosen + 1], axis=1).reshape(-1, 2)


def phrase_units(words: Words, ids: np.ndarray, breaks: np.ndarray | None) -> np.ndarray:
    """ERNIE-style phrases by rule (there is no chunker here): (P, 2) word ranges.

    A break is a one-token word whose token is punctuation or a stopword (`breaks`, a bool
    per token id, from `phrase_break_table`). The words between two breaks (or special
    tokens) form a chunk; a chunk of 2-4 words is one phrase, a longer one is cut into as
    few pieces of 2-4 words as possible, evenly (5 -> 3+2, 9 -> 3+3+3). Lone words between
    breaks are not phrases. Without a break table, chunks end only at special tokens.
    """
    if words.n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    is_break = np.zeros(words.n, dtype=bool)
    if breaks is not None:
        first = np.asarray(ids, dtype=np.int64)[words.start]
        is_break = (words.lengths == 1) & breaks[np.minimum(first, len(breaks) - 1)] & (first < len(breaks))
    units: list[tuple[int, int]] = []
    w = 0
    while w < words.n:
        if is_break[w]:
            w += 1
            continue
        lo = w
        while w + 1 < words.n and not is_break[w + 1] and words.run[w + 1] == words.run[lo]:
            w += 1
        w += 1
        m = w - lo
        if m < PHRASE_MIN:
            continue
        k = -(-m // PHRASE_MAX)  # pieces
        sizes = [m // k + (1 if i < m % k else 0) for i in range(k)]
        for s in sizes:
            units.append((lo, lo + s))
            lo += s
    return np.asarray(units, dtype=np.int64).reshape(-1, 2)


def choose_phrases(words: Words, budget: int, rng: np.random.Generator, *, ids: np.ndarray,
                   breaks: np.ndarray | None) -> np.ndarray:
    """Phrases (see `phrase_units`) in random order, each taken whole when it fits in the
    budget. Only multi-word phrases are units, so a sequence with few phrases can stay a
    little under budget rather than fall back on single words."""
    phrases = phrase_units(words, ids, breaks)
    if not len(phrases):
        return phrases
    cum = np.concatenate([[0], np.cumsum(words.lengths)])
    tokens = cum[phrases[:, 1]] - cum[phrases[:, 0]]
    return phrases[_greedy_fill(tokens, rng.permutation(len(phrases)), budget)].reshape(-1, 2)


def ngram_probs(max_n: int = NGRAM_MAX) -> np.ndarray:
    """ALBERT: p(n) proportional to 1/n for n = 1..max_n (6/11, 3/11, 2/11 for n <= 3)."""
    p = 1.0 / np.arange(1, max_n + 1)
    return p / p.sum()


def choose_ngrams(words: Words, budget: int, rng: np.random.Generator, *, max_n: int = NGRAM_MAX) -> np.ndarray:
    """ALBERT's n-gram masking on whole words.

    Word starts are visited in random order; at each, n is drawn with p(n) ~ 1/n among the
    lengths that stay inside the segment; while the n-gram would overflow the budget a
    shorter one is tried; an n-gram that still overflows, or overlaps an earlier one, is
    skipped. Stops when the budget is spent.
    """
    if words.n == 0 or budget <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    p = ngram_probs(max_n)
    cum = np.concatenate([[0], np.cumsum(words.lengths)])
    room = np.minimum(words.run_ends() - np.arange(words.n), max_n)  # longest n from each start
    taken = np.zeros(words.n, dtype=bool)
    units, total = [], 0
    for w in rng.permutation(words.n):
        if total >= budget:
            break
        r = int(room[w])
        n = int(rng.choice(r, p=p[:r] / p[:r].sum())) + 1
        while n > 1 and total + cum[w + n] - cum[w] > budget:
            n -= 1
        size = int(cum[w + n] - cum[w])
        if total + size > budget or taken[w:w + n].any():
            continue
        taken[w:w + n] = True
        units.append((w, w + n))
        total += size
    return np.asarray(units, dtype=np.int64).reshape(-1, 2)


def span_length_probs(p: float = SPAN_P, max_len: int = SPAN_MAX) -> np.ndarray:
    """SpanBERT: P(L = n) = p (1-p)^(n-1) for n = 1..max_len, renormalised (mean 3.80 for
    p = 0.2, max 10; clipping the tail to 10 instead would give a mean of 4.46)."""
    n = np.arange(1, max_len + 1)
    w = p * (1 - p) ** (n - 1)
    return w / w.sum()


def choose_spans(words: Words, budget: int, rng: np.random.Generator, *, p: float = SPAN_P,
                 max_len: int = SPAN_MAX) -> np.ndarray:
    """SpanBERT's span masking on whole words.

    Repeat until the budget is spent: draw a length L ~ `span_length_probs`, then a start
    word uniformly among those where L words fit inside one segment without touching an
    already masked word (one unmasked word must stay between spans, so boundaries are
    visible); when the span's tokens exceed what is left of the budget it is cut after the
    last whole word that fits. When no start fits L a new L is drawn; when not even one
    word fits anywhere, masking stops (a little under budget, never over).
    """
    W = words.n
    if W == 0 or budget <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    probs = span_length_probs(p, max_len)
    lengths = words.lengths
    cum = np.concatenate([[0], np.cumsum(lengths)])
    run = words.run
    masked = np.zeros(W, dtype=bool)
    units, total = [], 0
    while total < budget:
        left = budget - total
        L = int(rng.choice(max_len, p=probs)) + 1
        starts = _free_starts(masked, run, L, lengths, left) if L <= W else np.zeros(0, np.int64)
        if not len(starts):
            if L == 1 or not len(_free_starts(masked, run, 1, lengths, left)):
                break  # nothing fits any more
            continue
        s = int(starts[rng.integers(len(starts))])
        n = int(np.searchsorted(cum[s + 1:s + L + 1] - cum[s], left, side="right"))  # whole words that fit
        masked[s:s + n] = True
        units.append((s, s + n))
        total += int(cum[s + n] - cum[s])
    units.sort()
    return np.asarray(units, dtype=np.int64).reshape(-1, 2)


def _free_starts(masked: np.ndarray, run: np.ndarray, L: int, lengths: np.ndarray, left: int) -> np.ndarray:
    """Start words w where words w..w+L-1 lie in one run, none is masked, the words just
    outside (in the same run) are not masked, and the first word fits in `left` tokens."""
    W = len(masked)
    w = np.arange(W - L + 1)
    m = np.concatenate([[0], np.cumsum(masked)])
    ok = (m[w + L] - m[w] == 0) & (run[w] == run[w + L - 1]) & (lengths[w] <= left)
    before = np.concatenate([[False], masked[:-1] & (run[1:] == run[:-1])])   # word w-1 masked, same run
    after = np.concatenate([masked[1:] & (run[1:] == run[:-1]), [False]])     # word w+1 masked, same run
    ok &= ~before[w] & ~after[w + L - 1]
    return np.flatnonzero(ok)


# ---------------------------------------------------------------------------- the masker
@dataclass
class Masked:
    """One corrupted sequence."""

    inputs: np.ndarray  # (T,) int64
    labels: np.ndarray  # (T,) int64, -100 where not predicted
    units: np.ndarray   # (U, 4) int64 per chosen unit, sorted by start: token start, token end
                        # (exclusive), number of words (1 for "token"), TO_MASK/TO_RANDOM/KEEP


@dataclass(frozen=True)
class Masker:
    """Corrupts one sequence with a masking unit (see the module docstring)."""

    special: Any                 # trainer.objectives.examples.SpecialIds (is_special, mask, replacement_ids)
    unit: str = "token"
    mask_prob: float = 0.15
    phrase_breaks: np.ndarray | None = None  # bool per token id, see phrase_break_table

    def __post_init__(self) -> None:
        if self.unit not in MASKING_UNITS:
            raise ValueError(f"unknown masking unit {self.unit!r}; choose one of {', '.join(MASKING_UNITS)}")
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"mask_prob must be between 0 and 1, not {self.mask_prob}")

    @property
    def needs_words(self) -> bool:
        return self.unit != "token"

    def __call__(self, ids: np.ndarray, rng: np.random.Generator, *, word_starts: np.ndarray | None = None,
                 maskable: np.ndarray | None = None) -> Masked:
        ids = np.asarray(ids, dtype=np.int64)
        if self.unit == "token":
            inputs, labels, chosen, u = _mask_tokens(ids, rng, self.special, self.mask_prob, maskable)
            treat = np.where(u < 0.8, TO_MASK, np.where(u < 0.9, TO_RANDOM, KEEP))
            units = np.stack([chosen, chosen + 1, np.ones_like(chosen), treat], axis=1).astype(np.int64)
            return Masked(inputs, labels, units[np.argsort(chosen, kind="stable")].reshape(-1, 4))
        if word_starts is None:
            raise ValueError(f"{self.unit} masking needs word boundaries (word_starts) for every example")
        if len(word_starts) != len(ids):
            raise ValueError(f"word_starts has {len(word_starts)} flags for {len(ids)} tokens")
        ok = ~self.special.is_special(ids)
        if maskable is not None:
            ok &= maskable
        words = find_words(word_starts, ok)
        budget = mask_budget(int(ok.sum()), self.mask_prob)
        if self.unit == "word":
            chosen = choose_words(words, budget, rng)
        elif self.unit == "phrase":
            chosen = choose_phrases(words, budget, rng, ids=ids, breaks=self.phrase_breaks)
        elif self.unit == "ngram":
            chosen = choose_ngrams(words, budget, rng)
        else:
            chosen = choose_spans(words, budget, rng)
        return apply_units(ids, words, chosen, rng, self.special)


def apply_units(ids: np.ndarray, words: Words, chosen: np.ndarray, rng: np.random.Generator,
                special: Any) -> Masked:
    """80/10/10 per unit: all its tokens -> [MASK] (80%), all -> random ordinary tokens (10%),
    or all kept (10%); labels = original ids of every token of every unit."""
    chosen = chosen[np.argsort(chosen[:, 0], kind="stable")] if len(chosen) else chosen.reshape(0, 2)
    inputs = ids.copy()
    labels = np.full_like(ids, IGNORE_INDEX)
    lo = words.start[chosen[:, 0]]
    hi = words.end[chosen[:, 1] - 1] if len(chosen) else lo
    u = rng.random(len(chosen))
    treat = np.where(u < 0.8, TO_MASK, np.where(u < 0.9, TO_RANDOM, KEEP))
    n = hi - lo
    pos = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
    labels[pos] = ids[pos]
    how = np.repeat(treat, n)
    inputs[pos[how == TO_MASK]] = special.mask
    rand = pos[how == TO_RANDOM]
    inputs[rand] = special.replacement_ids[rng.integers(0, len(special.replacement_ids), len(rand))]
    units = np.stack([lo, hi, chosen[:, 1] - chosen[:, 0], treat], axis=1).astype(np.int64).reshape(-1, 4)
    return Masked(inputs, labels, units)


# ---------------------------------------------------------------------------- phrase breaks
STOPWORDS = frozenset((
    # English function words
    "a an the of to in on at by for with from into onto upon about over under after before between "
    "through during without within against among and or but nor so yet as if than then that this these "
    "those is are was were be been being am do does did have has had it its he she they we you i me him "
    "her them us my your his their our which who whom whose what when where why how not no there here "
    "while also such can could will would shall should may might must "
    # Chinese function words (single characters and common two-character ones)
    "的 了 和 是 在 也 就 都 而 及 与 或 之 其 着 把 被 让 给 对 从 向 但 却 并 等 这 那 个 啊 吗 呢 吧 "
    "我 你 他 她 它 我们 你们 他们 因为 所以 但是 如果 虽然 而且 或者 以及"
).split())


def phrase_break_table(vocab: Sequence[str | None]) -> np.ndarray:
    """Bool per token id (vocab[i] = token string of id i): True for tokens that end a phrase —
    punctuation/symbols, or a stopword (STOPWORDS). WordPiece continuations (`##x`) never are;
    byte-level BPE (`Ġ`) and SentencePiece (`▁`) word marks are ignored."""
    out = np.zeros(len(vocab), dtype=bool)
    for i, tok in enumerate(vocab):
        if not tok or tok.startswith("##"):
            continue
        core = tok.lstrip("Ġ▁")
        if not core:
            continue
        out[i] = core.lower() in STOPWORDS or all(unicodedata.category(c)[0] in "PS" for c in core)
    return out


# ---------------------------------------------------------------------------- UniLM attention
# Mode ids index this tuple, which is models_lib.core.masks.MODES (the builders live there).
UNILM_MODES = ("bidirectional", "left_to_right", "right_to_left", "seq2seq")
BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = range(4)
# UniLM: 1/3 bidirectional, 1/3 seq2seq, 1/6 left-to-right, 1/6 right-to-left.
UNILM_MODE_PROBS = (1 / 3, 1 / 6, 1 / 6, 1 / 3)


def unilm_attention_masks(modes: torch.Tensor, padding_mask: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
    """(B, T, T) bool, True = query i may attend key j, each row in its own mode (models_lib.core.masks:
    bidirectional: all; left-to-right: j <= i; right-to-left: j >= i; seq2seq: the source
    [CLS] A [SEP] sees the source, a target token sees the source and the target up to itself;
    padding keys hidden, a padding query sees only itself).

    modes (B,) long ids into UNILM_MODES; padding_mask (B, T) 1/0; source_lengths (B,)."""
    from models_lib.core import masks

    B, T = padding_mask.shape
    out = torch.zeros(B, T, T, dtype=torch.bool)
    for mode, name in enumerate(UNILM_MODES):
        rows = modes == mode
        if rows.any():
            out[rows] = masks.unilm_mask(name, padding_mask[rows], source_lengths[rows])
    return out
