"""Building blocks shared by every model family: attention masks, attention (self and cross,
with a key/value cache), feed-forward (plain or gated), RMSNorm.

Shapes: B batch, T query length, S key length, H hidden size, N heads, D head size (N * D is
H for BERT and GPT; T5 sets D on its own, d_kv, so N * D may differ from H).
Normalisation: plain `nn.LayerNorm` (BERT's LayerNorm is exactly torch's) and `RMSNorm` (T5).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.packing import Unpadded

# Activations by the names Hugging Face configs use, so configs round-trip unchanged.
# "gelu" is the exact erf form that BERT uses; "gelu_new" is the tanh approximation (GPT-2,
# and T5 v1.1's gated-GELU).
ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def build_attention_mask(attention_mask: torch.Tensor | None, *, is_causal: bool = False,
                         seq_len: int | None = None) -> torch.Tensor | None:
    """Turn a user-facing mask into a boolean mask that broadcasts to (B, N, T, S); True = may attend.

    Accepts a padding mask (B, S) of 1/0 (what BERT gets from its tokenizer), or a full mask
    (B, T, S) or (B, 1, T, S) for UniLM-style modes where each query sees a different set of
    keys. With `is_causal`, a lower-triangular mask is combined with it (`seq_len` is needed
    when there is no mask to take the length from). Returns None when nothing is masked, so
    scaled_dot_product_attention can use its fastest kernel.
    """
    mask = None
    if attention_mask is not None:
        mask = attention_mask.bool()
        if mask.dim() == 2:
            mask = mask[:, None, None, :]  # (B, 1, 1, S): the same keys hidden from every query
        elif mask.dim() == 3:
            mask = mask[:, None, :, :]  # (B, 1, T, S): one row of visible keys per query
        elif mask.dim() != 4:
            raise ValueError(f"attention_mask must have 2, 3 or 4 dimensions, got shape {tuple(attention_mask.shape)}.")
    if is_causal:
        length = seq_len if seq_len is not None else (mask.shape[-1] if mask is not None else None)
        if length is None:
            raise ValueError("A causal mask needs seq_len when no attention_mask is given.")
        device = mask.device if mask is not None else None
        mask = _and(mask, causal_mask(length, length, device=device))
    return mask


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = may attend) as scores to add: 0 where True, the dtype's most negative
    finite value where False (not -inf: a query that sees no key gets a uniform average, not NaN)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


def causal_mask(query_len: int, key_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, S) bool, True where query i may see key j: the queries are the last T of the S
    positions (a decoder continuing after S - T cached ones), so j <= i + S - T."""
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(key_len - query_len)


