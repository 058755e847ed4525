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
