"""The training loop's gradient accumulation and clipping, through Loop.train_step itself.

Each test runs one step of trainer.training.engine.Loop (Loop.run: train_step, logging, the final
checkpoint) with a tiny BERT (hidden 64, one layer, no dropout),
hand-made batches and plain SGD at lr 1 with a constant schedule, so a parameter's update is
exactly minus the gradient the loop hands the optimizer.

The loop back-propagates each micro-batch's loss divided by grad_accum: the update follows the
mean of the micro-batches' losses. The MLM loss is a mean over each micro-batch's predicted
tokens, so when every micro-batch predicts the same number of tokens that mean of means is the
mean over all of them, and k micro-batches of b rows update the model exactly as one batch of
k x b rows. (With unequal counts it is the mean of the per-micro-batch means, which the last
test checks.)
"""
from __future__ import annotations

import copy

import pytest
import torch

from models_lib.families.bert import BertConfig, BertForPreTraining
from trainer.objectives.encoder import MaskedBatch as Batch
from trainer.objectives.encoder import PreTrainingStep
from trainer.training.data import DataPosition
from trainer.training.engine import Loop, TrainState
from trainer.training.checkpoints import TOKENIZER_FILES
from trainer.training.sinks import ListSink

VOCAB, T, ROWS = 60, 10, 4


def tiny_bert() -> BertForPreTraining:
    torch.manual_seed(0)
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=VOCAB, hidden_size=64, num_heads=2, num_layers=1,
                                 intermediate_size=128, max_position_embeddings=T, hidden_dropout=0.0,
                                 attention_dropout=0.0)
    return BertForPreTraining(cfg)


def rows(masked_per_row: list[int], seed: int = 0) -> Batch:
    """len(masked_per_row) full-length rows; row i predicts masked_per_row[i] of its tokens."""
    g = torch.Generator().manual_seed(seed)
    n = len(masked_per_row)
    input_ids = torch.randint(5, VOCAB, (n, T), generator=g)
    labels = torch.full((n, T), -100)
    for i, m in enumerate(masked_per_row):
        where = torch.randperm(T - 2, generator=g)[:m] + 1
        labels[i, where] = input_ids[i, where]
        input_ids[i, where] = 4  # [MASK]
    return Batch(input_ids=input_ids, attention_mask=torch.ones(n, T, dtype=torch.long),
                 token_type_ids=torch.zeros(n, T, dtype=torch.long), mlm_labels=labels)


def split(batch: Batch, k: int) -> list[Batch]:
    size = batch.input_ids.shape[0] // k
    return [batch.map(lambda t, i=i: t[i * size:(i + 1) * size]) for i in range(k)]


class ListStream:
    """What the loop reads of a TrainStream: next_batch(), position, epoch_size and collator."""

    collator = None

    def __init__(self, batches: list[Batch]):
        self.batches, self.index = list(batches), 0

    def next_batch(self) -> Batch:
        batch = self.batches[self.index]
        self.index += 1
        return batch

    @property
    def position(self) -> DataPosition:
        return DataPosition(0, self.index)

    @property
    def epoch_size(self) -> int:
        return len(self.batches)


def one_update(make_config, tmp_path, model: BertForPreTraining, batches: list[Batch], *, grad_accum: int,
               clip_grad: float) -> tuple[BertForPreTraining, Loop, ListSink]:
    """A copy of `model` after Loop.run of one step (grad_accum micro-batches from `batches`),
    the loop (with .seen_grads: the gradients the optimizer stepped with) and its sink."""
    model = copy.deepcopy(model)
    config = make_config(objectives=["mlm"], grad_accum=grad_accum, clip_grad=clip_grad, batch_size=2, max_steps=1,
                         warmup_steps=0, log_every=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    names = {id(p): name for name, p in model.named_parameters()}
    seen: dict[str, torch.Tensor] = {}  # the gradients optimizer.step() finds

    def record(opt, args, kwargs):
        seen.update({names[id(p)]: p.grad.clone() for group in opt.param_groups for p in group["params"]
                     if p.grad is not None})

    optimizer.register_step_pre_hook(record)
    run_dir = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    data_dir = run_dir / "data"  # the final checkpoint copies the tokenizer files
    data_dir.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        (data_dir / name).write_text("{}")
    sink = ListSink()
    loop = Loop(config, model=model, forward=PreTrainingStep(config, model, "cpu"), optimizer=optimizer,
                scheduler=scheduler, stream=ListStream(batches), valid=[], state=TrainState(), sink=sink,
                data_dir=data_dir, out_dir=run_dir / "out", device="cpu", precision="fp32", resumed_from=None)
    result = loop.run(lambda: False)
    assert result.status == "succeeded" and result.final_step == 1
    assert loop.stream.index == grad_accum  # it read grad_accum micro-batches for its one update
    loop.seen_grads = seen
    return model, loop, sink


def updates(before: torch.nn.Module, after: torch.nn.Module) -> dict[str, torch.Tensor]:
    old = dict(before.named_parameters())
    return {name: (p.detach() - old[name].detach()) for name, p in after.named_parameters()}


def total_norm(delta: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum((d.double() ** 2).sum() for d in delta.values())))


