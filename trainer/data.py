"""Batches from token shards, in an order that depends only on (seed, position).

An epoch is a table of instances (token offset ranges, see trainer.collators) in a
permutation seeded by (seed, epoch). The stream's position is (epoch, index of the next
example in that permutation); it is saved in checkpoints, and a stream rebuilt at a saved
position yields exactly the batches the uninterrupted run would have seen.

Instances and masks depend on a *variant*: with static masking variant = epoch % 10 (BERT's
dupe_factor: ten fixed versions of the data, reused), with dynamic masking variant = epoch
(new NSP pairs and new masks every epoch). MLM-only packing does not depend on it.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from trainer.collators import (
    _ORDER, _PAIRS, _VALID, A_END, A_START, B_END, B_START, RANDOM_NEXT, Batch, Example, MLMCollator,
    NSPCollator, ShardIndex, SpecialIds, build_packed_instances, build_pair_instances,
)
from trainer.config import DUPE_FACTOR, RunConfig
from trainer.errors import ConfigError

VALID_VARIANT = 2**31 - 1  # mask variant of the validation examples (never a training epoch)


@dataclass
class DataPosition:
    epoch: int = 0
    index: int = 0  # examples of this epoch already consumed

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DataPosition":
        return cls(epoch=int(d.get("epoch", 0)), index=int(d.get("index", 0)))


class ExampleSource:
    """The instance tables of one split and how to turn rows into Examples."""

    def __init__(self, index: ShardIndex, *, special: SpecialIds, seq_len: int, nsp: bool,
                 static: bool, seed: int):
        self.index, self.special, self.seq_len = index, special, seq_len
        self.nsp, self.static, self.seed = nsp, static, seed
        self._cache: tuple[int, np.ndarray] | None = None

    def variant(self, epoch: int) -> int:
        if not self.nsp:
            return 0  # packing is deterministic; dynamic masks still change through the mask variant
        return epoch % DUPE_FACTOR if self.static else epoch

    def mask_variant(self, epoch: int) -> int:
        return epoch % DUPE_FACTOR if self.static else epoch

    def instances(self, variant: int, pair_seed: list[int] | None = None) -> np.ndarray:
        if self._cache is not None and self._cache[0] == variant and pair_seed is None:
            return self._cache[1]
        if self.nsp:
            rng = np.random.default_rng(pair_seed if pair_seed is not None else [_PAIRS, self.seed, variant])
            table = build_pair_instances(self.index, max_tokens=self.seq_len - 3, rng=rng)
        else:
            table = build_packed_instances(self.index, max_tokens=self.seq_len - 2)
        if pair_seed is None:
            self._cache = (variant, table)
        return table

    def example(self, table: np.ndarray, uid: int, mask_variant: int) -> Example:
        row = table[uid]
        if self.nsp:
            return Example(uid=uid, variant=mask_variant,
                           a=self.index.span(int(row[A_START]), int(row[A_END])),
                           b=self.index.span(int(row[B_START]), int(row[B_END])),
                           is_random_next=bool(row[RANDOM_NEXT]))
        return Example(uid=uid, variant=mask_variant, a=self.index.span(int(row[0]), int(row[1]), sep=self.special.sep))


class TrainStream:
    """Endless batches of the training split; `position` says where the next batch starts."""

    def __init__(self, source: ExampleSource, collator: MLMCollator, *, batch_size: int, seed: int,
                 position: DataPosition | None = None):
        self.source, self.collator, self.batch_size, self.seed = source, collator, batch_size, seed
        self._pos = DataPosition(**asdict(position)) if position else DataPosition()
        self._epoch_table: np.ndarray | None = None
        self._order: np.ndarray | None = None
        self._load_epoch()
        if len(self._order) < batch_size:
            raise ConfigError(
                f"The training data gives only {len(self._order)} sequences of up to {source.seq_len} tokens, "
                f"fewer than one batch of {batch_size}. Use a larger corpus, a smaller batch_size or a shorter seq_len."
            )

    @property
    def position(self) -> DataPosition:
        return DataPosition(self._pos.epoch, self._pos.index)

    @property
    def epoch_size(self) -> int:
        return len(self._order)

    def _load_epoch(self) -> None:
        e = self._pos.epoch
        self._epoch_table = self.source.instances(self.source.variant(e))
        self._order = np.random.default_rng([_ORDER, self.seed, e]).permutation(len(self._epoch_table))

    def next_batch(self) -> Batch:
        examples = []
        while len(examples) < self.batch_size:
            if self._pos.index >= len(self._order):
                self._pos = DataPosition(self._pos.epoch + 1, 0)
                self._load_epoch()
                continue
            uid = int(self._order[self._pos.index])
            examples.append(self.source.example(self._epoch_table, uid, self.source.mask_variant(self._pos.epoch)))
            self._pos.index += 1
        return self.collator(examples)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()


class Prefetcher:
    """Collates the next batches on a background thread while the GPU computes.

    Batches come out in exactly the stream's order, each with the stream position after it
    (what a checkpoint must record). With pin=True batches are put in pinned memory, so the
    copy to the GPU can overlap with compute."""

    def __init__(self, stream: TrainStream, *, depth: int = 4, pin: bool = False):
        self.stream, self.pin = stream, pin
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.stream.next_batch()
                if self.pin:
                    batch = Batch(*(None if t is None else t.pin_memory() for t in
                                    (batch.input_ids, batch.attention_mask, batch.token_type_ids,
                                     batch.mlm_labels, batch.nsp_labels)))
                item = (batch, self.stream.position)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # handed to the consumer
            self._queue.put((e, None))

    def next_batch(self) -> tuple[Batch, DataPosition]:
        item, position = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item, position

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def fixed_batches(source: ExampleSource, collator: MLMCollator, *, batch_size: int, n_batches: int,
                  seed: int) -> list[Batch]:
    """The validation set: the same batches (examples and masks) every evaluation."""
    if source.index.n_tokens == 0:
        return []
    try:
        table = source.instances(0, pair_seed=[_VALID, seed])
    except ConfigError:  # e.g. too few documents for NSP pairs: train without validation
        return []
    order = np.random.default_rng([_VALID, seed, 1]).permutation(len(table))[: batch_size * n_batches]
    examples = [source.example(table, int(uid), VALID_VARIANT) for uid in order]
    return [collator(examples[i:i + batch_size]) for i in range(0, len(examples), batch_size)]


# ---------------------------------------------------------------------------- wiring
def make_collator(config: RunConfig, special: SpecialIds) -> MLMCollator:
    cls = NSPCollator if config.uses_nsp else MLMCollator
    return cls(special=special, seq_len=config.seq_len, mask_prob=config.mask_prob, seed=config.seed)


def open_split(tokenizer_dir: Path, split: str) -> ShardIndex:
    from trainer.shards import open_shards

    return ShardIndex.from_shards(open_shards(Path(tokenizer_dir), split))


def build_train_stream(config: RunConfig, tokenizer_dir: Path, special: SpecialIds,
                       position: DataPosition | None = None) -> TrainStream:
    source = ExampleSource(open_split(tokenizer_dir, "train"), special=special, seq_len=config.seq_len,
                           nsp=config.uses_nsp, static=config.masking == "static", seed=config.seed)
    return TrainStream(source, make_collator(config, special), batch_size=config.batch_size,
                       seed=config.seed, position=position)


def build_valid_batches(config: RunConfig, tokenizer_dir: Path, special: SpecialIds) -> list[Batch]:
    source = ExampleSource(open_split(tokenizer_dir, "valid"), special=special, seq_len=config.seq_len,
                           nsp=config.uses_nsp, static=True, seed=config.seed)
    return fixed_batches(source, make_collator(config, special), batch_size=config.batch_size,
                         n_batches=config.eval_batches, seed=config.seed)
