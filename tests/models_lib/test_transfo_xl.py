"""Transformer-XL by its properties (transformers no longer ships it): without memory it is a
causal LM over one segment; with memory a segment's loss depends on the previous one, through
detached states, and attention never reaches past the memory."""
from __future__ import annotations

import pytest
import torch

from models_lib.checkpoint import load_model, save_model
from models_lib.core.layers import recording_attention
from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
from tests.models_lib.helpers import randomise

VOCAB = 50


def model(mem_len: int, *, layers: int = 2, untie_r: bool = False) -> TransfoXLLMHeadModel:
    cfg = TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=VOCAB, mem_len=mem_len, num_layers=layers,
                                      hidden_size=32, num_heads=2, head_size=16, intermediate_size=64,
                                      untie_r=untie_r)
    return randomise(TransfoXLLMHeadModel(cfg), seed=1)


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_without_memory_it_is_a_causal_lm_over_one_segment():
    m = model(0)
    x = ids(2, 12)
    full = m(x, use_mems=True)
    assert full.mems is None  # nothing carries over
    for t in (1, 5, 11):  # each prefix gives the same logits: no position sees a later one
        torch.testing.assert_close(m(x[:, :t]).logits, full.logits[:, :t], atol=1e-5, rtol=0)
    changed = x.clone()
    changed[:, 8] = (changed[:, 8] + 1) % VOCAB
    after = m(changed).logits
    torch.testing.assert_close(after[:, :8], full.logits[:, :8], atol=1e-5, rtol=0)
    assert not torch.allclose(after[:, 8:], full.logits[:, 8:])


def test_with_memory_the_second_segment_depends_on_the_first():
    m = model(8)
    first, other, second = ids(2, 8, seed=1), ids(2, 8, seed=2), ids(2, 8, seed=3)
    labels = ids(2, 8, seed=4)
    with torch.no_grad():
        mems = m(first, use_mems=True).mems
        mems_other = m(other, use_mems=True).mems
    assert len(mems) == 2 and mems[0].shape == (2, 8, 32) and not any(t.requires_grad for t in mems)
    m.train(False)
    loss = m(second, labels=labels, mems=mems).loss
    assert not torch.isclose(loss, m(second, labels=labels, mems=mems_other).loss)
    assert not torch.isclose(loss, m(second, labels=labels).loss)
    loss.backward()  # the memory is a constant: the gradient stops there
    assert all(t.grad is None for t in mems)


@torch.no_grad()
def test_attention_never_reaches_past_the_memory():
    m = model(5, layers=1)
    first, second = ids(1, 8, seed=1), ids(1, 6, seed=2)
    mems = m(first, use_mems=True).mems
    assert mems[0].shape[1] == 5  # only the last mem_len states are kept
    with recording_attention(m) as found:
        out = m(second, mems=mems).logits
    weights = found[0][1].weights  # (B, N, T, M + T)
    assert weights.shape == (1, 2, 6, 11)
    for i in range(6):  # query i sees the memory and keys 0..i of its segment, nothing later
        assert weights[0, :, i, 5 + i + 1:].abs().sum() == 0
        assert weights[0, :, i, :5 + i + 1].sum(-1).sub(1).abs().max() < 1e-5
    # one layer: its memory is the last 5 embedded tokens, so earlier tokens cannot matter
    early, late = first.clone(), first.clone()
    early[0, 2] = (early[0, 2] + 1) % VOCAB
    late[0, 7] = (late[0, 7] + 1) % VOCAB
    torch.testing.assert_close(m(second, mems=m(early, use_mems=True).mems).logits, out, atol=0, rtol=0)
    assert not torch.allclose(m(second, mems=m(late, use_mems=True).mems).logits, out)


@pytest.mark.parametrize("untie_r", [False, True])
def test_biases_shared_or_per_layer_and_saved(tmp_path, untie_r):
    m = model(4, untie_r=untie_r)
    names = [n for n, _ in m.named_parameters() if n.endswith("r_w_bias")]
    assert len(names) == (2 if untie_r else 1)
    assert sum(p.numel() for p in m.parameters()) == m.config.count_params(embeddings=True)
    save_model(m, tmp_path)
    back = load_model(tmp_path)
    x = ids(2, 6)
    with torch.no_grad():
        torch.testing.assert_close(back(x).logits, m(x).logits, atol=0, rtol=0)


@torch.no_grad()
def test_greedy_generation_continues_the_stream():
    m = model(6)
    prompt = ids(1, 5)
    out = m.generate(prompt, max_new_tokens=4)
    assert out.shape == (1, 9) and torch.equal(out[:, :5], prompt)
    # the first new token is the argmax after the prompt
    assert int(out[0, 5]) == int(m(prompt).logits[0, -1].argmax())


def test_generation_without_memory_reads_the_whole_text_at_each_step():
    """With mem_len 0 nothing carries the context between steps, so each step reads the prompt and
    every generated token again: each step's scores equal a full forward pass over the text so far."""
    torch.manual_seed(0)
    cfg = TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=50, mem_len=0)
    model = TransfoXLLMHeadModel(cfg).eval()
    text = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        state, tokens = model.start_generation(text[:, :6])
        for n in range(6, 10):
            scores, state = model.generation_step(state, tokens)
            assert torch.allclose(scores, model(text[:, :n]).logits[:, -1], atol=1e-5)
            tokens = text[:, n:n + 1]
        out = model.generate(text[:, :6], max_new_tokens=3, do_sample=False, eos_token_id=None)
    assert out.shape == (2, 9)