def _and(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else a & b


@dataclass
class KVCache:
    """One attention layer's keys and values so far, (B, N, S, D) each, for incremental decoding.

    Self-attention appends the new step's keys/values; cross-attention fills it once from the
    encoder states and then only reads it. `reorder` follows beam search's choice of rows.
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reorder(self, index: torch.Tensor) -> None:
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


def new_caches(n: int) -> list[KVCache]:
    return [KVCache() for _ in range(n)]


class Attention(nn.Module):
    """Multi-head attention. Self-attention uses one fused Q/K/V projection (`qkv`); with
    `cross=True` the queries come from x (`q`) and keys/values from a context (`kv`, fused).

    One (H -> 3ND) matmul instead of three is cheaper on every device; the hf_* formats split
    and join the weight so the Hugging Face layouts (separate query/key/value) load and export.
    `scaled=False` drops the 1/sqrt(D) of the scores (T5 folds it into the initialisation).

    forward(x, mask=None, *, bias=None, causal=False, context=None, cache=None):
      mask     bool, broadcastable to (B, N, T, S), True = may attend (build_attention_mask); or
               float, added to the scores as it is (additive_mask: a packed batch's, built once)
      bias     float, broadcastable to (B, N, T, S), added to the scores (T5's position bias)
      causal   query i sees keys <= i (counted after the cached ones)
      context  (B, S, H) states to attend to (cross-attention)
      cache    a KVCache: self-attention appends to it; cross-attention fills it on first use
    With `record_weights = True` (see `recording_attention`), the softmax weights (B, N, T, S)
    of the last call are kept in `.weights` (computed explicitly, so only for inspection).
    """

    def __init__(self, hidden_size: int, num_heads: int, *, head_size: int | None = None, dropout: float = 0.0,
                 bias: bool = True, scaled: bool = True, cross: bool = False):
        super().__init__()
        if head_size is None:
            if hidden_size % num_heads:
                raise ValueError(f"hidden size {hidden_size} is not divisible by {num_heads} attention heads.")
            head_size = hidden_size // num_heads
        self.num_heads, self.head_size, self.dropout = num_heads, head_size, dropout
        self.scale = 1.0 / math.sqrt(head_size) if scaled else 1.0
        self.cross = cross
        inner = num_heads * head_size
        if cross:
            self.q = nn.Linear(hidden_size, inner, bias=bias)
            self.kv = nn.Linear(hidden_size, 2 * inner, bias=bias)
        else:
            self.qkv = nn.Linear(hidden_size, 3 * inner, bias=bias)
        self.out = nn.Linear(inner, hidden_size, bias=bias)
        self.record_weights = False
        self.weights: torch.Tensor | None = None

    def _heads(self, t: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        """(B, T, n*N*D) -> n tensors (B, N, T, D), as views. Split along the fused dim first and
        transposed after: the backward of that split stacks the n gradients straight into the
        projection's (B, T, n, N, D) layout in one copy; splitting a permuted (n, B, N, T, D) view
        instead stacks them in that order and copies them once more into the layout (two passes
        over 3 x B x T x H in every layer's backward)."""
        B, T, _ = t.shape
        return tuple(part.transpose(1, 2) for part in t.view(B, T, n, self.num_heads, self.head_size).unbind(2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | Unpadded | None = None, *,
                bias: torch.Tensor | None = None, causal: bool = False, context: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        layout = None
        if isinstance(mask, Unpadded):  # x is (N, H), a packed batch's real tokens: attend in their rows
            if self.cross or cache is not None or causal:
                raise ValueError("unpadded tokens are for bidirectional self-attention only.")
            layout, mask = mask, mask.mask
            qkv = layout.rows(self.qkv(x))  # projected on the N real tokens, then (R, L, 3 N D)
            B, T, _ = qkv.shape
            q, k, v = self._heads(qkv, 3)
        elif self.cross:
            B, T, _ = x.shape
            if context is None and (cache is None or cache.k is None):
                raise ValueError("cross-attention needs the encoder states (context) or a filled cache.")
            (q,) = self._heads(self.q(x), 1)
            if cache is not None and cache.k is not None:
                k, v = cache.k, cache.v  # the encoder states' keys/values, computed at the first step
            else:
                k, v = self._heads(self.kv(context), 2)
                if cache is not None:
                    cache.k, cache.v = k, v
        else:
            B, T, _ = x.shape
            q, k, v = self._heads(self.qkv(x), 3)
            if cache is not None:
                if cache.k is not None:
                    k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
                cache.k, cache.v = k, v
        S = k.shape[2]
        use_causal_flag = causal and mask is None and bias is None and T == S and not self.record_weights
        if causal and not use_causal_flag and T > 1:
            mask = _and(mask, causal_mask(T, S, device=x.device))
        additive = None
        if mask is not None or bias is not None:
            # An additive mask with the dtype's most negative finite value rather than -inf:
            # a query that sees no key at all then gets a uniform average instead of NaN.
            additive = bias.to(q.dtype) if bias is not None else None
            if mask is not None:
                # a bool mask becomes additive here; a float one already is (a packed batch's,
                # built once for every layer)
                hidden = additive_mask(mask, q.dtype) if mask.dtype == torch.bool else mask.to(q.dtype)
                additive = hidden if additive is None else additive + hidden
        p = self.dropout if self.training else 0.0
        if self.record_weights:
            scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, N, T, S)
            if additive is not None:
                scores = scores + additive
            weights = scores.float().softmax(-1).to(q.dtype)
            self.weights = weights.detach()
            y = F.dropout(weights, p) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, dropout_p=p,
                                               is_causal=use_causal_flag, scale=self.scale)  # (B, N, T, D)
        y = y.transpose(1, 2).reshape(B, T, self.num_heads * self.head_size)  # heads side by side
        if layout is not None:
            y = layout.real(y)  # (N, inner)
        return self.out(y)


class SelfAttention(Attention):
    """Self-attention as the encoder family builds it: SelfAttention(H, N, dropout=..., bias=...)."""

    def __init__(self, hidden_size: int, num_heads: int, **kwargs):
        super().__init__(hidden_size, num_heads, cross=False, **kwargs)


@contextlib.contextmanager
def recording_attention(model: nn.Module) -> Iterator[list[tuple[str, Attention]]]:
    """Within the block, every Attention module of `model` (and every module that says
    `records_attention`, models_lib.core.relative's) keeps its softmax weights; yields
    [(module name, module)] in definition order, so after a forward pass
    `[m.weights for _, m in layers]` are the (B, N, T, S) maps. Restores the fast path after."""
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, Attention) or getattr(m, "records_attention", False)]  # + relative attention
    for _, m in found:
        m.record_weights, m.weights = True, None
    try:
        yield found
    finally:
        for _, m in found:
            m.record_weights = False


class FeedForward(nn.Module):
    """Position-wise MLP: H -> intermediate -> H. `gated=True` multiplies the activation by a
    second linear projection (T5 v1.1's gated-GELU: down(act(gate(x)) * up(x))). `dropout`
    applies to the intermediate activations (T5); BERT has none there."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, activation: str = "gelu", bias: bool = True,
                 gated: bool = False, dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=bias) if gated else None
        self.up = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.up(x)) if self.gate is None else self.act(self.gate(x)) * self.up(x)
        return self.down(self.dropout(h))  # (B, T, H)


class RMSNorm(nn.Module):
    """Root-mean-square norm (T5): x / sqrt(mean(x^2) + eps) * weight; no mean subtraction,
    no bias. The statistic is taken in float32 even for half-precision activations."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(self.weight.dtype)
