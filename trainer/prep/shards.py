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
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import chain
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.errors import CorpusError, TokenizerError
from trainer.prep.tokenization import load_tokenizer
from trainer.progress import Stages
from trainer.prep.segmenter import has_cjk, refine_word_starts
from trainer.prep.textfile import documents
from trainer.prep.workers import PieceFailed, done_progress, progress_file, run_pieces, serve

SPLITS = ("train", "valid")
CHUNK_SENTENCES = 4096
FORMAT_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id of a ``vocab_size`` vocabulary."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


ENCODE_WORK = ".encode-work"
PIECE_BYTES = 32 << 20  # the largest piece an encode worker takes
MIN_PIECE_BYTES = 1 << 20  # and the smallest, when the text is cut finer to give every worker some
PIECES_PER_WORKER = 4  # pieces a worker gets at least, text allowing, so none waits while one works


def encode_corpus(corpus_dir: Path, tokenizer_dir: Path, progress: Callable[[float], None] | None = None,
                  workers: int | None = None, piece_bytes: int | None = None) -> dict:
    """Encode ``corpus_dir``'s train/valid text with the tokenizer in ``tokenizer_dir``.

    Each split's text is cut at document boundaries into pieces of about ``piece_bytes`` (default:
    encode_piece_bytes: at most 32 MB, and finer for a small text so each worker gets some), encoded
    by up to ``workers`` processes (default: every core; 1 encodes here), each piece written to
    ``tokenizer_dir/.encode-work/`` with a marker, then joined into ``shards/``. The shards are the
    same whatever the number of workers; a killed encode, called again with the same tokenizer and
    text, encodes only the pieces that have no marker.

    Returns ``{"dtype", "vocab_size", "n_tokens", "train": {"n_tokens", "n_sentences",
    "n_documents", "skipped_sentences"}, "valid": {...}, "seconds", "workers"}``.
    """
    from trainer.prep.pipeline import default_workers

    started = time.monotonic()
    corpus_dir, tokenizer_dir = Path(corpus_dir), Path(tokenizer_dir)
    paths = {split: corpus_dir / f"{split}.txt" for split in SPLITS}
    for path in paths.values():
        if not path.is_file():
            raise CorpusError(f"The prepared corpus is incomplete ({path.name} is missing); prepare the corpus again.")
    bundle = load_tokenizer(tokenizer_dir)
    dtype = token_dtype(bundle.vocab_size)
    total_bytes = max(1, sum(p.stat().st_size for p in paths.values()))
    workers = default_workers(total_bytes) if workers is None else max(1, int(workers))
    report = Stages(progress, {"encode": ("Encoding into token shards", 100.0)})
    report.percent(0)

    piece_bytes = piece_bytes or encode_piece_bytes(total_bytes, workers)
    pieces = [(split, paths[split], start, stop) for split in SPLITS
              for start, stop in _document_ranges(paths[split], piece_bytes)]
    work = _encode_work(tokenizer_dir, paths, pieces)
    final = tokenizer_dir / "shards"
    tmp = Path(tempfile.mkdtemp(prefix=".shards-", dir=tokenizer_dir))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the folder it becomes should not be
        _encode_pieces(bundle, pieces, work, dtype, workers, report, total_bytes)
        stats: dict = {"dtype": dtype.name, "vocab_size": bundle.vocab_size}
        for split in SPLITS:
            parts = [i for i, p in enumerate(pieces) if p[0] == split]
            stats[split] = _join_parts(bundle, [work / f"{i:06d}" for i in parts], tmp / split, dtype,
                                       paths[split])
        stats["n_tokens"] = sum(stats[s]["n_tokens"] for s in SPLITS)
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    report.finish("encode", total_bytes / 1e6)
    report.percent(100)
    stats["seconds"] = round(time.monotonic() - started, 3)
    stats["workers"] = workers
    return stats


