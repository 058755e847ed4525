"""Activation checkpointing (models_lib.core.recompute): the same gradients with and without it,
for an encoder family (BERT; ALBERT's shared layers), GPT and T5, with dropout on; the blocks
really go through torch.utils.checkpoint while training, and not in eval mode or without grad."""
from __future__ import annotations

import pytest
import torch

from models_lib.core import recompute
from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertConfig, BertForPreTraining
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

V, B, T = 97, 3, 12


def bert():
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                                 num_layers=2)
    return BertForPreTraining(cfg), 2


def albert():
    cfg = presets.get("albert-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                      embedding_size=16, num_layers=3)
    return AlbertForPreTraining(cfg), 3  # one shared block applied three times


def gpt():
    cfg = GPTConfig.from_preset("gpt-tiny", vocab_size=V, hidden_size=32, num_heads=2, num_layers=2)
    return GPTLMHeadModel(cfg), 2


def t5():
    cfg = T5Config.from_preset("t5-tiny", vocab_size=V, d_model=32, d_ff=64, d_kv=8, num_heads=2, num_layers=2,
                               num_decoder_layers=1, version="1.1", pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg), 3


def loss_of(model, g):
    ids = torch.randint(3, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:] = 0
    if isinstance(model, GPTLMHeadModel):
        return model(ids, mask, labels=ids).loss
    if isinstance(model, T5ForConditionalGeneration):
        return model(ids, mask, labels=torch.randint(3, V, (B, 5), generator=g)).loss
    labels = torch.where(torch.rand(B, T, generator=g) < 0.3, ids, torch.full_like(ids, -100))
    return model(ids, mask, None, mlm_labels=labels).loss


def gradients(model, seed: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the dropout masks
    loss_of(model, torch.Generator().manual_seed(seed)).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def calls(monkeypatch):
    """How many blocks went through torch.utils.checkpoint."""
    seen = []
    real = recompute.checkpoint

    def counting(fn, *args, **kwargs):
        seen.append(fn)
        assert kwargs.get("use_reentrant") is False
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(recompute, "checkpoint", counting)
    return seen


@pytest.mark.parametrize("build", [bert, albert, gpt, t5], ids=["bert", "albert", "gpt", "t5"])
def test_same_gradients_with_and_without_activation_checkpointing(build, calls):
    torch.manual_seed(0)
    model, blocks = build()
    model.train()  # dropout on: the recomputed pass must replay the same masks
    plain = gradients(model, seed=1)
    assert not calls
    assert recompute.set_activation_checkpointing(model, True) == (2 if isinstance(model, T5ForConditionalGeneration)
                                                                   else 1)
    checkpointed = gradients(model, seed=1)
    assert len(calls) == blocks
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_checkpointing_only_while_training_with_gradients(calls):
    torch.manual_seed(0)
    model, _ = bert()
    recompute.set_activation_checkpointing(model, True)
    g = torch.Generator().manual_seed(0)
    model.eval()
    loss_of(model, g).backward()
    model.train()
    with torch.no_grad():
        loss_of(model, g)
    assert not calls
    recompute.set_activation_checkpointing(model, False)
    loss_of(model, g).backward()
    assert not calls
