"""The tests' tokenizers, trained once and stored as files (issue 30, point 7).

The `tokenizers` library's trainers do not give the same vocabulary in two processes
(huggingface/tokenizers #1794: ids of new subwords follow a hash map's order, which breaks ties
between merges), so a tokenizer trained afresh in each test process gives each session a
slightly different start, and thresholds calibrated on one build fail on another.

`stored_tokenizer` is `trainer.prep.tokenization.train_tokenizer` for the tests that *use* a
tokenizer (the tests of training one call the product's function directly): the folder is
looked up in tests/data/tokenizers/ by the settings and the content hash of the text it would
learn from; found, its files are copied; not found (a new setting, or another Python whose
standard-library docstrings make another demo corpus), it is trained by the product and stored
there, so that every later process of every session loads the same vocabulary (in CI, where
LMWB_TOKENIZER_STORE_STRICT is set, a miss fails instead: see STRICT_ENV). Commit new
entries (`git add tests/data/tokenizers`); `python -m tests.tokenizer_store` lists them.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STORE = Path(__file__).resolve().parent / "data" / "tokenizers"
# Set by .ci/run: a miss fails instead of training. On CI's machine every entry the suite needs is
# committed, so a miss means the text a test learns from changed (it once depended on what the
# process had imported), and a tokenizer trained afresh would not be the one its thresholds were
# set on.
STRICT_ENV = "LMWB_TOKENIZER_STORE_STRICT"
# What train_tokenizer writes (vocab.txt for WordPiece only).
FILES = ("tokenizer.json", "tokenizer_meta.json", "tokenizer_config.json", "vocab.txt")


def store_key(corpus_dir: Path, *, algorithm: str = "wordpiece", vocab_size: int = 8000, lowercase: bool = True,
              extra_ids: int = 0) -> str:
    """The entry's name: the settings and the hash of the file train_tokenizer learns from
    (the corpus's sample.txt when the ingest drew one, else train.txt)."""
    corpus_dir = Path(corpus_dir)
    learn = corpus_dir / "sample.txt"
    if not learn.is_file():
        learn = corpus_dir / "train.txt"
    digest = hashlib.sha256()
    with open(learn, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    settings = json.dumps([algorithm, int(vocab_size), bool(lowercase), int(extra_ids)])
    return f"{algorithm}-{int(vocab_size)}-{int(extra_ids)}-{'lower' if lowercase else 'cased'}-" \
           f"{hashlib.sha256((settings + digest.hexdigest()).encode()).hexdigest()[:16]}"


def stored_tokenizer(corpus_dir: Path, out_dir: Path, *, algorithm: str = "wordpiece", vocab_size: int = 8000,
                     lowercase: bool = True, extra_ids: int = 0) -> dict:
    """The tokenizer folder train_tokenizer would write to out_dir, from the store; -> its stats."""
    settings = dict(algorithm=algorithm, vocab_size=vocab_size, lowercase=lowercase, extra_ids=extra_ids)
    entry = STORE / store_key(corpus_dir, **settings)
    if not (entry / "tokenizer_meta.json").is_file():
        if os.environ.get(STRICT_ENV, "").strip() not in ("", "0"):
            raise LookupError(
                f"tests/tokenizer_store: no stored tokenizer {entry.name} for {corpus_dir} ({STRICT_ENV} is set, "
                "as in CI). Either the text this test learns from is not the same in every process (make it "
                "deterministic), or the entry is new: run the test once without the variable and commit "
                "tests/data/tokenizers/.")
        _train_into_store(Path(corpus_dir), entry, settings)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out_dir / "shards", ignore_errors=True)  # encoded with another tokenizer
    for name in FILES:
        if (entry / name).is_file():
            shutil.copyfile(entry / name, out_dir / name)
    return json.loads((entry / "tokenizer_meta.json").read_text(encoding="utf-8"))["stats"]


def _train_into_store(corpus_dir: Path, entry: Path, settings: dict) -> None:
    """Train with the product's function into a temporary folder beside the entry, then rename it
    into place: two processes that miss at once both train, and the first rename wins."""
    from trainer.prep.tokenization import train_tokenizer

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        train_tokenizer(corpus_dir, tmp, **settings)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process stored it first: theirs is the one everyone loads
            if not (entry / "tokenizer_meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"tests/tokenizer_store: trained and stored {entry.name}; commit tests/data/tokenizers/",
          file=sys.stderr)


if __name__ == "__main__":
    for entry in sorted(STORE.iterdir()) if STORE.is_dir() else []:
        if entry.is_dir() and not entry.name.startswith("."):
            meta = json.loads((entry / "tokenizer_meta.json").read_text(encoding="utf-8"))
            print(f"{entry.name}: {meta['vocab_size']} tokens, trained on {meta['stats']['trained_on_bytes']:,} bytes")
