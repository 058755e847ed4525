"""Fine-tuning's training batches (trainer.finetune.engine.ExampleStream): the train split
tokenised once ahead of batching, and batches grouped by length (group_by_length, on by
default) so that dynamic padding pads little, every epoch in a new seeded order and at the
stream's own batch boundaries (an epoch's first examples complete the previous epoch's last
batch); and AdamW's fused kernel on the CPU (trainer.training.optim)."""
from __future__ import annotations

import re

import numpy as np
import torch

from trainer.finetune.engine import ExampleStream, length_grouped_order
from trainer.finetune.tasks import Encoded, _Collator, encodes_ahead
from trainer.training.data import DataPosition


class Lengths(_Collator):
    """Examples {"i": index, "n": length} -> (rows of n ones, zero-padded; their indices); counts
    what it encodes. No tokenizer."""

    def __init__(self) -> None:
        self.pad_id, self.encoded = 0, 0

    def encode(self, examples):
        self.encoded += len(examples)
        return [Encoded(np.ones(ex["n"], dtype=np.int64), np.zeros(ex["n"], dtype=np.int64)) for ex in examples]

    def collate(self, examples, encoded):
        ids, mask, _ = self._pad(encoded)
        return mask, [ex["i"] for ex in examples]


def _examples(n: int, seed: int = 0) -> list[dict]:
    lengths = np.random.default_rng(seed).integers(3, 120, size=n)
    return [{"i": i, "n": int(x)} for i, x in enumerate(lengths)]


def _padding(masks) -> float:
    """The share of padding in these (B, T) masks."""
    real = sum(int(m.sum()) for m in masks)
    return 1 - real / sum(m.numel() for m in masks)


def _epochs(stream: ExampleStream, epochs: int) -> list[tuple[int, torch.Tensor, list[int]]]:
    """(epoch, mask, indices) of every batch drawn until `epochs` epochs are done: the epoch the
    batch lies in, or -1 for the one that straddles two epochs."""
    out, n = [], len(stream.examples)
    while stream.position.epoch < epochs:
        epoch, index = stream.position.epoch, stream.position.index
        if index >= n:
            epoch, index = epoch + 1, 0
        mask, picked = stream.next_batch()
        out.append((epoch if index + stream.batch_size <= n else -1, mask, picked))
    return out


def test_a_length_grouped_order_is_a_permutation_in_batches_of_similar_length():
    lengths = np.array([ex["n"] for ex in _examples(1000)])
    order = np.random.default_rng(1).permutation(1000)
    grouped = length_grouped_order(order, lengths, 16, np.random.default_rng(2), head=5)
    assert sorted(grouped.tolist()) == list(range(1000))
    assert grouped[:5].tolist() == order[:5].tolist()  # they complete the batch before

    def padding(o):
        batches = [lengths[o[i:i + 16]] for i in range(5, 1000, 16)]
        return 1 - sum(b.sum() for b in batches) / sum(b.max() * len(b) for b in batches)

    assert padding(grouped) < 0.1 < 0.35 < padding(order)
    # the batches come in a shuffled order, not longest first throughout a megabatch
    maxima = [lengths[grouped[i:i + 16]].max() for i in range(5, 1000 - 16, 16)]
    assert sum(a < b for a, b in zip(maxima, maxima[1:])) > len(maxima) // 4


def test_every_epoch_is_grouped_at_the_streams_own_batch_boundaries():
    examples = _examples(203)
    grouped = _epochs(ExampleStream(examples, Lengths(), batch_size=8, seed=3, group_by_length=True), 4)
    plain = _epochs(ExampleStream(examples, Lengths(), batch_size=8, seed=3, group_by_length=False), 4)
    for epoch in range(4):  # 203 is not a multiple of 8: each epoch starts at another offset
        mine = _padding([m for e, m, _ in grouped if e == epoch])
        assert mine < 0.15 < 0.3 < _padding([m for e, m, _ in plain if e == epoch]), epoch  # misaligned: 0.2-0.3
    # each epoch is every example once, in a new order
    firsts = [[i for e, _, p in grouped if e == epoch for i in p] for epoch in (1, 2)]
    assert firsts[0] != firsts[1]
    everything = [i for _, _, p in grouped for i in p]
    assert sorted(everything[:203]) == list(range(203))


def test_without_grouping_the_order_is_the_plain_seeded_shuffle():
    examples = _examples(40)
    stream = ExampleStream(examples, Lengths(), batch_size=8, seed=5, group_by_length=False)
    drawn = [i for _ in range(5) for i in stream.next_batch()[1]]
    assert drawn == np.random.default_rng([5, 0]).permutation(40).tolist()


