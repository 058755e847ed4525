"""The prepared corpus encoded to token ids, stored flat on disk for memory-mapped reading.

``encode_corpus`` writes, for each split, ``tokenizer_dir/shards/{train,valid}/``::

    tokens.bin       all token ids, sentence after sentence (uint16 when the vocabulary
                     fits in 16 bits, else uint32; no special tokens)
    sentences.npy    int64, S+1 entries: token offset where each sentence starts, then the end
    documents.npy    int64, D+1 entries: sentence index where each document starts, then S
    word_starts.bin  uint8, one per token: 1 where the token starts a word (whole-word masking)
    shard.json       {"dtype", "n_tokens", "n_sentences", "n_documents", "vocab_size", ...}

Sentences are read from ``train.txt``/``valid.txt`` (one per line, a blank line between
documents) and encoded with ``encode_batch`` a chunk at a time, so memory stays small
whatever the corpus size. Sentences that encode to no tokens at all (e.g. only control
characters) are skipped, and so are documents left without sentences. Everything is
written to a temporary folder that replaces ``shards/`` only when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from itertools import chain
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.errors import CorpusError, TokenizerError
from trainer.prep.tokenization import load_tokenizer
from trainer.progress import PercentProgress
from trainer.prep.segmenter import refine_word_starts

SPLITS = ("train", "valid")
CHUNK_SENTENCES = 4096
FORMAT_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id of a ``vocab_size`` vocabulary."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def encode_corpus(corpus_dir: Path, tokenizer_dir: Path, progress: Callable[[float], None] | None = None) -> dict:
    """Encode ``corpus_dir``'s train/valid text with the tokenizer in ``tokenizer_dir``.

    Returns ``{"dtype", "vocab_size", "n_tokens", "train": {"n_tokens", "n_sentences",
    "n_documents", "skipped_sentences"}, "valid": {...}}``.
    """
    corpus_dir, tokenizer_dir = Path(corpus_dir), Path(tokenizer_dir)
    paths = {split: corpus_dir / f"{split}.txt" for split in SPLITS}
    for path in paths.values():
        if not path.is_file():
            raise CorpusError(f"The prepared corpus is incomplete ({path.name} is missing); prepare the corpus again.")
    bundle = load_tokenizer(tokenizer_dir)
    dtype = token_dtype(bundle.vocab_size)
    total_bytes = max(1, sum(p.stat().st_size for p in paths.values()))
    report = PercentProgress(progress)
    report(0)

    final = tokenizer_dir / "shards"
    tmp = Path(tempfile.mkdtemp(prefix=".shards-", dir=tokenizer_dir))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the folder it becomes should not be
        stats: dict = {"dtype": dtype.name, "vocab_size": bundle.vocab_size}
        done = 0
        for split in SPLITS:
            def on_bytes(n: int, base: int = done) -> None:
                report(100 * (base + n) / total_bytes)

            stats[split] = _encode_split(bundle, paths[split], tmp / split, dtype, on_bytes)
            done += paths[split].stat().st_size
        stats["n_tokens"] = sum(stats[s]["n_tokens"] for s in SPLITS)
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report(100)
    return stats


def _encode_split(bundle, text_path: Path, out: Path, dtype: np.dtype, on_bytes: Callable[[int], None]) -> dict:
    out.mkdir(parents=True)
    n_tokens = n_sentences = skipped = 0
    with (
        open(out / "tokens.bin", "wb") as tokens_fh,
        open(out / "word_starts.bin", "wb") as starts_fh,
        open(out / "sentences.tmp", "wb") as sent_fh,
        open(out / "documents.tmp", "wb") as doc_fh,
    ):
        for sentences, doc_starts, bytes_read in _chunks(text_path):
            encodings = bundle.tok.encode_batch(sentences, add_special_tokens=False)
            lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
            n = int(lengths.sum())
            ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int64, count=n)
            # Word ids restart at 0 in every sentence; a token starts a word when its word id
            # differs from the previous token's, and a sentence's first token always does.
            words = np.fromiter(chain.from_iterable(e.word_ids for e in encodings), dtype=np.int64, count=n)
            keep = lengths > 0
            firsts = (np.cumsum(lengths) - lengths)[keep]  # chunk offset of each kept sentence
            starts = np.ones(n, dtype=np.uint8)
            starts[1:] = words[1:] != words[:-1]
            starts[firsts] = 1
            # CJK text arrives one character per token: word boundaries come from a segmenter.
            starts = refine_word_starts(sentences, encodings, starts)

            # A document starts at its first kept sentence; one left with no kept sentence
            # starts where the next does and is removed below.
            kept_before = np.concatenate([[0], np.cumsum(keep)])
            if doc_starts:
                doc_fh.write((n_sentences + kept_before[np.asarray(doc_starts)]).astype(np.int64).tobytes())
            sent_fh.write((n_tokens + firsts).astype(np.int64).tobytes())
            tokens_fh.write(ids.astype(dtype).tobytes())
            starts_fh.write(starts.tobytes())
            n_tokens += len(ids)
            n_sentences += int(keep.sum())
            skipped += int((~keep).sum())
            on_bytes(bytes_read)
    sentence_starts = _memmap(out / "sentences.tmp", np.dtype(np.int64), n_sentences)
    doc_starts_all = np.fromfile(out / "documents.tmp", dtype=np.int64)
    doc_starts_all = np.unique(doc_starts_all[doc_starts_all < n_sentences])
    n_documents = len(doc_starts_all)
    _save_npy(out / "sentences.npy", sentence_starts, n_tokens)
    _save_npy(out / "documents.npy", doc_starts_all, n_sentences)
    del sentence_starts
    (out / "sentences.tmp").unlink()
    (out / "documents.tmp").unlink()
    meta = {
        "dtype": dtype.name,
        "word_segmenter": "jieba",  # word_starts.bin has CJK word boundaries (trainer.prep.segmenter)
        "n_tokens": n_tokens,
        "n_sentences": n_sentences,
        "n_documents": n_documents,
        "vocab_size": bundle.vocab_size,
        "has_word_starts": True,
        "tokenizer": {k: bundle.meta.get(k) for k in ("algorithm", "lowercase", "special_tokens")},
        "source": text_path.name,
        "version": FORMAT_VERSION,
    }
    (out / "shard.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return {"n_tokens": n_tokens, "n_sentences": n_sentences, "n_documents": n_documents, "skipped_sentences": skipped}


def _save_npy(path: Path, starts: np.ndarray, end: int) -> None:
    """Save ``starts`` plus the final ``end`` as a .npy (via a memmap: no second copy in memory)."""
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(len(starts) + 1,))
    arr[:-1] = starts
    arr[-1] = end
    arr.flush()
    del arr


def _chunks(path: Path) -> Iterator[tuple[list[str], list[int], int]]:
    """Yields (sentences, indices where a document starts, bytes read so far) per chunk."""
    sentences: list[str] = []
    doc_starts: list[int] = []
    new_doc = True
    done = 0
    with open(path, "rb") as fh:
        for raw in fh:
            done += len(raw)
            line = raw.decode("utf-8").strip()
            if not line:
                new_doc = True
                continue
            if new_doc:
                doc_starts.append(len(sentences))
                new_doc = False
            sentences.append(line)
            if len(sentences) >= CHUNK_SENTENCES:
                yield sentences, doc_starts, done
                sentences, doc_starts = [], []
    if sentences or doc_starts:
        yield sentences, doc_starts, done


def _replace_dir(tmp: Path, final: Path) -> None:
    old = None
    if final.exists():
        old = final.with_name(f".shards-old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)




# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


@dataclass
class TokenShards:
    """One split's encoded corpus, memory-mapped (nothing is read until it is used)."""

    folder: Path
    meta: dict
    tokens: np.ndarray  # (n_tokens,) uint16/uint32 memmap
    sentence_offsets: np.ndarray  # (n_sentences + 1,) int64: token offsets
    document_offsets: np.ndarray  # (n_documents + 1,) int64: sentence indices
    word_starts: np.ndarray | None  # (n_tokens,) uint8 memmap, or None

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])

    @property
    def n_sentences(self) -> int:
        return int(self.meta["n_sentences"])

    @property
    def n_documents(self) -> int:
        return int(self.meta["n_documents"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def sentence(self, i: int) -> np.ndarray:
        """Token ids of sentence ``i`` (a view into the memmap)."""
        return self.tokens[self.sentence_offsets[i] : self.sentence_offsets[i + 1]]

    def sentence_word_starts(self, i: int) -> np.ndarray:
        if self.word_starts is None:
            raise TokenizerError("These shards were written without word boundaries; encode the corpus again.")
        return self.word_starts[self.sentence_offsets[i] : self.sentence_offsets[i + 1]]

    def document_sentences(self, d: int) -> range:
        """Indices of the sentences of document ``d``."""
        return range(int(self.document_offsets[d]), int(self.document_offsets[d + 1]))

    def document(self, d: int) -> list[np.ndarray]:
        """The sentences of document ``d``, each an array of token ids."""
        return [self.sentence(i) for i in self.document_sentences(d)]

    def sentence_lengths(self) -> np.ndarray:
        return np.diff(self.sentence_offsets)


def open_shards(tokenizer_dir: Path, split: str) -> TokenShards:
    """Open the ``split`` ("train" or "valid") shards of a tokenizer folder, memory-mapped."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    folder = Path(tokenizer_dir) / "shards" / split
    meta_path = folder / "shard.json"
    if not meta_path.is_file():
        raise TokenizerError(
            f"The {split} data has not been encoded with this tokenizer yet (shards/{split} is "
            "missing); train the tokenizer again to encode the corpus."
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        dtype = np.dtype(meta["dtype"])
        n_tokens = int(meta["n_tokens"])
        tokens = _memmap(folder / "tokens.bin", dtype, n_tokens)
        sentence_offsets = np.load(folder / "sentences.npy", mmap_mode="r")
        document_offsets = np.load(folder / "documents.npy", mmap_mode="r")
        ws_path = folder / "word_starts.bin"
        word_starts = _memmap(ws_path, np.dtype(np.uint8), n_tokens) if ws_path.exists() else None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TokenizerError(f"The encoded {split} data is damaged ({e}); train the tokenizer again.") from None
    if (
        len(sentence_offsets) != int(meta["n_sentences"]) + 1
        or len(document_offsets) != int(meta["n_documents"]) + 1
        or (len(sentence_offsets) and sentence_offsets[-1] != n_tokens)
    ):
        raise TokenizerError(f"The encoded {split} data is inconsistent; train the tokenizer again.")
    return TokenShards(folder, meta, tokens, sentence_offsets, document_offsets, word_starts)


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    size = path.stat().st_size
    if size != count * dtype.itemsize:
        raise ValueError(f"{path.name} has {size} bytes, expected {count * dtype.itemsize}")
    if count == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))
