"""Causal-LM (GPT) and biLM (ELMo) batches (trainer.objectives.lm): packed rows of exactly
seq_len tokens with EOS after every document, labels = input ids."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.objectives import resolve
from trainer.objectives.masking import IGNORE_INDEX
from trainer.objectives.examples import ShardIndex, SpecialIds, TextLayout
from trainer.objectives import build_collator
from trainer.training.data import DataPosition, ExampleSource, TrainStream, fixed_batches, make_source, open_split
from trainer.errors import ConfigError
from trainer.objectives.lm import BiLMCollator, CausalLMCollator, LMBatch

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000, special=(0, 1, 2, 3, 4))
EOS = SPECIAL.eos


def synthetic_docs(n_docs=200, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 1000, rng.integers(2, 25)).tolist() for _ in range(rng.integers(1, 8))]
            for _ in range(n_docs)]


def rows_of(index, collator):
    source = ExampleSource(index, special=SPECIAL, seq_len=collator.seq_len, static=False, seed=0,
                           layout=collator.layout)
    table = source.instances(0)
    examples = [source.example(table, uid, 0) for uid in range(len(table))]
    return examples, [collator(examples[i:i + 32]) for i in range(0, len(examples), 32)]


@pytest.mark.parametrize("objective,cls", [("clm", CausalLMCollator), ("bilm", BiLMCollator)])
def test_rows_are_exactly_seq_len_with_eos_between_documents(objective, cls):
    docs = synthetic_docs()
    index = ShardIndex.from_documents(docs)
    collator = build_collator([objective], special=SPECIAL, seq_len=48)
    assert type(collator) is cls and resolve([objective]).collator is cls
    assert collator.layout == TextLayout("chunks", 48, doc_sep=EOS)
    examples, batches = rows_of(index, collator)
    ids = torch.cat([b.input_ids for b in batches])
    mask = torch.cat([b.attention_mask for b in batches])
    labels = torch.cat([b.labels for b in batches])
    assert ids.shape[1] == 48
    lengths = mask.sum(1)
    assert (lengths[:-1] == 48).all() and 2 <= lengths[-1] <= 48  # only the last row is short
    # the rows, read in order, are the documents each followed by EOS
    stream = ids[mask.bool()].tolist()
    expected = [t for d in docs for t in [tok for s in d for tok in s] + [EOS]]
    assert stream == expected[:len(stream)] and len(expected) - len(stream) < 2  # a 1-token tail is dropped
    assert stream.count(EOS) >= len(docs) - 1
    # labels: the inputs themselves (the model shifts), -100 at padding only
    assert torch.equal(labels[mask.bool()], ids[mask.bool()])
    assert (labels[~mask.bool()] == IGNORE_INDEX).all() and (ids[~mask.bool()] == SPECIAL.pad).all()
    for b in batches:
        assert type(b) is LMBatch  # its own batch type: no decoder or MLM fields
        assert b.n_tokens == int(b.attention_mask.sum())


def test_clm_on_real_shards(tokenizer_dir):
    from trainer.prep.tokenization import load_tokenizer

    bundle = load_tokenizer(tokenizer_dir)
    special = SpecialIds.from_tokenizer(bundle)
    assert special.eos == bundle.sep_id == bundle.token_to_id("[SEP]")
    collator = build_collator(["clm"], special=special, seq_len=64)
    config = SimpleNamespace(seq_len=64, seed=0, objectives=["clm"])
    index = open_split(tokenizer_dir, "train")
    source = make_source(config, index, special, collator, static=False)
    stream = TrainStream(source, collator, batch_size=8, seed=0)
    total = index.n_tokens + index.n_documents  # every document followed by EOS
    assert stream.epoch_size in (total // 64, -(-total // 64))
    batch = stream.next_batch()
    assert batch.input_ids.shape == (8, 64) and (batch.attention_mask.sum(1) == 64).sum() >= 7
    eos_rows = (batch.input_ids == special.eos).any(1)
    assert eos_rows.any()  # documents end inside rows
    text = bundle.decode(batch.input_ids[0])
    assert len(text.split()) > 20
    valid = fixed_batches(make_source(config, open_split(tokenizer_dir, "valid"), special, collator, static=True),
                          collator, batch_size=4, n_batches=2, seed=0)
    assert len(valid) == 2 and all(torch.equal(v.labels[v.attention_mask == 1], v.input_ids[v.attention_mask == 1])
                                   for v in valid)


def test_clm_stream_resumes_exactly_and_orders_rows_per_epoch():
    index = ShardIndex.from_documents(synthetic_docs(60))

    def make(pos=None):
        collator = build_collator(["clm"], special=SPECIAL, seq_len=32, seed=2)
        source = ExampleSource(index, special=SPECIAL, seq_len=32, static=False, seed=2, layout=collator.layout)
        return TrainStream(source, collator, batch_size=8, seed=2, position=pos)

    stream = make()
    batches = [stream.next_batch() for _ in range(40)]
    assert stream.position.epoch >= 1
    first_epoch = torch.cat([b.input_ids for b in batches[: stream.epoch_size // 8]])
    assert len({tuple(r.tolist()) for r in first_epoch}) == len(first_epoch)  # each row once per epoch
    partial = make()
    for _ in range(17):
        partial.next_batch()
    again = make(DataPosition(**partial.position.to_dict()))
    for b in batches[17:]:
        assert torch.equal(b.input_ids, again.next_batch().input_ids)


def test_lm_collators_refuse_masking_units_and_tiny_lengths():
    with pytest.raises(ConfigError, match="takes no 'word' masking"):
        CausalLMCollator(special=SPECIAL, seq_len=32, masking_unit="word")
    with pytest.raises(ConfigError, match="cannot use 'span' masking"):
        build_collator(["bilm"], special=SPECIAL, seq_len=32, masking_unit="span")
    with pytest.raises(ConfigError, match="at least 2"):
        CausalLMCollator(special=SPECIAL, seq_len=1)


def test_a_batch_of_full_rows_says_so_and_its_step_gives_the_model_no_mask_to_read():
    """A CLM batch whose rows are all real says so (`full`, known when collated); its step then
    gives GPT no padding mask, and the whole forward and loss compile as one graph: no host sync
    on the mask or on the positions (dynamo breaks the graph at each one)."""
    import torch._dynamo

    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
    from trainer.objectives.examples import Example
    from trainer.objectives.lm import CausalLMStep

    collator = CausalLMCollator(seq_len=8, special=SPECIAL)
    full = collator([Example(0, 0, a=list(range(5, 13))), Example(1, 0, a=list(range(20, 28)))])
    short = collator([Example(0, 0, a=list(range(5, 13))), Example(1, 0, a=list(range(20, 25)))])
    assert full.full and not short.full
    model = GPTLMHeadModel(GPTConfig.from_preset("gpt-tiny", vocab_size=1000))
    given = []
    real_forward = model.forward
    model.forward = lambda *args, **kwargs: given.append(args[1]) or real_forward(*args, **kwargs)
    step = CausalLMStep(SimpleNamespace(), model, "cpu")
    step(full, train=True), step(short, train=True)
    assert given[0] is None and given[1] is short.attention_mask
    torch._dynamo.reset()
    explained = torch._dynamo.explain(real_forward)(full.input_ids, None, full.labels)
    assert explained.graph_break_count == 0, explained.break_reasons
