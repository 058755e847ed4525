"""Encoding in pieces (trainer.prep.shards): the shards are the same whatever the workers and the
pieces, and an encode stopped half way encodes only what is missing when called again."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainer.prep import shards
from trainer.prep.shards import encode_corpus, open_shards
from trainer.prep.tokenization import train_tokenizer

WORDS = "alpha beta gamma delta river stone 我们 中文 market garden window letter summer".split()


def write_split(path: Path, n_docs: int, seed: int) -> None:
    rng = random.Random(seed)
    docs = ["\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))).capitalize() + "."
                      for _ in range(rng.randint(1, 6))) for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")


@pytest.fixture()
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_split(folder / "train.txt", 400, 0)
    write_split(folder / "valid.txt", 40, 1)
    train_tokenizer(folder, tmp_path / "tok", vocab_size=150)
    return folder


def shard_files(tok: Path) -> dict[str, bytes]:
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in sorted((tok / "shards").glob("*/*"))}


def test_pieces_and_workers_give_the_same_shards(corpus, tmp_path):
    tok = tmp_path / "tok"
    whole = encode_corpus(corpus, tok, workers=1)
    one = shard_files(tok)
    assert len(shards._document_ranges(corpus / "train.txt", 500)) > 10
    parallel = encode_corpus(corpus, tok, workers=2, piece_bytes=500)
    assert shard_files(tok) == one
    assert {k: parallel[k] for k in ("train", "valid", "n_tokens")} == {k: whole[k] for k in ("train", "valid", "n_tokens")}
    assert parallel["workers"] == 2 and not (tok / shards.ENCODE_WORK).exists()
    train = open_shards(tok, "train")
    assert train.n_documents == 400 and train.sentence_offsets[-1] == train.n_tokens


def test_a_small_text_is_cut_so_that_every_worker_gets_pieces():
    MB = 1 << 20
    # 12 MB of text (a 100 MB corpus's kept split) on two workers: 8 pieces of 1.5 MB, not one of 32.
    assert shards.encode_piece_bytes(12 * MB, 2) == 12 * MB // 8
    assert shards.encode_piece_bytes(10_000 * MB, 2) == shards.PIECE_BYTES
    assert shards.encode_piece_bytes(100_000, 2) == shards.MIN_PIECE_BYTES
    assert shards.encode_piece_bytes(64 * MB, 16) == shards.MIN_PIECE_BYTES


def test_the_default_pieces_follow_the_workers_and_give_the_same_shards(corpus, tmp_path, monkeypatch):
    tok = tmp_path / "tok"
    encode_corpus(corpus, tok, workers=1)
    one = shard_files(tok)
    monkeypatch.setattr(shards, "MIN_PIECE_BYTES", 100)  # the fixture's text is a few KB
    seen = []
    real = shards._encode_pieces
    monkeypatch.setattr(shards, "_encode_pieces", lambda bundle, pieces, *rest: (seen.append(len(pieces)),
                                                                                real(bundle, pieces, *rest))[1])
    encode_corpus(corpus, tok, workers=2)
    assert seen[0] >= 2 * shards.PIECES_PER_WORKER  # train's pieces, and valid's
    assert shard_files(tok) == one


def test_document_ranges_cut_after_blank_lines_and_cover_the_file(corpus):
    path = corpus / "train.txt"
    data = path.read_bytes()
    ranges = shards._document_ranges(path, 300)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(data[start - 2:start] == b"\n\n" for start, _ in ranges[1:])


def test_a_stopped_encode_resumes_with_the_missing_pieces(corpus, tmp_path, monkeypatch):
    tok = tmp_path / "tok"
    encode_corpus(corpus, tok, workers=1)
    want = shard_files(tok)
    real = shards._encode_part
    encoded = []

    def crash_after_three(*args, **kw):
        if len(encoded) == 3:
            raise KeyboardInterrupt
        encoded.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(shards, "_encode_part", crash_after_three)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(corpus, tok, workers=1, piece_bytes=400)
    assert len(list((tok / shards.ENCODE_WORK).glob("*/part.json"))) == 3
    again = []

    def counting(*args, **kw):
        again.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(shards, "_encode_part", counting)
    encode_corpus(corpus, tok, workers=1, piece_bytes=400)
    n_pieces = sum(len(shards._document_ranges(corpus / f"{split}.txt", 400)) for split in ("train", "valid"))
    assert len(again) == n_pieces - 3  # the three encoded before the stop are not encoded again
    assert shard_files(tok) == want

