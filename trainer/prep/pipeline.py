"""The corpus ingest at scale: every core busy, resumable after a crash, memory bounded.

``run_ingest`` (called by :func:`trainer.prep.corpus.ingest`) turns a corpus of any number of
files (:mod:`trainer.prep.sources`) into ``train.txt``, ``valid.txt``, ``sample.txt`` and
``stats.json`` in three stages, all of whose intermediate results live on disk in
``out_dir/.ingest-work/``:

1. **read and clean**, in parallel over pieces (about 64 MB of a file each, see
   ``sources.plan_pieces``): each piece is read, cleaned with the rules that look at one
   document (C4's line and page rules, Gopher's and FineWeb's) by a worker process, which writes
   the kept documents (sentences, as the output format) and their hashes: one per document, one
   per sentence (for span deduplication), and MinHash band hashes (for near-duplicates). A piece
   is done when its ``.json`` marker exists, written last; a killed ingest starts again with the
   pieces that have none.
2. **deduplicate**, on the hashes alone, in the corpus's order: a document whose text was seen
   before (always on), one sharing a MinHash band with an earlier one (near-duplicates), and of
   every three-sentence span seen before the sentences of the later copy. "Seen before" is
   decided by :func:`later_occurrences` bucket by bucket on disk, so memory holds one bucket of
   hashes (about 4 M entries), a byte per sentence and a few per document, whatever the corpus size.
3. **split**: one pass over the pieces' documents writes each kept document, less its repeated
   spans, to its split (a seeded draw of the validation documents), and every train document
   chosen by a seeded draw to the tokenizer's training sample (``sample_bytes`` of text).

The result does not depend on the number of workers, on a crash and resume, or on the format
the documents came in: the same documents in the same order give byte-identical outputs.
"""
from __future__ import annotations

import array
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import xxhash

from trainer.errors import CorpusError
from trainer.prep.textfile import documents
from trainer.prep.workers import PieceFailed, done_progress, progress_file, run_pieces, serve
from trainer.progress import Stages

WORK_DIR = ".ingest-work"
VERSION = 1
PIECE_BYTES = 64 << 20
BUCKET_ENTRIES = 1 << 22  # hashes held in memory at once by later_occurrences
DEFAULT_SAMPLE_BYTES = 128 << 20
EXAMPLES_PER_RULE = 3
EXAMPLE_CHARS = 300

STAGES = {
    "read_clean": ("Reading and cleaning", 80.0),
    "dedup": ("Removing duplicates", 5.0),
    "split": ("Writing the splits", 15.0),
}

_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], dtype=np.uint64)


# Less work than this is done in the calling process: starting workers would cost more than it saves.
PARALLEL_MIN_BYTES = 8 << 20


