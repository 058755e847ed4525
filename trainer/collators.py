"""Objectives as collators: each turns examples (token ids) into a model batch.

- `mask_tokens`: BERT's masked-LM corruption of one sequence (the MLM objective).
- `MLMCollator`: single segments, `[CLS] sentences... [SEP]`, MLM labels.
- `NSPCollator`: pairs `[CLS] A [SEP] B [SEP]`, segment ids 0/1, MLM labels + NSP labels.
- `build_pair_instances` / `build_packed_instances`: cut a shard's documents into examples
  (as token offset ranges, so an epoch's worth of examples is a small integer table).

All randomness comes from explicit `numpy.random.Generator`s. Each example's masks (and
pair truncation) come from a generator seeded by (seed, variant, example uid), so a
given example always gets the same masks for the same variant: static masking uses
variant = epoch % dupe_factor, dynamic masking variant = epoch (new masks each time).
The losses that go with these batches are computed by the model (models_lib heads).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError

IGNORE_INDEX = -100  # label of positions that are not predicted (torch cross_entropy's default)
NSP_IS_NEXT, NSP_NOT_NEXT = 0, 1  # Hugging Face's convention

# Seed namespaces: keeps the generator streams of different uses independent.
_MASK, _PAIRS, _ORDER, _VALID = 1, 2, 3, 4


def example_rng(seed: int, variant: int, uid: int, stream: int = _MASK) -> np.random.Generator:
    """The generator of one example's randomness (masks, truncation)."""
    return np.random.default_rng([stream, seed, variant, uid])


# ---------------------------------------------------------------------------- token ids
@dataclass(frozen=True)
class SpecialIds:
    """The ids the collators need; `special` are never masked nor used as random replacements."""

    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int
    special: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        every = tuple(sorted(set(self.special) | {self.pad, self.cls, self.sep, self.mask}))
        object.__setattr__(self, "special", every)
        lut = np.zeros(max(self.vocab_size, max(every) + 1), dtype=bool)
        lut[list(every)] = True
        object.__setattr__(self, "_lut", lut)  # id -> is special, a table lookup per token
        replace = np.flatnonzero(~lut[: self.vocab_size]).astype(np.int64)
        if len(replace) == 0:
            raise ConfigError("The tokenizer has no ordinary tokens, only special ones.")
        object.__setattr__(self, "replacement_ids", replace)

    @classmethod
    def from_tokenizer(cls, bundle: Any) -> "SpecialIds":
        """From a trainer.tokenization.TokenizerBundle."""
        return cls(pad=bundle.pad_id, cls=bundle.cls_id, sep=bundle.sep_id, mask=bundle.mask_id,
                   vocab_size=bundle.vocab_size, special=tuple(sorted(bundle.special_ids)))

    def is_special(self, ids: np.ndarray) -> np.ndarray:
        return self._lut[ids]


