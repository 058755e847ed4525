"""MLM masking statistics, NSP pairs, packing, shapes, static vs dynamic masks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.objectives.masking import IGNORE_INDEX, mask_tokens
from trainer.objectives.examples import Example, ShardIndex, SpecialIds, build_packed_instances, build_pair_instances, truncate_pair
from trainer.objectives.encoder import NSP, MaskedBatch, MLMCollator, NSPCollator
from trainer.config import RunConfig
from trainer.training.data import DataPosition, ExampleSource, TrainStream, build_train_stream, build_valid_batches
from trainer.errors import ConfigError

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000, special=(0, 1, 2, 3, 4))


def synthetic_index(n_docs=400, seed=0, max_sentences=12, max_len=30) -> ShardIndex:
    rng = np.random.default_rng(seed)
    docs = [[rng.integers(5, 1000, rng.integers(3, max_len)).tolist() for _ in range(rng.integers(1, max_sentences))]
            for _ in range(n_docs)]
    return ShardIndex.from_documents(docs)


def test_mlm_statistics_over_100k_tokens():
    rng = np.random.default_rng(0)
    originals, inputs, labels = [], [], []
    n = 0
    while n < 120_000:
        ids = np.concatenate([[SPECIAL.cls], rng.integers(5, 1000, rng.integers(20, 126)), [SPECIAL.sep]])
        x, y = mask_tokens(ids, rng=rng, special=SPECIAL, mask_prob=0.15)
        originals.append(ids), inputs.append(x), labels.append(y)
        n += len(ids) - 2
    ids, x, y = (np.concatenate(a) for a in (originals, inputs, labels))
    special = SPECIAL.is_special(ids)
    chosen = y != IGNORE_INDEX
    assert abs(chosen.sum() / (~special).sum() - 0.15) < 0.01
    assert not (chosen & special).any() and (x[special] == ids[special]).all()  # specials never touched
    assert (y[chosen] == ids[chosen]).all() and (x[~chosen] == ids[~chosen]).all()
    masked = (x[chosen] == SPECIAL.mask).mean()
    kept = (x[chosen] == ids[chosen]).mean()
    replaced = 1 - masked - kept
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(replaced - 0.1) < 0.01
    assert not SPECIAL.is_special(x[chosen & (x != SPECIAL.mask)]).any()  # random tokens are ordinary


def test_mask_count_is_exact_per_sequence():
    rng = np.random.default_rng(1)
    for n in (1, 5, 7, 20, 100):
        ids = np.concatenate([[2], rng.integers(5, 1000, n), [3]])
        _, y = mask_tokens(ids, rng=rng, special=SPECIAL)
        assert (y != IGNORE_INDEX).sum() == max(1, int(n * 0.15 + 0.5))


def test_nsp_pairs_are_half_random_and_from_other_documents(tokenizer_dir):
    from trainer.training.data import open_split

    index = open_split(tokenizer_dir, "train")
    tables = [build_pair_instances(index, max_tokens=61, rng=np.random.default_rng([2, 0, v])) for v in range(10)]
    table = np.concatenate(tables)
    assert len(table) >= 10_000
    assert abs(table[:, 4].mean() - 0.5) < 0.02
    doc_of = lambda t: np.searchsorted(index.doc_token_starts, t, side="right") - 1  # noqa: E731
    rand, true = table[table[:, 4] == 1], table[table[:, 4] == 0]
    assert (doc_of(rand[:, 0]) != doc_of(rand[:, 2])).all()  # NotNext: B from another document
    assert (true[:, 1] == true[:, 2]).all()  # IsNext: B starts where A ends...
    assert (doc_of(true[:, 0]) == doc_of(true[:, 3] - 1)).all()  # ...in the same document
    starts = set(index.sentences.tolist())  # whole sentences only
    assert all(int(t) in starts for t in table[:, :4].ravel())


def test_nsp_batches_have_bert_layout():
    index = synthetic_index()
    table = build_pair_instances(index, max_tokens=45, rng=np.random.default_rng(0))
    source = ExampleSource(index, special=SPECIAL, seq_len=48, pairs=NSP.pairs, static=False, seed=0)
    collator = NSPCollator(special=SPECIAL, seq_len=48)
    examples = [source.example(table, uid, 0) for uid in range(64)]
    batch = collator(examples)
    B, T = batch.input_ids.shape
    assert B == 64 and T <= 48 and batch.nsp_labels.shape == (64,)
    assert batch.nsp_labels.tolist() == [int(ex.is_random_next) for ex in examples]
    for i in range(B):
        n = int(batch.attention_mask[i].sum())
        ids, types = batch.input_ids[i, :n], batch.token_type_ids[i, :n]
        assert ids[0] == SPECIAL.cls and ids[-1] == SPECIAL.sep and (ids == SPECIAL.sep).sum() == 2
        first_sep = int((ids == SPECIAL.sep).nonzero()[0])
        assert (types[: first_sep + 1] == 0).all() and (types[first_sep + 1:] == 1).all()
        assert (batch.input_ids[i, n:] == SPECIAL.pad).all() and (batch.mlm_labels[i, n:] == IGNORE_INDEX).all()
        assert (batch.attention_mask[i, :n] == 1).all() and (batch.attention_mask[i, n:] == 0).all()


def test_truncation_shortens_the_longer_side_like_bert():
    rng = np.random.default_rng(0)
    a, b = truncate_pair(np.arange(100), np.arange(10), 50, rng)
    assert (len(a), len(b)) == (40, 10)
    a, b = truncate_pair(np.arange(30), np.arange(31), 50, rng)
    assert (len(a), len(b)) == (25, 25) and np.all(np.diff(a) == 1)  # contiguous, cut at the ends


def test_packing_fills_sequences_with_whole_sentences():
    index = synthetic_index()
    table = build_packed_instances(index, max_tokens=62)
    source = ExampleSource(index, special=SPECIAL, seq_len=64, static=False, seed=0)
    lengths = [len(source.example(table, uid, 0).a) for uid in range(len(table))]
    assert max(lengths) <= 62 and np.mean(lengths) > 50  # packed nearly full
    assert table[0, 0] == 0 and (table[1:, 0] == table[:-1, 1]).all()  # every token used once, in order
    assert table[-1, 1] == index.n_tokens
    batch = MLMCollator(special=SPECIAL, seq_len=64)([source.example(table, 0, 0)])
    assert type(batch) is MaskedBatch and batch.input_ids[0, 0] == SPECIAL.cls  # no pair labels
    assert (batch.token_type_ids == 0).all()


def test_packing_cuts_overlong_sentences_and_marks_document_breaks():
    index = ShardIndex.from_documents([[list(range(10, 110))], [[5, 6], [7, 8]], [[9, 9]]])
    table = build_packed_instances(index, max_tokens=30)
    assert table.tolist() == [[0, 30], [30, 60], [60, 90], [90, 100], [100, 106]]
    assert index.span(90, 106, sep=SPECIAL.sep).tolist()[-8:] == [3, 5, 6, 7, 8, 3, 9, 9]


def test_static_masks_repeat_every_ten_epochs_and_dynamic_ones_do_not():
    index = synthetic_index(n_docs=50)
    for static in (True, False):
        source = ExampleSource(index, special=SPECIAL, seq_len=64, static=static, seed=3)
        collator = MLMCollator(special=SPECIAL, seq_len=64, seed=3)
        table = source.instances(0)
        masks = [collator([source.example(table, 5, source.mask_variant(e))]).input_ids for e in range(11)]
        if static:
            assert torch.equal(masks[0], masks[10])
            assert len({tuple(m.flatten().tolist()) for m in masks[:10]}) == 10
        else:
            assert not torch.equal(masks[0], masks[10])


def test_stream_is_a_function_of_seed_and_position():
    index = synthetic_index(n_docs=60)
    make = lambda pos=None: TrainStream(  # noqa: E731
        ExampleSource(index, special=SPECIAL, seq_len=64, pairs=NSP.pairs, static=False, seed=7),
        NSPCollator(special=SPECIAL, seq_len=64, seed=7), batch_size=16, seed=7, position=pos)
    stream = make()
    batches = [stream.next_batch() for _ in range(40)]  # crosses epoch boundaries
    assert stream.position.epoch >= 2
    again = make(DataPosition(0, 0))
    resumed = make()
    for _ in range(17):
        resumed.next_batch()
    resumed = make(resumed.position)
    for i, b in enumerate(batches):
        assert torch.equal(b.input_ids, again.next_batch().input_ids)
        if i >= 17:
            rb = resumed.next_batch()
            assert torch.equal(b.input_ids, rb.input_ids) and torch.equal(b.mlm_labels, rb.mlm_labels)


def test_real_shards_give_train_and_fixed_valid_batches(tokenizer_dir):
    from trainer.prep.tokenization import load_tokenizer

    special = SpecialIds.from_tokenizer(load_tokenizer(tokenizer_dir))
    config = RunConfig(seq_len=64, batch_size=8, eval_batches=3, objectives=["mlm"])
    batch = build_train_stream(config, tokenizer_dir, special, pack=False).next_batch()
    assert batch.input_ids.shape[0] == 8 and batch.input_ids.shape[1] <= 64
    # The stream the model trains on packs the same 8 examples into as many rows as first fit needs.
    packed = build_train_stream(config, tokenizer_dir, special).next_batch()
    assert packed.input_ids.shape[0] <= 8 and packed.input_ids.shape[1] <= 64
    assert int((packed.input_ids != special.pad).sum()) == int(batch.attention_mask.sum())
    v1, v2 = build_valid_batches(config, tokenizer_dir, special), build_valid_batches(config, tokenizer_dir, special)
    assert len(v1) == 3 and all(torch.equal(a.input_ids, b.input_ids) for a, b in zip(v1, v2))


def test_a_corpus_too_small_for_one_batch_is_a_user_error():
    index = synthetic_index(n_docs=3)
    with pytest.raises(ConfigError, match="fewer than one batch of 512"):
        TrainStream(ExampleSource(index, special=SPECIAL, seq_len=64, static=False, seed=0),
                    MLMCollator(special=SPECIAL, seq_len=64), batch_size=512, seed=0)
    one_doc = ShardIndex.from_documents([[[5, 6, 7], [8, 9]]])
    with pytest.raises(ConfigError, match="at least two documents"):
        build_pair_instances(one_doc, max_tokens=20, rng=np.random.default_rng(0))


def test_collator_checks_its_output():
    collator = MLMCollator(special=SPECIAL, seq_len=16)
    with pytest.raises(ValueError):
        collator([])
    batch = collator([Example(uid=0, variant=0, a=np.arange(5, 100))])  # too long: cut to seq_len
    assert batch.input_ids.shape == (1, 16) and batch.input_ids[0, -1] == SPECIAL.sep


def test_prefetcher_yields_the_stream_in_order_with_positions():
    from trainer.training.data import Prefetcher

    index = synthetic_index(n_docs=60)
    make = lambda: TrainStream(  # noqa: E731
        ExampleSource(index, special=SPECIAL, seq_len=64, static=False, seed=1),
        MLMCollator(special=SPECIAL, seq_len=64, seed=1), batch_size=8, seed=1)
    direct, prefetched = make(), Prefetcher(make(), depth=2)
    try:
        for _ in range(10):
            batch, position = prefetched.next_batch()
            assert torch.equal(batch.input_ids, direct.next_batch().input_ids) and position == direct.position
    finally:
        prefetched.close()


def test_nsp_needs_documents_of_two_sentences():
    single = ShardIndex.from_documents([[[5, 6, 7]], [[8, 9]], [[10, 11]]])
    with pytest.raises(ConfigError, match="documents of at least two sentences"):
        build_pair_instances(single, max_tokens=20, rng=np.random.default_rng(0))
    from trainer.training.data import fixed_batches

    source = ExampleSource(single, special=SPECIAL, seq_len=32, pairs=NSP.pairs, static=True, seed=0)
    assert fixed_batches(source, NSPCollator(special=SPECIAL, seq_len=32), batch_size=2, n_batches=2, seed=0) == []
