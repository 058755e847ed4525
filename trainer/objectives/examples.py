"""Examples before collation: the tokenizer's special ids, one example's token ids, and the
instance tables that cut a shard's documents into examples.

- `SpecialIds`: the ids collators need (never masked nor used as random replacements).
- `Example`: token ids of segment A (and B for pairs) with the flags masking needs.
- `ShardIndex`: token ids plus sentence and document boundaries of a split's shards.
- `SentencePairs`: how a pair objective makes its pairs (which table, the flag) and what its head means.
- `build_pair_instances` / `build_sop_instances` / `build_packed_instances` /
  `build_chunk_instances`: an epoch's worth of examples as a small integer table of token
  offsets; packing is RoBERTa's FULL-SENTENCES or DOC-SENTENCES (`PACKINGS`), raw text is cut
  as a `TextLayout` says (fixed-length chunks of the corpus as one stream, or whole sentences
  of one document).

All randomness comes from explicit `numpy.random.Generator`s. Each example's masks (and
pair truncation, UniLM mode) come from a generator seeded by (seed, variant, example uid)
(`example_rng`), so a given example always gets the same masks for the same variant: static
masking uses variant = epoch % dupe_factor, dynamic masking variant = epoch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from trainer.errors import ConfigError

# Seed namespaces: keeps the generator streams of different uses independent.
_MASK, _PAIRS, _ORDER, _VALID = 1, 2, 3, 4

def example_rng(seed: int, variant: int, uid: int, stream: int = _MASK) -> np.random.Generator:
    """The generator of one example's randomness (masks, truncation)."""
    return np.random.default_rng([stream, seed, variant, uid])


