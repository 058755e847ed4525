"""Word boundaries for Chinese (and other CJK ideograph) text, from the jieba segmenter.

BERT's tokenizer splits CJK ideographs into single characters, each its own pre-token, so
the shards' word_starts flag every Chinese character as a word start and whole-word
masking would mask single characters. Chinese BERT-wwm (Cui et al.) takes word boundaries
from a segmenter instead; here that is jieba (imported lazily, offline, logging silenced).

- `segment(text)`: jieba's words of a text.
- `word_starts_for(text, offsets, base)`: word-start flags of one encoded text, from the
  tokens' character offsets: inside a run of CJK ideographs a token starts a word exactly
  when its first character starts a jieba word; elsewhere `base` (the tokenizer's own word
  flags) is kept. Works for any tokenizer whose encodings carry offsets.
- `refine_word_starts(texts, encodings, starts)`: the same over an `encode_batch` result
  with the flags of all its tokens concatenated (what trainer.prep.shards writes).
- `TokenWordStarts`: the flags recomputed from token ids alone at collate time, for shards
  written without jieba (CJK runs are rebuilt from the vocabulary's one-character tokens).
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Sequence

import numpy as np

# The CJK ideograph blocks BERT's tokenizer splits apart (its _is_chinese_char ranges).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_CJK_RUN = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _CJK_RANGES) + "]+")

_jieba: Any = None
_lock = threading.Lock()


def _tokenizer() -> Any:
    """jieba's default tokenizer, loaded once (it reads its bundled dictionary; no network)."""
    global _jieba
    if _jieba is None:
        with _lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)  # it logs "Building prefix dict..." at INFO
                logging.getLogger("jieba").setLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba.dt
    return _jieba


def is_cjk(ch: str) -> bool:
    return _CJK_RUN.fullmatch(ch) is not None


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


def segment(text: str) -> list[str]:
    """jieba's words of `text` (accurate mode, HMM for unknown words)."""
    return list(_tokenizer().cut(text, HMM=True))


def cjk_word_starts(text: str) -> np.ndarray:
    """Sorted character offsets in `text` where a word starts inside a run of CJK ideographs."""
    found = []
    for m in _CJK_RUN.finditer(text):
        pos = m.start()
        for word in segment(m.group()):
            found.append(pos)
            pos += len(word)
    return np.asarray(found, dtype=np.int64)


def word_starts_for(text: str, offsets: Sequence[tuple[int, int]], base: np.ndarray | None = None) -> np.ndarray:
    """Word-start flags (uint8, one per token) of a text encoded into tokens with these
    character `offsets` (e.g. `tokenizers.Encoding.offsets`, relative to `text`).

    A token that starts inside a CJK run starts a word iff its first character starts a
    jieba word and the token before does not start at the same character (byte-level BPE
    can split one character into several tokens). Other tokens keep `base` (default: 1).
    """
    n = len(offsets)
    flags = np.ones(n, dtype=np.uint8) if base is None else np.array(base, dtype=np.uint8, copy=True)
    if n == 0 or not has_cjk(text):
        return flags
    runs = np.asarray([m.span() for m in _CJK_RUN.finditer(text)], dtype=np.int64).reshape(-1, 2)
    tok_start = np.asarray([o[0] for o in offsets], dtype=np.int64)
    r = np.searchsorted(runs[:, 0], tok_start, side="right") - 1
    inside = (r >= 0) & (tok_start < runs[np.maximum(r, 0), 1])
    if not inside.any():
        return flags
    starts = cjk_word_starts(text)
    first_of_char = np.concatenate([[True], tok_start[1:] != tok_start[:-1]])
    flags[inside] = (np.isin(tok_start[inside], starts) & first_of_char[inside]).astype(np.uint8)
    return flags


def refine_word_starts(texts: Sequence[str], encodings: Sequence[Any], starts: np.ndarray) -> np.ndarray:
    """Apply `word_starts_for` to every text of a batch that has CJK characters.

    `encodings[i]` is the `tokenizers.Encoding` of `texts[i]` (no special tokens) and
    `starts` the flags of all their tokens, concatenated in order; returns them refined
    (the same array, changed in place). Texts without CJK cost one regex search."""
    pos = 0
    for text, enc in zip(texts, encodings):
        n = len(enc.ids)
        if n and has_cjk(text):
            starts[pos:pos + n] = word_starts_for(text, enc.offsets, starts[pos:pos + n])
        pos += n
    return starts


def vocab_strings(bundle: Any) -> list[str | None]:
    """Token string of every id of a trainer.prep.tokenization.TokenizerBundle (None for gaps)."""
    vocab: list[str | None] = [None] * bundle.vocab_size
    for tok, i in bundle.tok.get_vocab(with_added_tokens=True).items():
        if 0 <= i < len(vocab):
            vocab[i] = tok
    return vocab


class TokenWordStarts:
    """Word-start flags of a sequence of token ids, from the vocabulary alone.

    Outside CJK: the tokenizer's word marks (WordPiece: a `##` token continues a word;
    byte-level BPE: a `Ġ` token starts one; SentencePiece: a `▁` token starts one), or
    flags read from the shards when given. Runs of one-character CJK tokens are joined and
    segmented with jieba. Special tokens count as word starts (they are never masked)."""

    def __init__(self, vocab: Sequence[str | None], *, algorithm: str = "wordpiece"):
        V = len(vocab)
        self.cjk_char = np.zeros(V, dtype=bool)
        self.starts = np.ones(V, dtype=bool)
        self.chars: list[str] = [""] * V
        for i, tok in enumerate(vocab):
            if not tok:
                continue
            core = tok[2:] if tok.startswith("##") else tok.lstrip("Ġ▁")
            if len(core) == 1 and is_cjk(core):
                self.cjk_char[i] = True
                self.chars[i] = core
            if algorithm == "wordpiece":
                self.starts[i] = not tok.startswith("##")
            elif algorithm == "bpe":
                self.starts[i] = tok.startswith("Ġ") or not tok[0].isalnum()
            elif algorithm == "unigram":
                self.starts[i] = tok.startswith("▁") or not tok[0].isalnum()

    @property
    def has_cjk(self) -> bool:
        return bool(self.cjk_char.any())

    @classmethod
    def from_tokenizer(cls, bundle: Any) -> "TokenWordStarts":
        """From a trainer.prep.tokenization.TokenizerBundle."""
        return cls(vocab_strings(bundle), algorithm=str(bundle.meta.get("algorithm", "wordpiece")))

    def __call__(self, ids: np.ndarray, stored: np.ndarray | None = None) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        inside = ids < len(self.starts)
        flags = (np.array(stored, dtype=np.uint8, copy=True) if stored is not None
                 else np.where(inside, self.starts[np.minimum(ids, len(self.starts) - 1)], True).astype(np.uint8))
        cjk = inside & self.cjk_char[np.minimum(ids, len(self.cjk_char) - 1)]
        if not cjk.any():
            return flags
        edges = np.diff(np.concatenate([[0], cjk.astype(np.int8), [0]]))
        for lo, hi in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            text = "".join(self.chars[i] for i in ids[lo:hi])
            run = np.zeros(hi - lo, dtype=np.uint8)
            pos = 0
            for word in segment(text):
                run[pos] = 1
                pos += len(word)
            flags[lo:hi] = run
        return flags
