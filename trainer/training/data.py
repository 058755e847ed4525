"""Batches from token shards, in an order that depends only on (seed, position).

An epoch is a table of instances (token offset ranges, see trainer.objectives.examples) in a
permutation seeded by (seed, epoch). The stream's position is (epoch, index of the next
example in that permutation); it is saved in checkpoints, and a stream rebuilt at a saved
position yields exactly the batches the uninterrupted run would have seen.

Instances and masks depend on a *variant*: with static masking variant = epoch % 10 (BERT's
dupe_factor: ten fixed versions of the data, reused), with dynamic masking variant = epoch
(new pairs and new masks every epoch). Packing single segments (RoBERTa's FULL-SENTENCES or
DOC-SENTENCES) does not depend on it.

What the examples look like follows from the objective that trains the run (its `pairs`, a
trainer.objectives.examples.SentencePairs): packed single segments (MLM, SBO, RTD, distillation)
when it has none, else the pairs it says (NSP's random next segments, SOP's consecutive segments
swapped half the time, UniLM's consecutive pairs). Masking units other than "token" need
word-start flags, which come from the shards (word_starts.bin); for CJK text they are
re-segmented with jieba unless the shards already were (trainer.prep.segmenter).

The encoder-decoder, causal-LM and biLM collators (trainer.objectives.denoising, trainer.objectives.lm)
say which raw text they want with a `layout` (trainer.objectives.examples.TextLayout): fixed-length
chunks of the corpus read as one stream, or whole sentences of one document with their
sentence starts. Those tables do not depend on the variant either; the corruption does,
through the mask variant, exactly as MLM masks do.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from trainer import objectives
from trainer.errors import ConfigError
from trainer.objectives.base import Batch, Collator
from trainer.objectives.examples import (
    _ORDER, _PAIRS, _VALID, A_END, A_START, B_END, B_START, PACKINGS, RANDOM_NEXT, Example, SentencePairs, ShardIndex,
    SpecialIds, TextLayout, build_chunk_instances, build_packed_instances, build_stream_instances,
)
from trainer.objectives.masking import phrase_break_table
from trainer.prep.segmenter import TokenWordStarts, vocab_strings
from trainer.config import DUPE_FACTOR, RunConfig

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
    """The instance tables of one split and how to turn rows into Examples.

    pairs: None (packed single segments) or the SentencePairs of the objective that trains the run
    (trainer.objectives.base.Objective.pairs): which table, and which flag each row sets.
    packing: "full-sentences" or "doc-sentences" (single segments only).
    word_starts: attach word-start flags to the examples (masking units other than "token");
    refine(ids, stored_flags) -> flags recomputes them (trainer.prep.segmenter.TokenWordStarts:
    jieba for CJK runs, or vocabulary word marks when the shards have no flags).
    layout: raw text for the encoder-decoder / decoder-only collators (their `layout`);
    it replaces pairs and packing."""

    def __init__(self, index: ShardIndex, *, special: SpecialIds, seq_len: int, static: bool, seed: int,
                 pairs: SentencePairs | None = None, packing: str = "full-sentences",
                 word_starts: bool = False,
                 refine: Callable[[np.ndarray, np.ndarray | None], np.ndarray] | None = None,
                 layout: TextLayout | None = None, streams: int = 0):
        if packing not in PACKINGS:
            raise ConfigError(f"Unknown packing {packing!r}; choose one of {', '.join(PACKINGS)}.")
        if word_starts and index.word_starts is None and refine is None:
            raise ConfigError("These shards have no word boundaries, which whole-word, phrase, n-gram and span "
                              "masking need; train the tokenizer again to re-encode the corpus.")
        self.index, self.special, self.seq_len = index, special, seq_len
        self.pairs, self.packing, self.static, self.seed = pairs, packing, static, seed
        self.word_starts, self.refine, self.layout = word_starts, refine, layout
        self.streams = streams  # parallel streams of a "streams" layout: the batch size
        if layout is not None and layout.kind == "streams" and streams < 1:
            raise ValueError("a streams layout needs the number of streams (the batch size)")
        if layout is not None and (pairs is not None or word_starts):
            raise ValueError("a text layout takes neither pairs nor word starts")
        self._cache: tuple[int, np.ndarray] | None = None

    @property
    def ordered(self) -> bool:
        """Its examples are read in table order (the streams layout), not shuffled."""
        return self.layout is not None and self.layout.kind == "streams"

    def variant(self, epoch: int) -> int:
        if self.pairs is None:
            return 0  # packing is deterministic; dynamic masks still change through the mask variant
        return epoch % DUPE_FACTOR if self.static else epoch

    def mask_variant(self, epoch: int) -> int:
        return epoch % DUPE_FACTOR if self.static else epoch

    def instances(self, variant: int, pair_seed: list[int] | None = None) -> np.ndarray:
        if self._cache is not None and self._cache[0] == variant and pair_seed is None:
            return self._cache[1]
        if self.layout is not None:
            if self.layout.kind == "chunks":
                table = build_chunk_instances(self.index, length=self.layout.length,
                                              doc_sep=self.layout.doc_sep is not None)
            elif self.layout.kind == "streams":
                table = build_stream_instances(self.index, length=self.layout.length, streams=self.streams,
                                               doc_sep=self.layout.doc_sep is not None,
                                               overlap=self.layout.overlap)
            else:
                table = build_packed_instances(self.index, max_tokens=self.layout.length, cross_documents=False)
        elif self.pairs is not None:
            rng = np.random.default_rng(pair_seed if pair_seed is not None else [_PAIRS, self.seed, variant])
            table = self.pairs.instances(self.index, max_tokens=self.seq_len - 3, rng=rng)
        else:
            table = build_packed_instances(self.index, max_tokens=self.seq_len - 2,
                                           cross_documents=self.packing == "full-sentences")
        if pair_seed is None:
            self._cache = (variant, table)
        return table

    def example(self, table: np.ndarray, uid: int, mask_variant: int) -> Example:
        row = table[uid]
        if self.pairs is not None:
            a0, a1, b0, b1, flag = (int(row[A_START]), int(row[A_END]), int(row[B_START]), int(row[B_END]),
                                    bool(row[RANDOM_NEXT]))
            ex = Example(uid=uid, variant=mask_variant, a=self.index.span(a0, a1), b=self.index.span(b0, b1),
                         **self.pairs.flags(flag))
            if self.word_starts:
                ex.a_starts = self._flags(ex.a, self.index.span_starts(a0, a1))
                ex.b_starts = self._flags(ex.b, self.index.span_starts(b0, b1))
            return ex
        start, end = int(row[0]), int(row[1])
        if self.layout is not None:
            if self.layout.kind in ("chunks", "streams"):
                return Example(uid=uid, variant=mask_variant, a=self.index.stream(start, end, self.layout.doc_sep))
            return Example(uid=uid, variant=mask_variant, a=self.index.span(start, end),
                           sentence_starts=self.index.sentence_starts_in(start, end))
        ex = Example(uid=uid, variant=mask_variant, a=self.index.span(start, end, sep=self.special.sep))
        if self.word_starts:
            ex.a_starts = self._flags(ex.a, self.index.span_starts(start, end, sep=True))
        return ex

    def _flags(self, ids: np.ndarray, stored: np.ndarray | None) -> np.ndarray:
        return self.refine(ids, stored) if self.refine is not None else stored


class TrainStream:
    """Endless batches of the training split; `position` says where the next batch starts.

    shard=(rank, world_size): one of several processes training together
    (trainer.training.distributed). They read one stream of batches, each process every
    world_size-th batch from the rank-th on; after each batch every process's position is the
    same, where the one-process stream would be after world_size batches."""

    def __init__(self, source: ExampleSource, collator: Collator, *, batch_size: int, seed: int,
                 position: DataPosition | None = None, shard: tuple[int, int] = (0, 1)):
        self.source, self.collator, self.batch_size, self.seed = source, collator, batch_size, seed
        self.rank, self.world_size = shard
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
        if self.source.ordered:  # batched streams: segment k of every stream, then k + 1
            self._order = np.arange(len(self._epoch_table))
        else:
            self._order = np.random.default_rng([_ORDER, self.seed, e]).permutation(len(self._epoch_table))

    def next_batch(self) -> Batch:
        for _ in range(self.rank * self.batch_size):  # the batches of the ranks before this one
            self._advance()
        examples = []
        for _ in range(self.batch_size):
            uid = self._advance()
            examples.append(self.source.example(self._epoch_table, uid, self.source.mask_variant(self._pos.epoch)))
        for _ in range((self.world_size - 1 - self.rank) * self.batch_size):  # and of those after it
            self._advance()
        return self.collator(examples)

    def skip_batch(self) -> None:
        """Move past the next batch without building it: where next_batch() would leave the
        position (a data worker skips the batches the other workers build; batch_workers)."""
        for _ in range(self.world_size * self.batch_size):
            self._advance()

    def _advance(self) -> int:
        """The example at the position (in the next epoch when this one is used up); moves past it."""
        while self._pos.index >= len(self._order):
            self._pos = DataPosition(self._pos.epoch + 1, 0)
            self._load_epoch()
        uid = int(self._order[self._pos.index])
        self._pos.index += 1
        return uid

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()


class InThread:
    """The stream's batches built on the training thread as the loop asks for them, each with
    the stream position after it (data_workers 0 on the CPU)."""

    label = "batches collated on the training thread"

    def __init__(self, stream: TrainStream):
        self.stream = stream

    def next_batch(self) -> tuple[Batch, DataPosition]:
        return self.stream.next_batch(), self.stream.position

    def close(self) -> None:
        pass


class Prefetcher:
    """Collates the next batches on a background thread while the GPU computes (on a GPU when
    no data worker processes build them: trainer.training.batch_workers).

    Batches come out in exactly the stream's order, each with the stream position after it
    (what a checkpoint must record). With pin=True batches are put in pinned memory, so the
    copy to the GPU can overlap with compute."""

    label = "batches collated on a background thread"

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
                    batch = batch.pin_memory()
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


def fixed_batches(source: ExampleSource, collator: Collator, *, batch_size: int, n_batches: int,
                  seed: int) -> list[Batch]:
    """The validation set: the same batches (examples and masks) every evaluation."""
    if source.index.n_tokens == 0:
        return []
    try:
        table = source.instances(0, pair_seed=[_VALID, seed])
    except ConfigError:  # e.g. too few documents for NSP pairs: train without validation
        return []
    if source.ordered:  # the first n_batches segments of each stream, in order
        order = np.arange(len(table))[: batch_size * n_batches]
    else:
        order = np.random.default_rng([_VALID, seed, 1]).permutation(len(table))[: batch_size * n_batches]
    examples = [source.example(table, int(uid), VALID_VARIANT) for uid in order]
    return [collator(examples[i:i + batch_size]) for i in range(0, len(examples), batch_size)]


# ---------------------------------------------------------------------------- wiring
def make_collator(config: RunConfig, special: SpecialIds, tokenizer: Any = None) -> Collator:
    """The collator of config.objectives (trainer.objectives.resolve) with its masking unit
    (config.masking_unit when the config has one). `tokenizer` (a TokenizerBundle) gives the
    phrase-break table for "phrase" masking."""
    unit = getattr(config, "masking_unit", None)
    breaks = None
    if unit == "phrase" and tokenizer is not None:
        breaks = phrase_break_table(vocab_strings(tokenizer))
    lead = objectives.resolve(config.objectives)
    options = {name: getattr(config, name) for name in lead.collator_settings}  # e.g. XLNet's plm_k
    return objectives.build_collator(config.objectives, special=special, seq_len=config.seq_len, masking_unit=unit,
                                     mask_prob=config.mask_prob, seed=config.seed, phrase_breaks=breaks, **options)


def make_source(config: RunConfig, index: ShardIndex, special: SpecialIds, collator: Collator, *,
                static: bool, tokenizer: Any = None) -> ExampleSource:
    """The examples the collator needs: pairs per its objectives, packing per config.packing,
    or the raw text layout of an encoder-decoder / decoder-only collator."""
    layout = getattr(collator, "layout", None)
    if layout is not None:
        return ExampleSource(index, special=special, seq_len=config.seq_len, static=static, seed=config.seed,
                             layout=layout, streams=config.batch_size if layout.kind == "streams" else 0)
    refine = None
    if collator.needs_word_starts and tokenizer is not None and index.meta.get("word_segmenter") not in ("jieba", "none"):
        words = TokenWordStarts.from_tokenizer(tokenizer)
        if words.has_cjk or index.word_starts is None:  # CJK runs need jieba; no flags need the vocab
            refine = words
    return ExampleSource(index, special=special, seq_len=config.seq_len, static=static, seed=config.seed,
                         pairs=objectives.resolve(config.objectives).pairs,
                         packing=getattr(config, "packing", "full-sentences"),
                         word_starts=collator.needs_word_starts, refine=refine)


def _tokenizer_if_needed(config: RunConfig, tokenizer_dir: Path) -> Any:
    """The tokenizer, loaded only when the masking unit needs its vocabulary (word boundaries
    for CJK text or for shards without them, phrase breaks)."""
    unit = getattr(config, "masking_unit", None) or objectives.resolve(config.objectives).units[0]
    if unit == "token":
        return None
    from trainer.prep.tokenization import load_tokenizer

    return load_tokenizer(Path(tokenizer_dir))


def open_split(tokenizer_dir: Path, split: str) -> ShardIndex:
    from trainer.prep.shards import open_shards

    return ShardIndex.from_shards(open_shards(Path(tokenizer_dir), split))


def packing(config: RunConfig, collator: Collator, special: SpecialIds) -> Collator:
    """The collator whose batches the model computes: packed (trainer.objectives.packing) when
    the run's objective takes packed batches, so that padding is not computed."""
    if objectives.resolve(config.objectives).packs:
        from trainer.objectives.packing import PackingCollator

        return PackingCollator(collator, special.pad)
    return collator


