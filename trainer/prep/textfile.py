"""Reading the prepared text files: one sentence per line, a blank line between documents.

The ingest writes them (its pieces' text, then ``train.txt``, ``valid.txt`` and ``sample.txt``:
trainer.prep.pipeline) and two stages read them back, the split (a piece's documents, in order)
and the encoder (trainer.prep.shards, a byte range of a split at a time). This is their one
reader, so that the two can never disagree on where a document or a sentence ends.

Sentences are written cleaned (whitespace runs joined, ends stripped: trainer.prep.sentences), so a
line is read as it is, less its line break; only ``\\n`` breaks a line, as the writers' ``newline="\\n"``.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def documents(path: Path, start: int = 0, stop: int = -1) -> Iterator[tuple[list[str], int]]:
    """Yields (a document's sentences, bytes read so far) for the bytes [start, stop) of the file
    (stop -1: to its end). ``start`` must be a document's first byte and ``stop`` one too (or the
    end): the ranges trainer.prep.shards plans. Memory holds one document at a time."""
    limit = float("inf") if stop < 0 else stop - start
    done = 0
    doc: list[str] = []
    with open(path, "rb") as fh:
        fh.seek(start)
        for raw in fh:
            if done >= limit:
                break
            done += len(raw)
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line:
                doc.append(line.decode("utf-8"))
            elif doc:
                yield doc, done
                doc = []
    if doc:
        yield doc, done