# ---------------------------------------------------------------------------- token ids
@dataclass(frozen=True)
class SpecialIds:
    """The ids the collators need; `special` are never masked nor used as random replacements.

    eos ends encoder inputs, decoder targets and documents in causal-LM streams: the
    tokenizer's separator (`</s>` for byte-level BPE, `[SEP]` for Unigram/WordPiece), the
    default when None. sentinels are T5's `<extra_id_0>`, `<extra_id_1>`, ... ids in that
    order (empty when the tokenizer has none); they are special too."""

    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int
    special: tuple[int, ...] = ()
    eos: int | None = None
    sentinels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.eos is None:
            object.__setattr__(self, "eos", self.sep)
        object.__setattr__(self, "sentinels", tuple(int(i) for i in self.sentinels))
        every = tuple(sorted(set(self.special) | set(self.sentinels)
                             | {self.pad, self.cls, self.sep, self.mask, self.eos}))
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
        """From a trainer.prep.tokenization.TokenizerBundle."""
        return cls(pad=bundle.pad_id, cls=bundle.cls_id, sep=bundle.sep_id, mask=bundle.mask_id,
                   vocab_size=bundle.vocab_size, special=tuple(sorted(bundle.special_ids)),
                   eos=bundle.sep_id, sentinels=tuple(getattr(bundle, "sentinel_ids", None) or ()))

    def is_special(self, ids: np.ndarray) -> np.ndarray:
        return self._lut[ids]


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT's truncate_seq_pair: shorten the longer side one token at a time, each token
    removed from its front or its back at random, until len(a) + len(b) <= max_tokens."""
    sa, sb = truncate_pair_slices(len(a), len(b), max_tokens, rng)
    return a[sa], b[sb]


def truncate_pair_slices(la: int, lb: int, max_tokens: int, rng: np.random.Generator) -> tuple[slice, slice]:
    """`truncate_pair` as the two slices it keeps (to cut word-start flags alike)."""
    excess = la + lb - max_tokens
    if excess <= 0:
        return slice(0, la), slice(0, lb)
    # The one-at-a-time loop in closed form: first level the longer side down to the
    # shorter one, then alternate (ties shorten b, as in the reference loop).
    first = min(excess, abs(la - lb))
    cut_a, cut_b = (first, 0) if la > lb else (0, first)
    rest = excess - first
    cut_a, cut_b = cut_a + rest // 2, cut_b + rest - rest // 2
    return _cut(la, cut_a, rng), _cut(lb, cut_b, rng)


def _cut(length: int, n: int, rng: np.random.Generator) -> slice:
    if n <= 0:
        return slice(0, length)
    front = int(rng.binomial(n, 0.5))
    return slice(front, length - (n - front))


# ---------------------------------------------------------------------------- batches
@dataclass
class Example:
    """One training example before collation: token ids of segment A (and B for pairs)."""

    uid: int                     # row of the example in its variant's instance table
    variant: int                 # mask variant (see module docstring)
    a: np.ndarray
    b: np.ndarray | None = None
    is_random_next: bool = False  # B comes from another document (SentencePairs.random_next: NSP)
    swapped: bool = False         # A and B are two consecutive segments in swapped order (SOP)
    a_starts: np.ndarray | None = None  # word-start flags of a (1 = starts a word); needed by
    b_starts: np.ndarray | None = None  # every masking unit but "token"
    sentence_starts: np.ndarray | None = None  # offsets in a where its sentences start (0 first);
                                               # TextLayout "sentences" only (sentence permutation)


# ---------------------------------------------------------------------------- examples
@dataclass
class ShardIndex:
    """Token ids plus sentence and document boundaries (the layout of trainer.prep.shards), and the
    per-token word-start flags when the shards have them."""

    tokens: np.ndarray          # (N,) token ids (a memmap for real shards)
    sentences: np.ndarray       # (S+1,) token offset of each sentence start, plus the end
    documents: np.ndarray       # (D+1,) sentence index of each document start, plus the end
    word_starts: np.ndarray | None = None  # (N,) uint8, 1 = the token starts a word
    meta: dict = field(default_factory=dict)  # shard.json
    doc_token_starts: np.ndarray = field(init=False, repr=False)
    _stream_docs: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.sentences = np.asarray(self.sentences, dtype=np.int64)
        self.documents = np.asarray(self.documents, dtype=np.int64)
        self.doc_token_starts = np.unique(self.sentences[self.documents[:-1]]) if self.n_documents else \
            np.zeros(0, dtype=np.int64)

    @classmethod
    def from_documents(cls, docs: Sequence[Sequence[Sequence[int]]],
                       word_starts: Sequence[Sequence[Sequence[int]]] | None = None) -> "ShardIndex":
        """Build from nested lists (documents of sentences of ids, and optionally of word-start
        flags in the same layout); for tests and small data."""
        sent_lens = [len(s) for d in docs for s in d]
        tokens = np.asarray([t for d in docs for s in d for t in s], dtype=np.int64)
        sentences = np.concatenate([[0], np.cumsum(sent_lens, dtype=np.int64)])
        documents = np.concatenate([[0], np.cumsum([len(d) for d in docs], dtype=np.int64)])
        flags = None
        if word_starts is not None:
            flags = np.asarray([f for d in word_starts for s in d for f in s], dtype=np.uint8)
            if len(flags) != len(tokens):
                raise ValueError(f"{len(flags)} word-start flags for {len(tokens)} tokens")
        return cls(tokens, sentences, documents, flags)

    @classmethod
    def from_shards(cls, shards: Any) -> "ShardIndex":
        """From a trainer.prep.shards.TokenShards (its memmaps and its boundary arrays)."""
        sentences = _first_attr(shards, "sentence_offsets", "sentences", "sentence_starts")
        documents = _first_attr(shards, "document_offsets", "documents", "document_starts")
        if sentences is None or documents is None:  # fall back on the documented files
            folder = _first_attr(shards, "folder", "path", "dir", "directory")
            sentences = np.load(f"{folder}/sentences.npy")
            documents = np.load(f"{folder}/documents.npy")
        meta = getattr(shards, "meta", None)
        return cls(shards.tokens, sentences, documents, _first_attr(shards, "word_starts"),
                   dict(meta) if isinstance(meta, dict) else {})

    @property
    def n_documents(self) -> int:
        return len(self.documents) - 1

    @property
    def n_sentences(self) -> int:
        return len(self.sentences) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.sentences[-1])

    def _doc_breaks(self, start: int, end: int) -> np.ndarray:
        """Offsets (relative to start) of the document starts strictly inside (start, end)."""
        lo, hi = np.searchsorted(self.doc_token_starts, [start + 1, end])
        return self.doc_token_starts[lo:hi] - start

    def span(self, start: int, end: int, sep: int | None = None) -> np.ndarray:
        """Tokens [start, end) as int64; with `sep`, a separator before each document start inside."""
        toks = np.asarray(self.tokens[start:end], dtype=np.int64)
        if sep is None:
            return toks
        breaks = self._doc_breaks(start, end)
        return np.insert(toks, breaks, sep) if len(breaks) else toks

    def sentence_starts_in(self, start: int, end: int) -> np.ndarray:
        """Offsets (relative to start) where the sentences of tokens [start, end) begin; 0 is
        always one (a piece of a long sentence counts as a sentence)."""
        lo, hi = np.searchsorted(self.sentences, [start + 1, end])
        return np.concatenate([[0], self.sentences[lo:hi] - start]).astype(np.int64)

    # The corpus as one stream of tokens, for fixed-length chunks (TextLayout "chunks"):
    # documents one after another, each followed by a separator when one is given (so stream
    # offset = token offset + number of documents before it).
    def stream_length(self, doc_sep: bool) -> int:
        return self.n_tokens + (self.n_documents if doc_sep else 0)

    def stream(self, start: int, end: int, sep: int | None = None) -> np.ndarray:
        """Tokens [start, end) of the stream as int64; with `sep`, it follows every document."""
        if sep is None:
            return np.asarray(self.tokens[start:end], dtype=np.int64)
        if end <= start:
            return np.zeros(0, dtype=np.int64)
        if self._stream_docs is None:  # once per index: O(documents)
            bounds = self.sentences[self.documents]             # (D+1,) token offset of each document start
            self._stream_docs = (bounds, bounds[:-1] + np.arange(self.n_documents))  # + stream offsets
        bounds, firsts = self._stream_docs
        pos = np.arange(start, end, dtype=np.int64)
        doc = np.searchsorted(firsts, pos, side="right") - 1
        tok = pos - doc                                    # token offset (= the document's end at its separator)
        is_sep = tok == bounds[doc + 1]
        lo = int(tok[0])
        chunk = np.asarray(self.tokens[lo:int(tok[-1]) + 1], dtype=np.int64)
        return np.where(is_sep, sep, chunk[np.minimum(tok - lo, len(chunk) - 1)]) if len(chunk) else \
            np.full(len(pos), sep, dtype=np.int64)

    def span_starts(self, start: int, end: int, sep: bool = False) -> np.ndarray | None:
        """Word-start flags of `span(start, end, sep)` (a separator counts as a start), or None
        when the shards have no flags."""
        if self.word_starts is None:
            return None
        flags = np.array(self.word_starts[start:end], dtype=np.uint8)
        if not sep:
            return flags
        breaks = self._doc_breaks(start, end)
        return np.insert(flags, breaks, 1) if len(breaks) else flags


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


def build_sop_instances(index: ShardIndex, *, max_tokens: int, rng: np.random.Generator,
                        short_seq_prob: float = 0.1, swap_prob: float = 0.5) -> np.ndarray:
    """Sentence-order-prediction examples (ALBERT's create_pretraining_data.py without the
    random-next branch): per document, whole sentences are accumulated up to a target length
    (max_tokens, or with probability short_seq_prob a random shorter one) and the chunk is
    split at a random sentence boundary into two consecutive segments; with probability
    swap_prob they are presented in swapped order.

    A one-sentence chunk takes the document's next sentence as its second segment (or, at
    the document's end, the previous one as its first); ALBERT would fall back on a random
    document there, which is not an ordering example. One-sentence documents give none.
    With swap_prob=0 these are UniLM's consecutive (source, target) pairs.

    Returns an int64 table (N, 5): a_start, a_end, b_start, b_end (token offsets of the
    segments in the order presented) and swapped; for a swapped row b_end == a_start.
    """
    off = index.sentences.tolist()
    lens = np.diff(index.sentences).tolist()
    docs = index.documents.tolist()
    rows: list[tuple[int, int, int, int, int]] = []
    for d in range(len(docs) - 1):
        s_begin, s_end = docs[d], docs[d + 1]
        if s_end - s_begin < 2 or off[s_end] == off[s_begin]:
            continue
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        chunk_start, length, i = s_begin, 0, s_begin
        while i < s_end:
            length += lens[i]
            if i == s_end - 1 or length >= target:
                if i == chunk_start:  # one sentence: pair it with a neighbour
                    if i + 1 < s_end:
                        i += 1
                    else:
                        chunk_start = i - 1
                n = i + 1 - chunk_start
                split = chunk_start + int(rng.integers(1, n))
                swapped = rng.random() < swap_prob
                first, second = (off[chunk_start], off[split]), (off[split], off[i + 1])
                if first[1] > first[0] and second[1] > second[0]:
                    a, b = (second, first) if swapped else (first, second)
                    rows.append((a[0], a[1], b[0], b[1], int(swapped)))
                chunk_start, length = i + 1, 0
            i += 1
    if not rows:
        raise ConfigError("Sentence pairs (SOP, UniLM) need documents of at least two sentences, and this "
                          "split has none. Train with MLM only, or use a corpus with longer documents.")
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


@dataclass(frozen=True)
class SentencePairs:
    """How an objective makes its sentence-pair examples, and what its pair head learns from them.

    The data pipeline (trainer.training.data.ExampleSource) builds the instance table from it and
    sets each example's flag; the masking inspector and the explorer read the head's name and the
    meanings of its two classes from it, so a new pair objective declares all of this here.

    random_next: B is, half the time, a segment of another document (NSP's table,
    `build_pair_instances`); otherwise A and B are consecutive segments of one document
    (`build_sop_instances`), presented swapped with probability `swap_prob`.
    head: the model's sentence-pair head that learns the flag: the batch carries its targets as
    `<head>_labels`, the model answers `<head>_logits` (models_lib); "" for pairs with no head
    (UniLM's consecutive source and target).
    meanings: what the head's classes 0 and 1 mean, as the masking inspector shows them."""

    random_next: bool = False
    swap_prob: float = 0.0
    head: str = ""
    meanings: tuple[str, str] | tuple[()] = ()

    @property
    def judges_order(self) -> bool:
        """Its head tells a pair in its document's order from a swapped one (SOP), rather than a
        following segment from a random one (NSP)."""
        return bool(self.head) and not self.random_next

    def instances(self, index: ShardIndex, *, max_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """The instance table of one variant (columns A_START .. RANDOM_NEXT; the last is the flag)."""
        if self.random_next:
            return build_pair_instances(index, max_tokens=max_tokens, rng=rng)
        return build_sop_instances(index, max_tokens=max_tokens, rng=rng, swap_prob=self.swap_prob)

    def flags(self, flag: bool) -> dict[str, bool]:
        """The Example fields a table row's flag sets: B from another document, or A and B swapped."""
        return {"is_random_next": flag} if self.random_next else {"swapped": flag}


# RoBERTa's input formats for single-segment objectives (Liu et al. 2019, section 4.2).
PACKINGS: dict[str, str] = {
    "full-sentences": "FULL-SENTENCES: whole sentences packed up to the length, across document "
                      "boundaries, with an extra separator between documents.",
    "doc-sentences": "DOC-SENTENCES: like FULL-SENTENCES but never across a document boundary; "
                     "sequences at a document's end may be shorter (padded).",
}


@dataclass(frozen=True)
class TextLayout:
    """The raw text an encoder-decoder or decoder-only collator wants per example.

    kind "chunks": the corpus read as one stream (ShardIndex.stream) and cut into pieces of
    exactly `length` tokens (the last one may be shorter), crossing sentence and document
    boundaries; `doc_sep` follows every document (EOS for causal LMs) or, None, documents are
    simply concatenated (T5's pretraining stream).
    kind "sentences": whole consecutive sentences of one document packed up to `length`
    tokens (DOC-SENTENCES), with their sentence starts (sentence permutation).
    kind "streams": the stream of "chunks" split into one contiguous part per batch row, read in
    order (never shuffled): batch k holds segment k of every part, so a model with a memory
    (Transformer-XL, XLNet) reads each part's segments one after another, as the papers'
    batched streams. Each segment carries `overlap` more tokens (the next segment's first:
    the targets of a causal LM), and all have exactly `length` + overlap tokens."""

    kind: str
    length: int
    doc_sep: int | None = None
    overlap: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("chunks", "sentences", "streams"):
            raise ValueError(f"TextLayout kind must be 'chunks', 'sentences' or 'streams', not {self.kind!r}")
        if self.length < 1:
            raise ConfigError(f"The sequence length leaves {self.length} tokens of text per example; "
                              "use a longer seq_len.")


def build_chunk_instances(index: ShardIndex, *, length: int, doc_sep: bool = False, min_tokens: int = 2) -> np.ndarray:
    """Fixed-length pieces of the corpus stream (ShardIndex.stream): [k*length, (k+1)*length)
    for every k, the last piece cut at the stream's end and dropped when shorter than
    min_tokens (nothing to predict). Returns an int64 table (N, 2) of stream offsets."""
    total = index.stream_length(doc_sep)
    starts = np.arange(0, total, length, dtype=np.int64)
    ends = np.minimum(starts + length, total)
    keep = ends - starts >= min_tokens
    return np.stack([starts[keep], ends[keep]], axis=1).reshape(-1, 2)


def build_stream_instances(index: ShardIndex, *, length: int, streams: int, doc_sep: bool = False,
                           overlap: int = 0) -> np.ndarray:
    """TextLayout "streams": the corpus stream cut into `streams` contiguous parts of n segments
    of `length` tokens each (the tail that does not fill a segment in every part is dropped),
    laid out batch-major: row k * streams + b is segment k of part b, [start, start + length +
    overlap). Returns an int64 table (n * streams, 2) of stream offsets, to be read in order."""
    total = index.stream_length(doc_sep)
    n = max(0, (total - overlap) // (streams * length)) if streams > 0 else 0
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    part = np.arange(streams, dtype=np.int64) * n * length          # (S,) where each part starts
    starts = (np.arange(n, dtype=np.int64)[:, None] * length + part[None, :]).reshape(-1)
    return np.stack([starts, starts + length + overlap], axis=1)


def build_packed_instances(index: ShardIndex, *, max_tokens: int, cross_documents: bool = True) -> np.ndarray:
    """Single-segment examples: whole consecutive sentences packed up to max_tokens; a sentence
    longer than max_tokens is cut into pieces.

    cross_documents=True is RoBERTa's FULL-SENTENCES: documents may share an example, with a
    [SEP] between them (counted here, inserted by ShardIndex.span(..., sep=...)).
    cross_documents=False is DOC-SENTENCES: an example ends where its document ends.
    Returns an int64 table (N, 2) of token offsets [start, end)."""
    off = index.sentences.tolist()
    lens = np.diff(index.sentences).tolist()
    doc_starts = set(index.doc_token_starts.tolist())
    rows: list[tuple[int, int]] = []
    start = end = None
    used = 0
    for s, L in enumerate(lens):
        if L == 0:
            continue
        new_doc = start is not None and off[s] in doc_starts
        if new_doc and not cross_documents:
            rows.append((start, end))
            start = None
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