def default_workers(work_bytes: int | None = None) -> int:
    """LMWB_CORPUS_WORKERS, else every core this process may use (1 for under PARALLEL_MIN_BYTES)."""
    configured = os.environ.get("LMWB_CORPUS_WORKERS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    if work_bytes is not None and work_bytes < PARALLEL_MIN_BYTES:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# The plan and its fingerprint
# ---------------------------------------------------------------------------------------------


def _fingerprint(sources, options: dict, text_field: str, piece_bytes: int) -> dict:
    """What decides stage 1 and 2's results: a change of any of it starts the work again."""
    files = []
    for s in sources:
        st = os.stat(s.path)
        files.append([s.path, st.st_size, st.st_mtime_ns])
    return {"version": VERSION, "files": files, "options": options, "text_field": text_field,
            "piece_bytes": piece_bytes}


def _open_work(out_dir: Path, fingerprint: dict) -> Path:
    """The work folder: reused when it was made for the same fingerprint, else made anew."""
    work = out_dir / WORK_DIR
    plan_path = work / "fingerprint.json"
    if plan_path.is_file():
        try:
            if json.loads(plan_path.read_text(encoding="utf-8")) == fingerprint:
                return work
        except (OSError, ValueError):
            pass
    shutil.rmtree(work, ignore_errors=True)
    (work / "pieces").mkdir(parents=True)
    _write_json(plan_path, fingerprint)
    return work


def _write_json(path: Path, data) -> None:
    """Write JSON atomically (a temporary file renamed), so a marker is whole or absent."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Stage 1: read and clean one piece (in a worker process, or in this one)
# ---------------------------------------------------------------------------------------------


def _piece_paths(work: Path, index: int) -> dict[str, Path]:
    stem = work / "pieces" / f"{index:06d}"
    return {"text": stem.with_suffix(".txt"), "arrays": stem.with_suffix(".npz"),
            "done": stem.with_suffix(".json"), "error": stem.with_suffix(".error")}


def clean_piece(piece, work: Path, options, text_field: str, on_bytes: Callable[[int], None]) -> dict:
    """Read, clean and hash one piece; write its text, arrays and marker; return the marker.
    ``on_bytes(n)``: the piece's bytes read so far."""
    from trainer.prep.cleaning import DocumentCleaner
    from trainer.prep.sentences import count_words
    from trainer.prep.sources import read_piece

    paths = _piece_paths(work, piece.index)
    cleaner = DocumentCleaner(options)
    hasher = None
    if options.minhash:
        from trainer.prep.minhash import MinHasher

        hasher = MinHasher()
    doc_hash, doc_sentences = array.array("Q"), array.array("q")
    sent_hash, sent_words = array.array("Q"), array.array("q")
    sent_chars, sent_bytes = array.array("q"), array.array("q")
    bands: list[np.ndarray] = []
    n_input = 0
    h64 = xxhash.xxh3_64_intdigest

    tmp_text = paths["text"].with_name(paths["text"].name + ".tmp")
    with open(tmp_text, "w", encoding="utf-8", newline="\n") as fh:
        for lines in read_piece(piece, text_field=text_field, on_bytes=on_bytes):
            n_input += 1
            sentences = cleaner.clean(lines)
            if sentences is None:
                continue
            joined = "\n".join(sentences)
            fh.write(joined)
            fh.write("\n\n")
            doc_hash.append(h64(joined.encode("utf-8")))
            doc_sentences.append(len(sentences))
            for s in sentences:
                encoded = s.encode("utf-8")
                sent_hash.append(h64(encoded))
                sent_words.append(count_words(s))
                sent_chars.append(len(s))
                sent_bytes.append(len(encoded))
            if hasher is not None:
                bands.append(hasher.band_hashes(hasher.signature(" ".join(sentences))))
    n_bands = len(bands[0]) if bands else 0
    np.savez(
        paths["arrays"].with_name(paths["arrays"].stem + ".tmp.npz"),
        doc_hash=np.frombuffer(doc_hash, dtype=np.uint64),
        doc_sentences=np.frombuffer(doc_sentences, dtype=np.int64),
        sent_hash=np.frombuffer(sent_hash, dtype=np.uint64),
        sent_words=np.frombuffer(sent_words, dtype=np.int64),
        sent_chars=np.frombuffer(sent_chars, dtype=np.int64),
        sent_bytes=np.frombuffer(sent_bytes, dtype=np.int64),
        bands=np.stack(bands) if bands else np.zeros((0, n_bands), dtype=np.uint64),
    )
    os.replace(paths["arrays"].with_name(paths["arrays"].stem + ".tmp.npz"), paths["arrays"])
    os.replace(tmp_text, paths["text"])
    marker = {"index": piece.index, "input_documents": n_input, "documents": len(doc_hash),
              "sentences": len(sent_hash), "removed": cleaner.removed, "reasons": cleaner.reasons,
              "examples": cleaner.examples}
    _write_json(paths["done"], marker)
    return marker


def do_piece(work: Path, index: int) -> None:
    """Clean piece ``index`` of the job in ``work`` (in a worker process: trainer.prep.workers)."""
    from trainer.prep.cleaning import CleaningOptions
    from trainer.prep.sources import Piece

    job = json.loads((work / "job.json").read_text(encoding="utf-8"))
    clean_piece(Piece.from_dict(job["pieces"][index]), work, CleaningOptions.from_dict(job["options"]),
                job["text_field"], progress_file(work, index))
    done_progress(work, index)


def _run_pieces(pieces, work: Path, options, text_field: str, workers: int, report: Stages,
                input_bytes: int) -> list[dict]:
    """Stage 1 over every piece without a marker: in this process when workers is 1, else in up
    to ``workers`` subprocesses at once. Returns the markers in piece order."""
    sizes = _piece_sizes(pieces)
    todo = [p for p in pieces if not _piece_paths(work, p.index)["done"].is_file()]
    done_bytes = sum(sizes[p.index] for p in pieces) - sum(sizes[p.index] for p in todo)
    report.update("read_clean", done_bytes / 1e6, input_bytes / 1e6)
    if workers <= 1 or len(todo) <= 1:
        for p in todo:
            clean_piece(p, work, options, text_field,
                        lambda n, base=done_bytes: report.update("read_clean", (base + n) / 1e6, input_bytes / 1e6))
            done_bytes += sizes[p.index]
            report.update("read_clean", done_bytes / 1e6, input_bytes / 1e6)
    else:
        _write_json(work / "job.json", {"pieces": [p.to_dict() for p in pieces],
                                        "options": options.to_dict(), "text_field": text_field})
        try:
            run_pieces("trainer.prep.pipeline", work, [p.index for p in todo], workers, sizes=sizes,
                       done_before=done_bytes,
                       on_progress=lambda n: report.update("read_clean", n / 1e6, input_bytes / 1e6))
        except PieceFailed as e:
            if e.user:
                raise CorpusError(e.message) from None
            raise RuntimeError(f"cleaning piece {e.index} ({pieces[e.index].source.name}) failed: "
                               f"{e.message}\n{e.trace}") from None
    report.finish("read_clean", input_bytes / 1e6)
    return [json.loads(_piece_paths(work, p.index)["done"].read_text(encoding="utf-8")) for p in pieces]


def _piece_sizes(pieces) -> list[int]:
    """Each piece's bytes on disk, for progress: a byte range's length, else an even share of its
    file (the pieces of a parquet or arrow file are row groups or record batches)."""
    from collections import Counter

    per_file = Counter(p.source.path for p in pieces)
    sizes = []
    for p in pieces:
        if p.stop >= 0 and p.source.format in ("txt", "jsonl") and p.source.compression == "none":
            sizes.append(max(0, p.stop - p.start))
        else:
            sizes.append(p.source.bytes // per_file[p.source.path])
    return sizes



# ---------------------------------------------------------------------------------------------
# Stage 2: deduplicate on the hashes
# ---------------------------------------------------------------------------------------------


def later_occurrences(chunks: Iterable[tuple[np.ndarray, np.ndarray]], n_entries: int, n_positions: int,
                      scratch: Path, *, bucket_entries: int | None = None) -> np.ndarray:
    """Which positions hold a key that an earlier position already held.

    ``chunks`` gives ``(keys, positions)`` (uint64, int64) in any order; positions are in
    ``range(n_positions)`` and a position may come more than once (a document's bands). Returns a
    bool array of ``n_positions``: True where the position has a key whose first occurrence (the
    smallest position holding it) is another position. With more than ``bucket_entries`` entries
    the pairs are partitioned by key into bucket files in ``scratch`` and each bucket is sorted in
    turn, so memory holds one bucket.
    """
    later = np.zeros(n_positions, dtype=bool)
    bucket_entries = bucket_entries or BUCKET_ENTRIES
    n_buckets = max(1, -(-n_entries // bucket_entries))
    if n_buckets == 1:
        pairs = list(chunks)
        if pairs:
            _mark_later(np.concatenate([k for k, _ in pairs]), np.concatenate([p for _, p in pairs]), later)
        return later
    scratch.mkdir(parents=True, exist_ok=True)
    files = [open(scratch / f"bucket-{b:05d}.bin", "wb") for b in range(n_buckets)]
    try:
        for keys, positions in chunks:
            bucket = (keys % np.uint64(n_buckets)).astype(np.int64)
            order = np.argsort(bucket, kind="stable")
            bounds = np.searchsorted(bucket[order], np.arange(n_buckets + 1))
            pairs = np.empty((len(keys), 2), dtype=np.uint64)
            pairs[:, 0] = keys[order]
            pairs[:, 1] = positions[order].astype(np.uint64)
            for b in range(n_buckets):
                if bounds[b + 1] > bounds[b]:
                    files[b].write(pairs[bounds[b]:bounds[b + 1]].tobytes())
    finally:
        for fh in files:
            fh.close()
    for b in range(n_buckets):
        path = scratch / f"bucket-{b:05d}.bin"
        pairs = np.fromfile(path, dtype=np.uint64).reshape(-1, 2)
        path.unlink()
        if len(pairs):
            _mark_later(pairs[:, 0], pairs[:, 1].astype(np.int64), later)
    return later


def _mark_later(keys: np.ndarray, positions: np.ndarray, later: np.ndarray) -> None:
    """Sorted by key, then position: a row is a later occurrence when its position is not the
    first of its key's run (a key held twice by one position, two equal bands of a document, is not)."""
    order = np.lexsort((positions, keys))
    keys, positions = keys[order], positions[order]
    new_key = np.ones(len(keys), dtype=bool)
    new_key[1:] = keys[1:] != keys[:-1]
    run = np.cumsum(new_key) - 1
    first_position = positions[np.flatnonzero(new_key)][run]
    later[positions[positions != first_position]] = True


def _span_keys(sent_hash: np.ndarray) -> np.ndarray:
    """A key for each window of three consecutive sentences (by their hashes)."""
    with np.errstate(over="ignore"):
        h = sent_hash[:-2] * _MIX[0] ^ (sent_hash[1:-1] * _MIX[1]) ^ (sent_hash[2:] * _MIX[2])
        h ^= h >> np.uint64(31)
    return h


class _Arrays:
    """Every piece's arrays, loaded one piece at a time (np.load of an .npz is lazy per array)."""

    def __init__(self, work: Path, markers: list[dict]):
        self.work, self.markers = work, markers
        self.doc_offsets = np.concatenate([[0], np.cumsum([m["documents"] for m in markers])]).astype(np.int64)
        self.sent_offsets = np.concatenate([[0], np.cumsum([m["sentences"] for m in markers])]).astype(np.int64)

    def load(self, i: int, *names: str) -> list[np.ndarray]:
        with np.load(_piece_paths(self.work, self.markers[i]["index"])["arrays"]) as z:
            return [z[n] for n in names]

    def __len__(self) -> int:
        return len(self.markers)


def _deduplicate(arrays: _Arrays, options, work: Path) -> dict[str, np.ndarray]:
    """Stage 2: the documents and sentences removed as repeats, as bool arrays over the corpus."""
    n_docs, n_sents = int(arrays.doc_offsets[-1]), int(arrays.sent_offsets[-1])
    scratch = work / "buckets"

    def doc_chunks():
        for i in range(len(arrays)):
            (h,) = arrays.load(i, "doc_hash")
            yield h, np.arange(arrays.doc_offsets[i], arrays.doc_offsets[i + 1], dtype=np.int64)

    duplicate = later_occurrences(doc_chunks(), n_docs, n_docs, scratch)

    near = np.zeros(n_docs, dtype=bool)
    if options.minhash:
        def band_chunks():
            for i in range(len(arrays)):
                (bands,) = arrays.load(i, "bands")
                if not len(bands):
                    continue
                docs = np.arange(arrays.doc_offsets[i], arrays.doc_offsets[i + 1], dtype=np.int64)
                keep = ~duplicate[docs]
                bands, docs = bands[keep], docs[keep]
                with np.errstate(over="ignore"):  # the band's number in the key: band 3 never meets band 5
                    keys = bands ^ (np.arange(bands.shape[1], dtype=np.uint64) * _MIX[0])
                yield keys.reshape(-1), np.repeat(docs, bands.shape[1])

        from trainer.prep.minhash import MinHasher

        # stage 1 hashed with MinHasher()'s defaults: that many bands per document
        near = later_occurrences(band_chunks(), n_docs * MinHasher().bands, n_docs, scratch)

    dropped = np.zeros(n_sents, dtype=bool)
    if options.dedup_spans:
        gone = duplicate | near

        def span_chunks():
            for i in range(len(arrays)):
                sent_hash, doc_sentences = arrays.load(i, "sent_hash", "doc_sentences")
                docs = np.arange(arrays.doc_offsets[i], arrays.doc_offsets[i + 1])
                if len(sent_hash) < 3:
                    continue
                # a window starts at sentence s of a document when s + 2 is still in that document
                # and the document was not removed whole
                doc_of = np.repeat(np.arange(len(doc_sentences)), doc_sentences)
                ends = np.cumsum(doc_sentences)[doc_of]
                starts = np.arange(len(sent_hash) - 2)
                ok = (starts + 2 < ends[:-2]) & ~gone[docs[doc_of[:-2]]]
                keys = _span_keys(sent_hash)[ok]
                yield keys, starts[ok].astype(np.int64) + arrays.sent_offsets[i]

        repeated = later_occurrences(span_chunks(), n_sents, n_sents, scratch)
        dropped = repeated.copy()
        dropped[1:] |= repeated[:-1]
        dropped[2:] |= repeated[:-2]
    return {"duplicate": duplicate, "near": near, "dropped": dropped}


# ---------------------------------------------------------------------------------------------
# Stage 3: the splits and the sample
# ---------------------------------------------------------------------------------------------


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1].rstrip() + "…"


def run_ingest(sources: Sequence, out_dir: Path, *, options, text_field: str = "text", valid_fraction: float,
               seed: int, progress: Callable[[float], None] | None, workers: int | None,
               sample_bytes: int, piece_bytes: int = PIECE_BYTES, check_big_enough: Callable | None = None,
               input_format: str | None = None) -> dict:
    """Stages 1-3 (see the module's docstring); returns the contents of stats.json less what the
    caller adds. The outputs are renamed into ``out_dir`` only when all are written; the work folder
    is removed on success and on a CorpusError (bad data: a retry would fail the same way), and kept
    on any other failure (a crash, a kill, a full disk) so that the next call resumes from it."""
    from trainer.prep.cleaning import C4_MIN_SENTENCES_PER_PAGE, MIN_SENTENCES_KEY, PREVIEW_DOCUMENTS, _preview
    from trainer.prep.sources import describe, plan_pieces

    started = time.monotonic()
    workers = default_workers(sum(s.bytes for s in sources)) if workers is None else max(1, int(workers))
    report = Stages(progress, STAGES)
    report.percent(0)
    fingerprint = _fingerprint(sources, options.to_dict(), text_field, piece_bytes)
    work = _open_work(out_dir, fingerprint)
    try:
        pieces = plan_pieces(sources, piece_bytes=piece_bytes)
        input_bytes = sum(s.bytes for s in sources)
        markers = _run_pieces(pieces, work, options, text_field, workers, report, input_bytes)
        t_clean = time.monotonic()

        arrays = _Arrays(work, markers)
        removed = _sum_removed(markers)
        examples = _merge_examples(markers)
        reasons: dict[str, int] = {}
        for m in markers:
            for k, v in m.get("reasons", {}).items():
                reasons[k] = reasons.get(k, 0) + v
        report.update("dedup", 0, 1, "steps")
        dd = _deduplicate(arrays, options, work)
        t_dedup = time.monotonic()
        report.finish("dedup", 1, "steps")

        # One pass over the pieces' arrays: which documents are left, and the statistics of the kept
        # text per final document. A piece decides its own documents (a document's sentences are
        # all in its piece), and its kept documents follow the earlier pieces' in the final order.
        whole_gone = dd["duplicate"] | dd["near"]
        min_sentences = C4_MIN_SENTENCES_PER_PAGE if options.min_sentences and options.dedup_spans else 0
        keep_parts: list[np.ndarray] = []
        total_parts: dict[str, list[np.ndarray]] = {k: [] for k in _SUMMED}
        n_empty = n_short = 0
        for i in range(len(arrays)):
            sw, sc, sb, ds = arrays.load(i, "sent_words", "sent_chars", "sent_bytes", "doc_sentences")
            s0, s1 = arrays.sent_offsets[i], arrays.sent_offsets[i + 1]
            d0, d1 = arrays.doc_offsets[i], arrays.doc_offsets[i + 1]
            dropped = dd["dropped"][s0:s1]
            doc_of = np.repeat(np.arange(d1 - d0), ds)  # each sentence's document, in this piece
            kept_sentences = np.bincount(doc_of[~dropped], minlength=d1 - d0)
            gone = whole_gone[d0:d1]
            empty = ~gone & (kept_sentences == 0) & (ds > 0)
            short = ~gone & ~empty & (kept_sentences < min_sentences)
            keep_here = ~gone & ~empty & ~short
            n_empty += int(empty.sum())
            n_short += int(short.sum())
            keep_parts.append(keep_here)
            live = ~dropped & keep_here[doc_of]
            local = (np.cumsum(keep_here) - 1)[doc_of[live]]  # index among this piece's kept documents
            n_kept = int(keep_here.sum())
            for key, values in (("sentences", None), ("words", sw), ("characters", sc), ("bytes", sb)):
                counts = np.bincount(local, weights=None if values is None else values[live], minlength=n_kept)
                total_parts[key].append(counts.astype(np.int64))
        keep = np.concatenate(keep_parts) if keep_parts else np.zeros(0, dtype=bool)
        totals = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in total_parts.items()}
        removed["duplicate_pages"] = removed.get("duplicate_pages", 0) + int(dd["duplicate"].sum())
        if options.minhash:
            removed["near_duplicate_pages"] = int(dd["near"].sum())
        if options.dedup_spans:
            removed["sentences_in_duplicate_spans"] = int(dd["dropped"].sum())
        removed["pages_left_empty"] = removed.get("pages_left_empty", 0) + n_empty
        if min_sentences:
            removed[MIN_SENTENCES_KEY] = removed.get(MIN_SENTENCES_KEY, 0) + n_short
        n_final = int(keep.sum())
        n_input = sum(m["input_documents"] for m in markers)
        final_index = np.cumsum(keep) - 1
        if check_big_enough is not None:
            check_big_enough(_total(totals, None), n_input, input_format, removed)

        n_valid = min(max(1, round(n_final * valid_fraction)), n_final - 1)
        is_valid = np.zeros(n_final, dtype=bool)
        # random.Random(seed).sample: the documents the single-process ingest held out, so a corpus
        # prepared before splits as it did (it holds k ints, or n when k is over about n/4)
        is_valid[np.fromiter(random.Random(seed).sample(range(n_final), n_valid), dtype=np.int64, count=n_valid)] = True
        train_bytes = int(totals["bytes"][~is_valid].sum() + totals["sentences"][~is_valid].sum())
        share = 1.0 if train_bytes <= sample_bytes else sample_bytes / train_bytes
        in_sample = np.zeros(n_final, dtype=bool)
        if share < 1.0:
            in_sample = (np.random.default_rng([seed, 1]).random(n_final) < share) & ~is_valid

        # Stage 3: one pass over the pieces' text.
        tmp = Path(tempfile.mkdtemp(prefix=".split-", dir=work))
        preview: list[list[str]] = []
        dedup_examples: dict[str, list[str]] = {"duplicate_pages": [], "near_duplicate_pages": [],
                                                "sentences_in_duplicate_spans": []}
        text_bytes = sum(_piece_paths(work, m["index"])["text"].stat().st_size for m in markers)
        written = 0
        sample_written = 0
        with (open(tmp / "train.txt", "w", encoding="utf-8", newline="\n") as train_fh,
              open(tmp / "valid.txt", "w", encoding="utf-8", newline="\n") as valid_fh,
              open(tmp / "sample.txt", "w", encoding="utf-8", newline="\n") as sample_fh):
            first = {id(train_fh): True, id(valid_fh): True, id(sample_fh): True}

            def put(fh, sentences):
                if not first[id(fh)]:
                    fh.write("\n")
                first[id(fh)] = False
                fh.write("\n".join(sentences))
                fh.write("\n")

            for i, m in enumerate(markers):
                path = _piece_paths(work, m["index"])["text"]
                d = int(arrays.doc_offsets[i])
                s = int(arrays.sent_offsets[i])
                for sentences, _ in documents(path):
                    n = len(sentences)
                    if keep[d]:
                        drop = dd["dropped"][s:s + n]
                        if drop.any():
                            if len(dedup_examples["sentences_in_duplicate_spans"]) < EXAMPLES_PER_RULE:
                                dedup_examples["sentences_in_duplicate_spans"].append(
                                    _short(" ".join(x for x, g in zip(sentences, drop) if g)))
                            sentences = [x for x, g in zip(sentences, drop) if not g]
                        f = int(final_index[d])
                        if is_valid[f]:
                            put(valid_fh, sentences)
                        else:
                            put(train_fh, sentences)
                            if in_sample[f]:
                                put(sample_fh, sentences)
                                sample_written += int(totals["bytes"][f] + totals["sentences"][f])
                        if len(preview) < PREVIEW_DOCUMENTS:
                            preview.append(_preview(sentences))
                    else:
                        key = "duplicate_pages" if dd["duplicate"][d] else (
                            "near_duplicate_pages" if dd["near"][d] else None)
                        if key and len(dedup_examples[key]) < EXAMPLES_PER_RULE:
                            dedup_examples[key].append(_short(" ".join(sentences)))
                    d += 1
                    s += n
                written += path.stat().st_size
                report.update("split", written / 1e6, text_bytes / 1e6)
        for key, items in dedup_examples.items():
            if items and key in removed:
                examples[key] = items
        valid_docs = np.flatnonzero(is_valid)
        train_docs = np.flatnonzero(~is_valid)
        stats = _total(totals, None)
        stats["train"] = _total(totals, train_docs)
        stats["valid"] = _total(totals, valid_docs)
        stats["input"] = {
            **describe(sources),
            "format": input_format or _one_format(sources),
            "compressed": any(s.compression != "none" for s in sources),
            "file_bytes": input_bytes,
            "documents": n_input,
            "file_list": [s.to_dict() for s in sources[:1000]],
        }
        stats["sample"] = {"bytes": sample_written if share < 1.0 else stats["train"]["bytes"],
                           "share": round(share, 4), "requested_bytes": sample_bytes}
        t_split = time.monotonic()
        stats["stages"] = {
            "read_clean": {"seconds": round(t_clean - started, 3), "bytes": input_bytes, "workers": workers,
                           "pieces": len(pieces)},
            "dedup": {"seconds": round(t_dedup - t_clean, 3)},
            "split": {"seconds": round(t_split - t_dedup, 3), "bytes": text_bytes},
        }
        report.finish("split", text_bytes / 1e6)
        outputs = ["train.txt", "valid.txt"] + (["sample.txt"] if share < 1.0 else [])
        if share >= 1.0:
            (tmp / "sample.txt").unlink()
        return {"stats": stats, "removed": removed, "preview": preview, "examples": examples,
                "reasons": reasons, "tmp": tmp, "outputs": outputs, "work": work}
    except CorpusError:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _one_format(sources) -> str:
    formats = sorted({s.format for s in sources})
    return formats[0] if len(formats) == 1 else "mixed"


_SUMMED = ("sentences", "words", "characters", "bytes")


def _total(totals: dict[str, np.ndarray], docs: np.ndarray | None) -> dict[str, int]:
    """documents, sentences, words, characters and bytes of the chosen final documents (all: None)."""
    pick = slice(None) if docs is None else docs
    out = {"documents": len(totals["sentences"]) if docs is None else len(docs)}
    out.update({k: int(totals[k][pick].sum()) for k in _SUMMED})
    return out


def _sum_removed(markers: list[dict]) -> dict[str, int]:
    removed: dict[str, int] = {}
    for m in markers:
        for k, v in m["removed"].items():
            removed[k] = removed.get(k, 0) + v
    return removed


def _merge_examples(markers: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in markers:
        for k, items in m.get("examples", {}).items():
            have = out.setdefault(k, [])
            have.extend(items[: EXAMPLES_PER_RULE - len(have)])
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        sys.exit(serve("trainer.prep.pipeline", Path(sys.argv[2])))
    sys.exit("usage: python -m trainer.prep.pipeline serve WORK")
