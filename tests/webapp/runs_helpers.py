"""Helpers for the runs, websocket and explorer tests (imported by them; holds no tests).

Real data is prepared once per session into STORAGE_ROOT/test-cache/: ~120 KB of the demo
corpus, a 1,000-token WordPiece tokenizer with shards, and one tiny trained run with
checkpoints. Rows pointing at it are made per test.
"""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from django.conf import settings

from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint, Run, RunStatus

CORPUS_BYTES = 120_000
VOCAB_SIZE = 1000

# bert-tiny shrunk to hidden 64 with short sequences: 20 steps take a second or two on a CPU.
TINY_TRAINING = dict(
    model_overrides={"hidden_size": 64, "num_heads": 2}, max_steps=20, batch_size=4, seq_len=32, lr=2e-3,
    warmup_steps=2, eval_every=10, eval_batches=2, checkpoint_every=10, log_every=5, seed=0, device="cpu",
)

_lock = threading.Lock()


def cache_dir() -> Path:
    return Path(settings.STORAGE_ROOT) / "test-cache"


def prepared_data(algorithm: str = "wordpiece", extra_ids: int = 0) -> tuple[Path, Path]:
    """(corpus folder, tokenizer folder with shards), built on first use; another algorithm or
    number of T5 sentinel tokens gets a tokenizer folder of its own on the same corpus."""
    base = cache_dir()
    corpus_dir = base / "corpus"
    if (algorithm, extra_ids) != ("wordpiece", 0):
        _, plain = prepared_data()
        tok_dir = base / f"tokenizer-{algorithm}-{extra_ids}"
        with _lock:
            if not (tok_dir / "shards" / "valid").is_dir():
                from trainer.prep.shards import encode_corpus
                from tests.tokenizer_store import stored_tokenizer

                stored_tokenizer(corpus_dir, tok_dir, algorithm=algorithm, vocab_size=VOCAB_SIZE, lowercase=True,
                                extra_ids=extra_ids)
                encode_corpus(corpus_dir, tok_dir)
        return corpus_dir, tok_dir
    tok_dir = base / "tokenizer"
    with _lock:
        if (tok_dir / "shards" / "valid").is_dir():
            return corpus_dir, tok_dir
        from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
        from trainer.prep.shards import encode_corpus
        from tests.tokenizer_store import stored_tokenizer

        base.mkdir(parents=True, exist_ok=True)
        full = write_demo_corpus(base / "demo_full.txt")
        text = full.read_text(encoding="utf-8")
        cut = text.rfind("\n\n", 0, CORPUS_BYTES)
        raw = base / "demo.txt"
        raw.write_text(text[: cut if cut > 0 else CORPUS_BYTES] + "\n", encoding="utf-8")
        full.unlink()
        ingest(raw, corpus_dir, original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.1, seed=0)
        stored_tokenizer(corpus_dir, tok_dir, algorithm="wordpiece", vocab_size=VOCAB_SIZE, lowercase=True)
        encode_corpus(corpus_dir, tok_dir)
        return corpus_dir, tok_dir


def trained_checkpoints() -> list[tuple[int, Path]]:
    """[(step, folder)] of a 20-step MLM+NSP run trained once into the cache (no database)."""
    out = cache_dir() / "trained-run"
    from trainer.training.checkpoints import list_checkpoints

    with _lock:
        found = list_checkpoints(out)
        if found:
            return found
    _, tok_dir = prepared_data()
    from trainer.config import RunConfig
    from trainer.training.engine import train
    from trainer.training.sinks import NullSink

    with _lock:
        train(RunConfig(**TINY_TRAINING), data_dir=tok_dir, out_dir=out, sink=NullSink())
        return list_checkpoints(out)


def make_data(owner, *, real: bool = False, status: str = JobStatus.READY, algorithm: str = "wordpiece",
              name: str = "demo", extra_ids: int = 0) -> tuple[Corpus, Tokenizer]:
    """A ready corpus and tokenizer of `owner`; with real=True their folders hold real files."""
    corpus = Corpus.objects.create(owner=owner, name=f"{name} corpus", status=status,
                                   stats={"documents": 10, "sentences": 100})
    tokenizer = Tokenizer.objects.create(owner=owner, corpus=corpus, name=f"{name} tokenizer", status=status,
                                         algorithm=algorithm, vocab_size=VOCAB_SIZE, extra_ids=extra_ids)
    if real:
        corpus_dir, tok_dir = prepared_data(algorithm, extra_ids)
        for src, dst in ((corpus_dir, corpus.folder), (tok_dir, tokenizer.folder)):
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                os.symlink(src, dst, target_is_directory=True)
    return corpus, tokenizer


def make_run(owner, *, corpus=None, tokenizer=None, status: str = RunStatus.QUEUED, **fields) -> Run:
    from trainer.config import RunConfig

    if tokenizer is None:
        corpus, tokenizer = make_data(owner)
    config = RunConfig(**TINY_TRAINING)
    defaults = dict(name="tiny run", family="bert", preset=config.preset, objectives=list(config.objectives),
                    config=config.to_dict(), queue="cpu", max_steps=config.max_steps)
    return Run.objects.create(owner=owner, corpus=corpus or tokenizer.corpus, tokenizer=tokenizer, status=status,
                              **{**defaults, **fields})


def make_checkpoint(run: Run, *, step: int = 10, real: bool = False) -> Checkpoint:
    """A Checkpoint row; with real=True its folder is a copy of a trained checkpoint."""
    rel = Path("runs") / str(run.id) / "checkpoints" / f"step-{step:08d}"
    if real:
        source = trained_checkpoints()[-1][1]
        target = Path(settings.STORAGE_ROOT) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, target)
    return Checkpoint.objects.create(run=run, step=step, path=str(rel),
                                     metrics={"train": {"loss": 7.5}, "valid": {"loss": 7.25}})
