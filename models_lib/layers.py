"""Building blocks shared by every model family: attention masks, self-attention, feed-forward.

Shapes: B batch, T query length, S key length, H hidden size, N heads, D head size (H = N * D).
Normalisation layers are plain `nn.LayerNorm` (BERT's LayerNorm is exactly torch's).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# Activations by the names Hugging Face configs use, so configs round-trip unchanged.
# "gelu" is the exact erf form that BERT uses; "gelu_new" is the tanh approximation (GPT-2).
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
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()  # (T, T)
        mask = causal if mask is None else mask & causal
    return mask


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused Q/K/V projection.

    One (H -> 3H) matmul instead of three is cheaper on every device; hf.py splits and joins
    the weight so the Hugging Face layout (separate query/key/value) still loads and exports.
    Cross-attention (a decoder attending to encoder states) would add a separate query
    projection and a (H -> 2H) key/value projection of the context; BERT does not need it.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden size {hidden_size} is not divisible by {num_heads} attention heads.")
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.dropout = dropout
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, H); mask: boolean, broadcastable to (B, N, T, T), from build_attention_mask."""
        B, T, H = x.shape
        # (B, T, 3, N, D) -> (3, B, N, T, D): views, no copy; SDPA accepts these strides.
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)
        if mask is not None:
            # An additive mask with the dtype's most negative finite value rather than -inf:
            # a query that sees no key at all then gets a uniform average instead of NaN.
            mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(
                ~mask, torch.finfo(q.dtype).min)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
            scale=1.0 / math.sqrt(self.head_size),
        )  # (B, N, T, D)
        y = y.transpose(1, 2).reshape(B, T, H)  # heads back side by side: (B, T, H)
        return self.out(y)


class FeedForward(nn.Module):
    """Position-wise two-layer MLP: H -> intermediate -> H."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, activation: str = "gelu", bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.up = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))  # (B, T, H)
