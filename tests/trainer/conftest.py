"""Shared data for the trainer tests: a small demo corpus, cleaned, tokenized and sharded once."""
from __future__ import annotations

from pathlib import Path

import pytest

CORPUS_BYTES = 200_000
VOCAB_SIZE = 2000


def write_small_demo_corpus(path: Path, n_bytes: int = CORPUS_BYTES) -> Path:
    """The demo corpus cut after the last whole document within n_bytes."""
    from trainer.prep.corpus import write_demo_corpus

    full = write_demo_corpus(path.parent / "demo_full.txt")
    text = full.read_text(encoding="utf-8")
    cut = text.rfind("\n\n", 0, n_bytes)
    path.write_text(text[: cut if cut > 0 else n_bytes] + "\n", encoding="utf-8")
    full.unlink()
    return path


@pytest.fixture(scope="session")
def small_corpus_file(tmp_path_factory) -> Path:
    return write_small_demo_corpus(tmp_path_factory.mktemp("raw") / "demo.txt")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, small_corpus_file) -> Path:
    """A tokenizer folder with shards/{train,valid} built from ~200 KB of the demo corpus."""
    from trainer.prep.corpus import CleaningOptions, ingest
    from trainer.prep.shards import encode_corpus
    from tests.tokenizer_store import stored_tokenizer

    base = tmp_path_factory.mktemp("prepared")
    corpus_dir, tok_dir = base / "corpus", base / "tokenizer"
    ingest(small_corpus_file, corpus_dir, original_filename="demo.txt", options=CleaningOptions(),
           valid_fraction=0.1, seed=0)
    stored_tokenizer(corpus_dir, tok_dir, algorithm="wordpiece", vocab_size=VOCAB_SIZE, lowercase=True)
    encode_corpus(corpus_dir, tok_dir)
    return tok_dir


def tiny_config(**changes):
    """bert-tiny shrunk to hidden 64: a few steps take well under a second on a CPU."""
    from trainer.config import RunConfig

    base = dict(preset="bert-tiny", model_overrides={"hidden_size": 64, "num_heads": 2},
                objectives=["mlm", "nsp"], max_steps=40, batch_size=16, seq_len=64, lr=2e-3,
                warmup_steps=4, eval_every=20, eval_batches=4, checkpoint_every=20, log_every=5,
                seed=0, device="cpu", num_threads=1)
    base.update(changes)
    return RunConfig(**base)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, tokenizer_dir):
    """40 steps of MLM + NSP; checkpoints at 20 and 40. -> (result, sink, run folder)."""
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    out = tmp_path_factory.mktemp("run")
    sink = ListSink()
    result = train(tiny_config(), data_dir=tokenizer_dir, out_dir=out, sink=sink)
    return result, sink, out


@pytest.fixture(scope="session")
def make_config():
    """tiny_config as a fixture (test modules cannot import conftest under importlib mode)."""
    return tiny_config


def _tokenizer_for(tmp_path_factory, tokenizer_dir: Path, algorithm: str, **options) -> Path:
    """Another tokenizer (with shards) on the same prepared corpus as `tokenizer_dir`."""
    from trainer.prep.shards import encode_corpus
    from tests.tokenizer_store import stored_tokenizer

    corpus_dir = tokenizer_dir.parent / "corpus"
    out = tmp_path_factory.mktemp(f"prepared-{algorithm}") / "tokenizer"
    options.setdefault("vocab_size", VOCAB_SIZE)
    stored_tokenizer(corpus_dir, out, algorithm=algorithm, lowercase=True, **options)
    encode_corpus(corpus_dir, out)
    return out


@pytest.fixture(scope="session")
def sentinel_tokenizer_dir(tmp_path_factory, tokenizer_dir) -> Path:
    """A Unigram tokenizer with T5's 100 sentinel tokens (and shards), on the same corpus."""
    return _tokenizer_for(tmp_path_factory, tokenizer_dir, "unigram", vocab_size=2000, extra_ids=100)


@pytest.fixture(scope="session")
def bpe_tokenizer_dir(tmp_path_factory, tokenizer_dir) -> Path:
    """A byte-level BPE tokenizer (RoBERTa's kind) with shards, on the same corpus."""
    return _tokenizer_for(tmp_path_factory, tokenizer_dir, "bpe")


@pytest.fixture(scope="session")
def unigram_tokenizer_dir(tmp_path_factory, tokenizer_dir) -> Path:
    """A Unigram (SentencePiece-style) tokenizer (ALBERT's kind) with shards, on the same corpus."""
    return _tokenizer_for(tmp_path_factory, tokenizer_dir, "unigram")


def family_config(family: str, **changes):
    """A tiny run of any family: its -tiny preset at hidden 64, its default objectives, 50 steps
    of 8 x 64 tokens at lr 3e-3 (a few seconds on one CPU thread)."""
    from trainer.config import RunConfig
    from trainer import families

    spec = families.get(family)
    base = dict(family=family, preset=spec.default_preset,
                model_overrides={"hidden_size": 64, "num_heads": 2}, objectives=list(spec.default_objectives),
                max_steps=50, batch_size=8, seq_len=64, lr=3e-3, warmup_steps=5, eval_every=25, eval_batches=2,
                checkpoint_every=50, log_every=5, seed=0, device="cpu", num_threads=1)
    base.update(changes)
    return RunConfig(**base)


# T5's own pre-training recipe at its preset's size (Adafactor's lr 0.01, the inverse square root
# schedule, no weight decay): what the tests that fine-tune a pre-trained T5 start from.
T5_RECIPE = dict(lr=0.01, schedule="inverse_sqrt", weight_decay=0.0, model_overrides={})


@pytest.fixture(scope="session")
def make_family_config():
    """family_config as a fixture."""
    return family_config