def test_the_train_split_is_encoded_once_and_a_resumed_stream_goes_on_with_the_same_batches():
    examples, collator = _examples(101), Lengths()
    stream = ExampleStream(examples, collator, batch_size=8, seed=7, group_by_length=True)
    batches = [stream.next_batch()[1] for _ in range(40)]  # three epochs and more
    assert collator.encoded == 101
    again = ExampleStream(examples, Lengths(), batch_size=8, seed=7, group_by_length=True)
    for _ in range(23):
        again.next_batch()
    resumed = ExampleStream(examples, Lengths(), batch_size=8, seed=7, group_by_length=True,
                            position=DataPosition.from_dict(again.position.to_dict()))
    assert [resumed.next_batch()[1] for _ in range(17)] == batches[23:]


def test_real_collators_batch_the_same_from_their_encodings_as_from_the_examples(trained_run, tmp_path):
    from tests.trainer.finetune_helpers import ingested_demo
    from trainer import finetune as tasks
    from trainer.finetune.gpt1 import GPT1Collator
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    tokenizer = load_tokenizer(trained_run[0].last_checkpoint)
    for name in ("classification", "token_classification"):
        folder = ingested_demo(name, tmp_path)
        labels = [str(x) for x in read_meta(folder)["labels"]]
        collator = tasks.get(name).build_collator(tokenizer, labels, 24)
        assert encodes_ahead(collator)
        examples = list(iter_examples(folder, "train"))
        stream = ExampleStream(examples, collator, batch_size=8, seed=0, group_by_length=True)
        for _ in range(3):
            position = stream.position
            batch = stream.next_batch()
            again = ExampleStream(examples, collator, batch_size=8, seed=0, group_by_length=True, position=position)
            expected = collator([examples[i] for i in again.next_indices()])
            for field in ("input_ids", "attention_mask", "token_type_ids", "labels"):
                assert torch.equal(getattr(batch, field), getattr(expected, field)), (name, field)
            assert batch.input_ids.shape[1] <= 24
    # GPT-1's collator, a SequenceCollator, encodes ahead in its own way (its encode and collate)
    gpt1 = GPT1Collator(tokenizer, ["a", "b"], 24, "single_label_classification", vocab_size=100)
    assert encodes_ahead(gpt1)

    class PerBatch(GPT1Collator):  # a collator that tokenises in __call__ is tokenised per batch
        def __call__(self, examples):
            return super().__call__(examples)

    assert not encodes_ahead(PerBatch(tokenizer, ["a", "b"], 24, "single_label_classification", vocab_size=100))


def test_a_fine_tuning_run_says_how_much_padding_grouping_saves(trained_run, tmp_path):
    from tests.trainer.finetune_helpers import ingested_demo
    from trainer.finetune.config import FinetuneConfig
    from trainer.finetune.engine import finetune
    from trainer.training.sinks import ListSink

    dataset = ingested_demo("classification", tmp_path)
    lines = {}
    for grouping in (True, False):
        sink = ListSink()
        config = FinetuneConfig(checkpoint=str(trained_run[0].last_checkpoint), dataset=str(dataset), max_steps=2,
                                batch_size=8, max_length=32, eval_every=2, checkpoint_every=2, device="cpu",
                                group_by_length=grouping)
        assert finetune(config, out_dir=tmp_path / f"run-{grouping}", sink=sink).status == "succeeded"
        lines[grouping] = [line for line in sink.lines if "grouped by length" in line]
    (line,), none = lines[True], lines[False]
    assert line.startswith("Batches grouped by length (group_by_length): padding is ") and not none
    grouped, plain = (int(x) for x in re.findall(r"(\d+)%", line))
    assert grouped < plain


def test_adamw_is_fused_on_the_cpu_and_trains_as_the_plain_implementation_does(make_config):
    import copy

    from trainer.training.optim import build_optimizer, param_groups

    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))
    b, start = copy.deepcopy(a), a[0].weight.detach().clone()
    config = make_config(lr=1e-2, warmup_steps=2, max_steps=10)
    fused, schedule = build_optimizer(a, config.optim, config.max_steps)
    assert fused.defaults["fused"] is True
    plain = torch.optim.AdamW(param_groups(b, config.optim.weight_decay), lr=1e-2, betas=tuple(config.optim.betas),
                              eps=config.optim.eps, foreach=False, fused=False)
    plain_schedule = torch.optim.lr_scheduler.LambdaLR(plain, schedule.lr_lambdas[0])
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    for _ in range(10):
        for model, opt, sched in ((a, fused, schedule), (b, plain, plain_schedule)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert not torch.equal(a[0].weight, start)  # it trained