def mask_tokens(ids: np.ndarray, *, rng: np.random.Generator, special: SpecialIds,
                mask_prob: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """BERT's MLM corruption of one sequence -> (inputs, labels).

    Exactly round(mask_prob * n) of the n non-special tokens are chosen (at least one), like
    create_pretraining_data.py; of those 80% become [MASK], 10% a random ordinary token and
    10% stay as they are. Labels hold the original id at chosen positions, -100 elsewhere.
    """
    ids = np.asarray(ids, dtype=np.int64)
    inputs = ids.copy()
    labels = np.full_like(ids, IGNORE_INDEX)
    candidates = np.flatnonzero(~special.is_special(ids))
    if len(candidates) == 0:
        return inputs, labels
    k = min(len(candidates), max(1, int(len(candidates) * mask_prob + 0.5)))
    chosen = candidates[rng.permutation(len(candidates))[:k]]
    labels[chosen] = ids[chosen]
    u = rng.random(k)
    inputs[chosen[u < 0.8]] = special.mask
    to_random = chosen[(u >= 0.8) & (u < 0.9)]
    inputs[to_random] = special.replacement_ids[rng.integers(0, len(special.replacement_ids), len(to_random))]
    return inputs, labels


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT's truncate_seq_pair: shorten the longer side one token at a time, each token
    removed from its front or its back at random, until len(a) + len(b) <= max_tokens."""
    la, lb = len(a), len(b)
    excess = la + lb - max_tokens
    if excess <= 0:
        return a, b
    # The one-at-a-time loop in closed form: first level the longer side down to the
    # shorter one, then alternate (ties shorten b, as in the reference loop).
    first = min(excess, abs(la - lb))
    cut_a, cut_b = (first, 0) if la > lb else (0, first)
    rest = excess - first
    cut_a, cut_b = cut_a + rest // 2, cut_b + rest - rest // 2
    return _cut(a, cut_a, rng), _cut(b, cut_b, rng)


def _cut(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if n <= 0:
        return x
    front = int(rng.binomial(n, 0.5))
    return x[front:len(x) - (n - front)]


# ---------------------------------------------------------------------------- batches
@dataclass
class Example:
    """One training example before collation: token ids of segment A (and B for pairs)."""

    uid: int                     # row of the example in its variant's instance table
    variant: int                 # mask variant (see module docstring)
    a: np.ndarray
    b: np.ndarray | None = None
    is_random_next: bool = False


@dataclass
class Batch:
    input_ids: torch.Tensor              # (B, T) long
    attention_mask: torch.Tensor         # (B, T) long, 1 = real token
    token_type_ids: torch.Tensor         # (B, T) long, 0 = segment A, 1 = segment B
    mlm_labels: torch.Tensor             # (B, T) long, -100 = not predicted
    nsp_labels: torch.Tensor | None = None  # (B,) long, 0 = IsNext, 1 = NotNext

    def to(self, device: str | torch.device) -> "Batch":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.input_ids), move(self.attention_mask), move(self.token_type_ids),
                     move(self.mlm_labels), move(self.nsp_labels))

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": self.token_type_ids, "mlm_labels": self.mlm_labels,
                "nsp_labels": self.nsp_labels}

    @property
    def n_tokens(self) -> int:
        """Real (non-padding) tokens in the batch."""
        return int(self.attention_mask.sum())

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class MLMCollator:
    """Masked-LM batches of single segments: `[CLS] tokens [SEP]`, padded to the longest."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = 0.15
    seed: int = 0

    def encode(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """-> (token ids, token type ids) of one example, special tokens included."""
        a = ex.a[: self.seq_len - 2]
        ids = np.concatenate([[self.special.cls], a, [self.special.sep]]).astype(np.int64)
        return ids, np.zeros_like(ids)

    def __call__(self, examples: Sequence[Example]) -> Batch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        rows = []
        for ex in examples:
            rng = example_rng(self.seed, ex.variant, ex.uid)
            ids, types = self.encode(ex, rng)
            inputs, labels = mask_tokens(ids, rng=rng, special=self.special, mask_prob=self.mask_prob)
            rows.append((inputs, types, labels))
        T = max(len(r[0]) for r in rows)
        B = len(rows)
        input_ids = np.full((B, T), self.special.pad, dtype=np.int64)
        attention = np.zeros((B, T), dtype=np.int64)
        types = np.zeros((B, T), dtype=np.int64)
        labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
        for i, (x, t, y) in enumerate(rows):
            n = len(x)
            input_ids[i, :n] = x
            attention[i, :n] = 1
            types[i, :n] = t
            labels[i, :n] = y
        batch = Batch(*(torch.from_numpy(a) for a in (input_ids, attention, types, labels)),
                      self.nsp_labels(examples))
        self.check(batch, B)
        return batch

    def nsp_labels(self, examples: Sequence[Example]) -> torch.Tensor | None:
        return None

    def check(self, batch: Batch, n: int) -> None:
        B, T = batch.input_ids.shape
        if B != n or T > self.seq_len:
            raise ValueError(f"collated batch has shape {(B, T)}, expected ({n}, <= {self.seq_len})")
        for name in ("attention_mask", "token_type_ids", "mlm_labels"):
            if getattr(batch, name).shape != (B, T):
                raise ValueError(f"{name} has shape {tuple(getattr(batch, name).shape)}, expected {(B, T)}")
        if batch.nsp_labels is not None and batch.nsp_labels.shape != (B,):
            raise ValueError(f"nsp_labels has shape {tuple(batch.nsp_labels.shape)}, expected {(B,)}")


@dataclass
class NSPCollator(MLMCollator):
    """Next-sentence-prediction pairs (plus MLM): `[CLS] A [SEP] B [SEP]`, types 0 then 1."""

    def encode(self, ex: Example, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if ex.b is None:
            raise ValueError("NSP examples need a B segment")
        a, b = truncate_pair(ex.a, ex.b, self.seq_len - 3, rng)
        s = self.special
        ids = np.concatenate([[s.cls], a, [s.sep], b, [s.sep]]).astype(np.int64)
        types = np.zeros_like(ids)
        types[len(a) + 2:] = 1
        return ids, types

    def nsp_labels(self, examples: Sequence[Example]) -> torch.Tensor:
        return torch.tensor([NSP_NOT_NEXT if ex.is_random_next else NSP_IS_NEXT for ex in examples],
                            dtype=torch.long)


# ---------------------------------------------------------------------------- examples
@dataclass
class ShardIndex:
    """Token ids plus sentence and document boundaries (the layout of trainer.shards)."""

    tokens: np.ndarray          # (N,) token ids (a memmap for real shards)
    sentences: np.ndarray       # (S+1,) token offset of each sentence start, plus the end
    documents: np.ndarray       # (D+1,) sentence index of each document start, plus the end
    doc_token_starts: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sentences = np.asarray(self.sentences, dtype=np.int64)
        self.documents = np.asarray(self.documents, dtype=np.int64)
        self.doc_token_starts = np.unique(self.sentences[self.documents[:-1]]) if self.n_documents else \
            np.zeros(0, dtype=np.int64)

    @classmethod
    def from_documents(cls, docs: Sequence[Sequence[Sequence[int]]]) -> "ShardIndex":
        """Build from nested lists (documents of sentences of ids); for tests and small data."""
        sent_lens = [len(s) for d in docs for s in d]
        tokens = np.asarray([t for d in docs for s in d for t in s], dtype=np.int64)
        sentences = np.concatenate([[0], np.cumsum(sent_lens, dtype=np.int64)])
        documents = np.concatenate([[0], np.cumsum([len(d) for d in docs], dtype=np.int64)])
        return cls(tokens, sentences, documents)

    @classmethod
    def from_shards(cls, shards: Any) -> "ShardIndex":
        """From a trainer.shards.TokenShards (its memmap and its boundary arrays)."""
        sentences = _first_attr(shards, "sentence_offsets", "sentences", "sentence_starts")
        documents = _first_attr(shards, "document_offsets", "documents", "document_starts")
        if sentences is None or documents is None:  # fall back on the documented files
            folder = _first_attr(shards, "folder", "path", "dir", "directory")
            sentences = np.load(f"{folder}/sentences.npy")
            documents = np.load(f"{folder}/documents.npy")
        return cls(shards.tokens, sentences, documents)

    @property
    def n_documents(self) -> int:
        return len(self.documents) - 1

    @property
    def n_sentences(self) -> int:
        return len(self.sentences) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.sentences[-1])

    def span(self, start: int, end: int, sep: int | None = None) -> np.ndarray:
        """Tokens [start, end) as int64; with `sep`, a separator before each document start inside."""
        toks = np.asarray(self.tokens[start:end], dtype=np.int64)
        if sep is None:
            return toks
        lo, hi = np.searchsorted(self.doc_token_starts, [start + 1, end])
        if lo == hi:
            return toks
        return np.insert(toks, self.doc_token_starts[lo:hi] - start, sep)


def _first_attr(obj: Any, *names: str) -> Any:
    for n in names:
        v = getattr(obj, n, None)
        if v is not None and not callable(v):
            return v
    return None


# Columns of a pair-instance table.
A_START, A_END, B_START, B_END, RANDOM_NEXT = range(5)


def build_pair_instances(index: ShardIndex, *, max_tokens: int, rng: np.random.Generator,
                         short_seq_prob: float = 0.1) -> np.ndarray:
    """NSP examples the way BERT's create_pretraining_data.py makes them.

    Per document: accumulate whole sentences up to a target length (max_tokens, or with
    probability short_seq_prob a random shorter one), split the chunk at a random sentence
    boundary into A and B; half the time replace B by sentences from another document (the
    unused sentences of the chunk go back to the pool).

    One deviation: BERT makes every one-sentence chunk NotNext, which skews the labels (to
    ~60% NotNext on short documents). Here the coin decides first; an IsNext for a
    one-sentence chunk takes the document's next (or previous) sentence as B, and
    one-sentence documents give no A. So the labels stay a fair coin.

    Returns an int64 table (N, 5): token offsets a_start, a_end, b_start, b_end, is_random_next.
    """
    if index.n_documents < 2:
        raise ConfigError("Next sentence prediction needs at least two documents in the corpus; "
                          "this split has fewer. Use a larger corpus or train with MLM only.")
    off = index.sentences.tolist()
    lens = np.diff(index.sentences).tolist()
    docs = index.documents.tolist()
    D = len(docs) - 1
    rows: list[tuple[int, int, int, int, int]] = []
    for d in range(D):
        s_begin, s_end = docs[d], docs[d + 1]
        if s_end - s_begin < 2 or off[s_end] == off[s_begin]:
            # A one-sentence document has no true next sentence; were it used as an A it could
            # only be NotNext and the labels would stop being a fair coin. (It still serves as a
            # random B for other documents.)
            continue
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        chunk_start, length, i = s_begin, 0, s_begin
        while i < s_end:
            length += lens[i]
            if i == s_end - 1 or length >= target:
                n = i + 1 - chunk_start
                random_next = rng.random() < 0.5
                a_end = chunk_start + int(rng.integers(1, n)) if n >= 2 else i + 1
                a, b = (chunk_start, a_end), (0, 0)
                if not random_next:
                    if n >= 2:
                        b = (a_end, i + 1)
                    elif i + 1 < s_end:  # one long sentence: B is the sentence after it
                        b = (i + 1, i + 2)
                        i += 1
                    else:  # the document's last sentence: pair it with the one before
                        a, b = (i - 1, i), (i, i + 1)
                else:
                    target_b = max(1, target - (off[a_end] - off[chunk_start]))
                    r = d
                    for _ in range(10):
                        r = int(rng.integers(0, D))
                        if r != d and off[docs[r + 1]] > off[docs[r]]:
                            break
                    if r == d or off[docs[r + 1]] == off[docs[r]]:
                        r = _next_nonempty_doc(off, docs, d)
                    r_start = int(rng.integers(docs[r], docs[r + 1]))
                    r_end, got = r_start, 0
                    while r_end < docs[r + 1] and got < target_b:
                        got += lens[r_end]
                        r_end += 1
                    b = (r_start, r_end)
                    i = a_end - 1  # the chunk's sentences after A were not used: put them back
                if off[a[1]] > off[a[0]] and off[b[1]] > off[b[0]]:
                    rows.append((off[a[0]], off[a[1]], off[b[0]], off[b[1]], int(random_next)))
                chunk_start, length = i + 1, 0
            i += 1
    if not rows:
        raise ConfigError("Next sentence prediction needs documents of at least two sentences, and this "
                          "split has none. Train with MLM only, or use a corpus with longer documents.")
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def _next_nonempty_doc(off: list[int], docs: list[int], d: int) -> int:
    D = len(docs) - 1
    for k in range(1, D):
        r = (d + k) % D
        if off[docs[r + 1]] > off[docs[r]]:
            return r
    raise ConfigError("Next sentence prediction needs at least two non-empty documents.")


def build_packed_instances(index: ShardIndex, *, max_tokens: int) -> np.ndarray:
    """MLM-only examples: whole consecutive sentences packed up to max_tokens (documents may
    share an example, a [SEP] between them, counted here); a sentence longer than max_tokens
    is cut into pieces. Returns an int64 table (N, 2) of token offsets [start, end)."""
    off = index.sentences.tolist()
    lens = np.diff(index.sentences).tolist()
    doc_starts = set(index.doc_token_starts.tolist())
    rows: list[tuple[int, int]] = []
    start = end = None
    used = 0
    for s, L in enumerate(lens):
        if L == 0:
            continue
        if L > max_tokens:
            if start is not None:
                rows.append((start, end))
                start = None
            rows.extend((c, min(c + max_tokens, off[s + 1])) for c in range(off[s], off[s + 1], max_tokens))
            continue
        cost = L + (1 if start is not None and off[s] in doc_starts else 0)
        if start is not None and used + cost > max_tokens:
            rows.append((start, end))
            start = None
        if start is None:
            start, used = off[s], L
        else:
            used += cost
        end = off[s + 1]
    if start is not None:
        rows.append((start, end))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)