@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_update_the_model_as_one_batch_of_k_times_the_rows(make_config, tmp_path, k):
    model = tiny_bert()
    batch = rows([3] * ROWS)  # every row predicts 3 tokens: every micro-batch the same number
    whole, whole_loop, _ = one_update(make_config, tmp_path, model, [batch], grad_accum=1, clip_grad=0.0)
    accumulated, loop, _ = one_update(make_config, tmp_path, model, split(batch, k), grad_accum=k, clip_grad=0.0)
    reference = updates(model, whole)
    got = updates(model, accumulated)
    assert total_norm(reference) > 1e-2  # a real update, far above the tolerance
    for name, delta in reference.items():
        torch.testing.assert_close(got[name], delta, rtol=0, atol=1e-5, msg=name)
    for name, grad in whole_loop.seen_grads.items():
        torch.testing.assert_close(loop.seen_grads[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_with_unequal_micro_batches_the_update_follows_the_mean_of_their_losses(make_config, tmp_path):
    """The loop's own contract: loss_i / grad_accum per micro-batch, so the gradient of their mean."""
    model = tiny_bert()
    micro = [rows([1, 2], seed=1), rows([4, 3], seed=2)]  # 3 and 7 predicted tokens
    accumulated, _, _ = one_update(make_config, tmp_path, model, micro, grad_accum=2, clip_grad=0.0)
    reference = copy.deepcopy(model).train()
    mean = sum(reference(**b.model_inputs()).loss for b in micro) / 2
    mean.backward()
    got = updates(model, accumulated)
    for name, p in reference.named_parameters():
        expected = -p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(got[name], expected, rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_the_loop_clips_the_accumulated_gradient_before_the_update(make_config, tmp_path, grad_accum):
    model = tiny_bert()
    micro = split(rows([3] * ROWS, seed=3), grad_accum)
    _, free_loop, _ = one_update(make_config, tmp_path, model, micro, grad_accum=grad_accum, clip_grad=0.0)
    raw = free_loop.seen_grads  # clip_grad 0: measured, not clipped
    raw_norm = total_norm(raw)
    max_norm = 1e-3
    assert raw_norm > 100 * max_norm
    clipped, loop, sink = one_update(make_config, tmp_path, model, micro, grad_accum=grad_accum, clip_grad=max_norm)
    # The optimizer steps with the whole gradient scaled to norm max_norm (one global norm, not
    # per tensor or per micro-batch) ...
    assert set(loop.seen_grads) == set(raw)
    assert total_norm(loop.seen_grads) == pytest.approx(max_norm, rel=1e-4)
    scale = max_norm / raw_norm
    for name, grad in raw.items():
        torch.testing.assert_close(loop.seen_grads[name], grad * scale, rtol=1e-4, atol=1e-12, msg=name)
    # ... so with SGD at lr 1 the parameters move by max_norm in all ...
    assert total_norm(updates(model, clipped)) == pytest.approx(max_norm, rel=1e-2)
    # ... and the loop reports the norm before clipping, in its state and in the logged metrics.
    assert float(loop.grad_norm) == pytest.approx(raw_norm, rel=1e-4)
    assert float(free_loop.grad_norm) == pytest.approx(raw_norm, rel=1e-4)
    [(step, logged)] = sink.split("train")
    assert step == 1 and logged["grad_norm"] == pytest.approx(raw_norm, rel=1e-4)
