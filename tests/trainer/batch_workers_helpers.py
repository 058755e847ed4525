"""Test doubles for the data worker processes (trainer.training.batch_workers). They live in an
importable module, not in a test file, because a worker process unpickles them by name."""
from __future__ import annotations

import numpy as np

from trainer.errors import ConfigError
from trainer.finetune.tasks import EncodesAhead, Encoded
from trainer.training import batch_workers


class FailingCollator:
    """A collator that refuses every batch with ConfigError(message)."""

    def __init__(self, inner, message: str):
        self.inner, self.message = inner, message
        self.seq_len = inner.seq_len

    @property
    def needs_word_starts(self) -> bool:
        return self.inner.needs_word_starts

    def __call__(self, examples):
        raise ConfigError(self.message)


class Lengths(EncodesAhead):
    """Fine-tuning examples {"i": index, "n": length} -> (an (B, T) mask of their lengths, their
    indices), encoded ahead (so ExampleStream can group them by length). No tokenizer."""

    def encode(self, examples):
        return [Encoded(np.ones(ex["n"], dtype=np.int64), np.zeros(ex["n"], dtype=np.int64)) for ex in examples]

    def collate(self, examples, encoded):
        import torch

        mask = torch.zeros(len(encoded), max(len(e.ids) for e in encoded), dtype=torch.long)
        for row, e in enumerate(encoded):
            mask[row, :len(e.ids)] = 1
        return mask, [ex["i"] for ex in examples]


def wait_for_workers(monkeypatch) -> list:
    """Make every BatchWorkers the engine opens wait until its workers have started (so that they,
    not the training process, build every batch); returns the list of those opened."""
    opened = []

    class Waiting(batch_workers.BatchWorkers):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            opened.append(self)
            self.wait_until_ready()

    monkeypatch.setattr(batch_workers, "BatchWorkers", Waiting)
    return opened


def all_ended(opened: list) -> bool:
    """Whether every worker process of these BatchWorkers has ended (and was reaped)."""
    return all(proc.returncode is not None for workers in opened for proc in workers.procs)


def batches_in_a_daemonic_process(tokenizer_dir, config: dict, n: int) -> dict:
    """Build n batches of the run `config` with 2 data workers inside a daemonic process, as a
    Celery prefork pool process is: {"refused": what multiprocessing says to a child started
    there, "input_ids": the batches' input ids (numpy), "built_here", "exit_codes"}."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_daemonic_job, args=(str(tokenizer_dir), config, n, queue), daemon=True)
    proc.start()
    try:
        return queue.get(timeout=300)
    finally:
        proc.join(timeout=60)


def _daemonic_job(tokenizer_dir: str, config: dict, n: int, queue) -> None:
    import multiprocessing
    from pathlib import Path

    from trainer.config import RunConfig
    from trainer.objectives.examples import SpecialIds
    from trainer.prep.tokenization import load_tokenizer
    from trainer.training.data import build_train_stream

    try:
        multiprocessing.get_context("spawn").Process(target=print).start()
        refused = ""
    except AssertionError as e:
        refused = str(e)
    folder = Path(tokenizer_dir)
    stream = build_train_stream(RunConfig.from_dict(config), folder, SpecialIds.from_tokenizer(load_tokenizer(folder)))
    built = batch_workers.BatchWorkers(stream, 2)
    try:
        built.wait_until_ready()
        ids = [built.next_batch()[0].input_ids.numpy() for _ in range(n)]
    except Exception as e:  # the test says what went wrong rather than wait for the queue
        queue.put({"error": f"{type(e).__name__}: {e}"})
        return
    finally:
        built.close()
    queue.put({"refused": refused, "input_ids": ids, "built_here": built.built_here,
               "exit_codes": [proc.returncode for proc in built.procs]})
