"""Ingest stays bounded (issue 11, point 5): a gzip file that expands past
UPLOAD_MAX_DECOMPRESSED_BYTES is refused while it streams, and a .txt file with no blank lines
is cut into documents of at most MAX_DOCUMENT_CHARS characters instead of being held whole."""
from __future__ import annotations

import gzip
import itertools

import pytest

from trainer.errors import CorpusError
from trainer.prep import corpus, reading
from trainer.prep.corpus import CleaningOptions, ingest

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "


def test_a_decompression_bomb_is_refused_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "UPLOAD_MAX_DECOMPRESSED_BYTES", 3_000_000)
    path = tmp_path / "bomb.txt.gz"
    with gzip.open(path, "wb") as f:
        for _ in range(2000):  # 20 MB of text in a few tens of kilobytes
            f.write((SENTENCE * 140 + "\n\n").encode())
    assert path.stat().st_size < 200_000
    read = []
    monkeypatch.setattr(corpus.UploadReader, "_read", lambda self, stream: read.append(1) or stream.read(1 << 20))
    with pytest.raises(CorpusError, match=r"decompresses to more than 3.0 MB, the most this installation unpacks "
                                          r"\(UPLOAD_MAX_DECOMPRESSED_BYTES\)"):
        ingest(path, tmp_path / "out", original_filename="bomb.txt.gz", options=CleaningOptions())
    assert len(read) <= 5  # it stopped after about 3 MB, not after the 20
    assert not (tmp_path / "out" / "train.txt").exists()


def test_a_file_without_blank_lines_becomes_bounded_documents(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "MAX_DOCUMENT_CHARS", 5_000)
    path = tmp_path / "one-block.txt"
    path.write_text("".join(f"{SENTENCE}Line {i} of one long block.\n" for i in range(600)))
    result = ingest(path, tmp_path / "out", original_filename="one-block.txt", options=CleaningOptions())
    assert result.stats["documents"] >= 8  # 50,000 characters cut into pieces of about 5,000


def test_documents_are_yielded_as_they_fill_up(monkeypatch):
    monkeypatch.setattr(reading, "MAX_DOCUMENT_CHARS", 100)
    long = ((i, "a line of text that never ends in a blank one") for i in itertools.islice(itertools.count(), 100_000))
    first = next(reading._txt_documents(long))  # the first piece, long before the input ends
    assert 2 <= len(first) <= 4
