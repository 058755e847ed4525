"""The shared layers that T5 and GPT add to the encoder family's: causal masks, the key/value
cache, cross-attention, position bias, recorded attention weights, gated FFN, RMSNorm."""
import math

import pytest
import torch

from models_lib.core.layers import (Attention, FeedForward, KVCache, RMSNorm, SelfAttention, causal_mask,
                               new_caches, recording_attention)


def _reference(attn: Attention, x, context=None, bias=None, keep=None):
    """Attention written out with explicit matmuls and softmax."""
    B, T, _ = x.shape
    N, D = attn.num_heads, attn.head_size
    if attn.cross:
        q = attn.q(x).view(B, T, N, D).transpose(1, 2)
        k, v = attn.kv(context).view(B, -1, 2, N, D).permute(2, 0, 3, 1, 4)
    else:
        q, k, v = attn.qkv(x).view(B, T, 3, N, D).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) * attn.scale
    if bias is not None:
        scores = scores + bias
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return attn.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, N * D))


def test_causal_mask_aligns_queries_with_the_last_keys():
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # Two new queries after three cached positions: they see the cache and themselves, in order.
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_causal_self_attention_matches_explicit_softmax():
    torch.manual_seed(0)
    attn = SelfAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    expected = _reference(attn, x, keep=causal_mask(6, 6))
    assert torch.allclose(attn(x, causal=True), expected, atol=1e-5)


def test_kv_cache_step_by_step_equals_full_causal_pass():
    torch.manual_seed(0)
    attn = SelfAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    full = attn(x, causal=True)
    cache = KVCache()
    first = attn(x[:, :3], causal=True, cache=cache)  # a prompt of 3, then one token at a time
    steps = [attn(x[:, t:t + 1], causal=True, cache=cache) for t in range(3, 7)]
    assert cache.length == 7
    assert torch.allclose(torch.cat([first, *steps], dim=1), full, atol=1e-5)


def test_cache_reorder_keeps_the_chosen_rows():
    cache = KVCache(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.k.flatten().tolist() == [2, 2, 0] and cache.v.flatten().tolist() == [12, 12, 10]
    assert [c.length for c in new_caches(2)] == [0, 0]


def test_cross_attention_unscaled_with_bias_and_head_size():
    torch.manual_seed(0)
    attn = Attention(24, 3, head_size=5, bias=False, scaled=False, cross=True).eval()
    assert attn.scale == 1.0 and attn.q.bias is None and attn.out.in_features == 15
    x, ctx = torch.randn(2, 4, 24), torch.randn(2, 6, 24)
    bias = torch.randn(1, 3, 4, 6)
    pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]).bool()[:, None, None, :]
    got = attn(x, pad, bias=bias, context=ctx)
    assert torch.allclose(got, _reference(attn, x, ctx, bias, pad), atol=1e-5)
    # The cache keeps the context's keys/values: a second call needs no context.
    cache = KVCache()
    a = attn(x, pad, bias=bias, context=ctx, cache=cache)
    b = attn(x, pad, bias=bias, cache=cache)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="encoder states"):
        attn(x)


def test_recording_attention_keeps_softmax_weights_and_same_output():
    torch.manual_seed(0)
    model = torch.nn.Sequential(SelfAttention(16, 2), SelfAttention(16, 2)).eval()
    x = torch.randn(1, 5, 16)
    fast = model[1](model[0](x, causal=True), causal=True)
    with recording_attention(model) as found:
        slow = model[1](model[0](x, causal=True), causal=True)
    assert [name for name, _ in found] == ["0", "1"]
    assert torch.allclose(fast, slow, atol=1e-5)
    w = found[0][1].weights
    assert w.shape == (1, 2, 5, 5)
    assert torch.allclose(w.sum(-1), torch.ones(1, 2, 5), atol=1e-5)
    assert float(w.triu(1).abs().max()) == 0.0  # causal: nothing above the diagonal
    assert not model[0].record_weights  # switched off again


def test_gated_feed_forward_and_dropout():
    torch.manual_seed(0)
    ffn = FeedForward(8, 12, activation="gelu_new", bias=False, gated=True).eval()
    x = torch.randn(3, 8)
    expected = ffn.down(torch.nn.functional.gelu(ffn.gate(x), approximate="tanh") * ffn.up(x))
    assert torch.allclose(ffn(x), expected)
    plain = FeedForward(8, 12, activation="relu", dropout=0.5)
    assert plain.gate is None and isinstance(plain.dropout, torch.nn.Dropout)


def test_rms_norm_formula():
    norm = RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 7.0))
    x = torch.randn(2, 6) * 3 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-6)
    assert not hasattr(norm, "bias")
    with torch.no_grad():
        assert math.isclose(float(norm(torch.ones(1, 6)).sum()), 21.0, rel_tol=1e-5)


def test_presets_of_every_family_come_from_one_registry():
    from models_lib.families import presets
    from models_lib.families.elmo import ElmoConfig
    from models_lib.families.gpt import GPTConfig
    from models_lib.families.t5 import T5Config

    assert isinstance(presets.get("t5-tiny", vocab_size=100), T5Config)
    assert isinstance(presets.get("gpt-mini", vocab_size=100), GPTConfig)
    assert isinstance(presets.get("elmo-tiny", vocab_size=100), ElmoConfig)
    assert presets.list_presets("gpt") == ["gpt-tiny", "gpt-mini", "gpt2-small"]
    every = presets.list_presets()
    assert {"bert-tiny", "t5-base", "elmo-small", "gpt2-small"} <= set(every) and len(every) == len(set(every))
    with pytest.raises(ValueError, match="Unknown preset 'gpt-huge'.*t5-tiny"):
        presets.get("gpt-huge")