def build_train_stream(config: RunConfig, tokenizer_dir: Path, special: SpecialIds,
                       position: DataPosition | None = None, shard: tuple[int, int] = (0, 1), *,
                       pack: bool = True) -> TrainStream:
    """The run's training batches from `position` on; `pack=False` keeps them padded, one
    example a row (the masking inspector shows them so)."""
    tokenizer = _tokenizer_if_needed(config, tokenizer_dir)
    collator = make_collator(config, special, tokenizer)
    source = make_source(config, open_split(tokenizer_dir, "train"), special, collator,
                         static=config.masking == "static", tokenizer=tokenizer)
    return TrainStream(source, packing(config, collator, special) if pack else collator,
                       batch_size=config.batch_size, seed=config.seed, position=position, shard=shard)


def build_valid_batches(config: RunConfig, tokenizer_dir: Path, special: SpecialIds) -> list[Batch]:
    tokenizer = _tokenizer_if_needed(config, tokenizer_dir)
    collator = make_collator(config, special, tokenizer)
    source = make_source(config, open_split(tokenizer_dir, "valid"), special, collator, static=True,
                         tokenizer=tokenizer)
    return fixed_batches(source, packing(config, collator, special), batch_size=config.batch_size,
                         n_batches=config.eval_batches, seed=config.seed)