def encode_piece_bytes(total_bytes: int, workers: int) -> int:
    """The encode's piece size: PIECE_BYTES, or less when the text would give a worker fewer than
    PIECES_PER_WORKER pieces (never under MIN_PIECE_BYTES). A 12 MB train split was one 32 MB
    piece, so one of two workers encoded it all. Pieces depend on the text and the workers only, so
    a resumed encode with the same workers finds its pieces again; the shards do not depend on them."""
    share = -(-max(1, total_bytes) // max(1, workers * PIECES_PER_WORKER))
    return max(MIN_PIECE_BYTES, min(PIECE_BYTES, share))


def _document_ranges(path: Path, piece_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of ``path`` that start at a document (after a blank line) and cover it in order."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as fh:
        while cuts[-1] + piece_bytes < size:
            fh.seek(cuts[-1] + piece_bytes)
            window = b""
            found = -1
            while found < 0:
                block = fh.read(1 << 16)
                if not block:
                    break
                window += block
                found = window.find(b"\n\n")
            if found < 0:
                break
            cuts.append(cuts[-1] + piece_bytes + found + 2)
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a] or [(0, 0)]


def _encode_work(tokenizer_dir: Path, paths: dict[str, Path], pieces: list) -> Path:
    """The encode's work folder: kept when it was made for this tokenizer and this text, else anew."""
    tokenizer_files = sorted([p.name, *_file_id(p)] for p in tokenizer_dir.iterdir() if p.is_file())
    fingerprint = {"version": FORMAT_VERSION, "tokenizer": tokenizer_files,
                   "text": {split: _file_id(p) for split, p in paths.items()},
                   "pieces": [[split, start, stop] for split, _, start, stop in pieces]}
    work = tokenizer_dir / ENCODE_WORK
    marker = work / "fingerprint.json"
    try:
        if json.loads(marker.read_text(encoding="utf-8")) == fingerprint:
            return work
    except (OSError, ValueError):
        pass
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    marker.write_text(json.dumps(fingerprint), encoding="utf-8")
    return work


def _file_id(path: Path) -> list:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _encode_pieces(bundle, pieces: list, work: Path, dtype: np.dtype, workers: int, report: Stages,
                   total_bytes: int) -> None:
    """Encode every piece that has no marker: here when workers is 1, else in subprocesses
    (plain ones: a Celery prefork pool process may not start multiprocessing children)."""
    sizes = [stop - start for _, _, start, stop in pieces]
    todo = [i for i in range(len(pieces)) if not (work / f"{i:06d}" / "part.json").is_file()]
    done = sum(sizes) - sum(sizes[i] for i in todo)
    report.update("encode", done / 1e6, total_bytes / 1e6)
    if workers <= 1 or len(todo) <= 1:
        for i in todo:
            split, path, start, stop = pieces[i]
            _encode_part(bundle, path, start, stop, work / f"{i:06d}", dtype,
                         lambda n, base=done: report.update("encode", (base + n) / 1e6, total_bytes / 1e6))
            done += sizes[i]
        return
    (work / "job.json").write_text(json.dumps({
        "tokenizer_dir": str(work.parent), "dtype": dtype.name,
        "pieces": [[split, str(path), start, stop] for split, path, start, stop in pieces]}), encoding="utf-8")
    try:
        run_pieces("trainer.prep.shards", work, todo, workers, sizes=sizes, done_before=done,
                   on_progress=lambda n: report.update("encode", n / 1e6, total_bytes / 1e6))
    except PieceFailed as e:
        if e.user:
            raise TokenizerError(e.message) from None
        raise RuntimeError(f"encoding piece {e.index} failed: {e.message}\n{e.trace}") from None


_BUNDLES: dict[str, object] = {}


def do_piece(work: Path, i: int) -> None:
    """Encode piece ``i`` of the job in ``work`` (in a worker process: trainer.prep.workers)."""
    job = json.loads((work / "job.json").read_text(encoding="utf-8"))
    split, path, start, stop = job["pieces"][i]
    if job["tokenizer_dir"] not in _BUNDLES:  # a worker loads the tokenizer once
        _BUNDLES[job["tokenizer_dir"]] = load_tokenizer(Path(job["tokenizer_dir"]))
    _encode_part(_BUNDLES[job["tokenizer_dir"]], Path(path), start, stop, work / f"{i:06d}",
                 np.dtype(job["dtype"]), progress_file(work, i))
    done_progress(work, i)


def _encode_part(bundle, text_path: Path, start: int, stop: int, out: Path, dtype: np.dtype,
                 on_bytes: Callable[[int], None]) -> None:
    """Encode the bytes [start, stop) of a split's text into ``out``: tokens.bin, word_starts.bin,
    sentences.bin (each kept sentence's first token, from the part's start), documents.bin (each
    document's first sentence, from the part's start) and part.json (written last: the marker)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    n_tokens = n_sentences = skipped = 0
    segmented = False  # whether any sentence had CJK text, whose word starts jieba gave
    with (
        open(out / "tokens.bin", "wb") as tokens_fh,
        open(out / "word_starts.bin", "wb") as starts_fh,
        open(out / "sentences.bin", "wb") as sent_fh,
        open(out / "documents.bin", "wb") as doc_fh,
    ):
        for sentences, doc_starts, bytes_read in _chunks(text_path, start, stop):
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
            segmented = segmented or has_cjk("".join(sentences))

            # A document starts at its first kept sentence; one left with no kept sentence
            # starts where the next does and is removed when the parts are joined.
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
    (out / "part.json").write_text(json.dumps({"n_tokens": n_tokens, "n_sentences": n_sentences,
                                               "skipped_sentences": skipped, "segmented": segmented}),
                                   encoding="utf-8")


SEGMENTED, NOT_SEGMENTED = "jieba", "none"  # shard.json's word_segmenter (older shards: always "jieba")


def _join_parts(bundle, parts: list[Path], out: Path, dtype: np.dtype, text_path: Path) -> dict:
    """One split's shards from its encoded parts, in order (offsets shifted by what came before)."""
    out.mkdir(parents=True)
    metas = [json.loads((p / "part.json").read_text(encoding="utf-8")) for p in parts]
    n_tokens = sum(m["n_tokens"] for m in metas)
    n_sentences = sum(m["n_sentences"] for m in metas)
    skipped = sum(m["skipped_sentences"] for m in metas)
    for name in ("tokens.bin", "word_starts.bin"):
        with open(out / name, "wb") as dst:
            for p in parts:
                with open(p / name, "rb") as src:
                    shutil.copyfileobj(src, dst, 16 << 20)
    sentence_starts = np.lib.format.open_memmap(out / "sentences.npy", mode="w+", dtype=np.int64,
                                                shape=(n_sentences + 1,))
    doc_starts = []
    tok_base = sent_base = 0
    for p, m in zip(parts, metas):
        part = np.fromfile(p / "sentences.bin", dtype=np.int64)
        sentence_starts[sent_base:sent_base + len(part)] = part + tok_base
        doc_starts.append(np.fromfile(p / "documents.bin", dtype=np.int64) + sent_base)
        tok_base += m["n_tokens"]
        sent_base += m["n_sentences"]
    sentence_starts[-1] = n_tokens
    sentence_starts.flush()
    del sentence_starts
    doc_starts_all = np.concatenate(doc_starts) if doc_starts else np.zeros(0, np.int64)
    doc_starts_all = np.unique(doc_starts_all[doc_starts_all < n_sentences])
    n_documents = len(doc_starts_all)
    _save_npy(out / "documents.npy", doc_starts_all, n_sentences)
    meta = {
        "dtype": dtype.name,
        # what gave word_starts.bin its CJK word boundaries: "jieba" where the split has CJK text
        # (trainer.prep.segmenter), "none" where it has none (the tokenizer's word ids alone)
        "word_segmenter": SEGMENTED if any(m.get("segmented", True) for m in metas) else NOT_SEGMENTED,
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


def _chunks(path: Path, start: int = 0, stop: int = -1) -> Iterator[tuple[list[str], list[int], int]]:
    """Yields (sentences, indices where a document starts, bytes read so far) per chunk of about
    CHUNK_SENTENCES sentences (whole documents), for the bytes [start, stop) of the file (stop -1:
    to the end); ``start`` is a document's first byte."""
    sentences: list[str] = []
    doc_starts: list[int] = []
    done = 0
    for doc, done in documents(path, start, stop):
        doc_starts.append(len(sentences))
        sentences.extend(doc)
        if len(sentences) >= CHUNK_SENTENCES:
            yield sentences, doc_starts, done
            sentences, doc_starts = [], []
    if sentences:
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



if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        sys.exit(serve("trainer.prep.shards", Path(sys.argv[2])))
    sys.exit("usage: python -m trainer.prep.shards serve WORK")
