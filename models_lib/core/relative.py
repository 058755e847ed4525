"""Relative-position attention with a segment-level memory: Transformer-XL's (Dai et al. 2019) and
XLNet's (Yang et al. 2019), which adds a second (query) stream and the relative segment encoding.

Scores between query i and key j (keys = the memory, then the current segment):

    a_ij = (q_i + u) . k_j  +  (q_i + v) . W_r R(i - j)  [+ (q_i + b) . s_ij]

R is the sinusoidal embedding of the distance between the query's absolute position (after the
memory) and the key's; u (`r_w_bias`) and v (`r_r_bias`) are learned biases shared by every
position; s_ij (XLNet) is one of two learned vectors, by whether i and j are in the same segment.

One projection of the distances serves every query: the scores against all P = K + T distances
(K + T - 1 down to ... -T + 1, in `relative_positions`) are computed as a (T, P) matrix, and
`rel_shift` slides row i left by T - i, so that column j holds distance (K - T + i) - j.

Tensors are batch first: hidden states (B, T, H), memory (B, M, H), masks (B, T, K) bool with
True = may NOT attend (XLNet's convention: 1 marks what the factorisation order hides).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from models_lib.core.layers import ACTIVATIONS

__all__ = ["PositionwiseFF", "RelativeAttention", "causal_memory_mask", "rel_shift", "relative_positions", "sinusoid"]


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """(P,) float positions -> (P, dim): [sin(p * f_k) ..., cos(p * f_k) ...] with
    f_k = 1 / 10000^(2k / dim), as both papers define R."""
    freq = torch.arange(0, dim, 2, device=positions.device).float()
    inv_freq = 1.0 / torch.pow(10000.0, freq / dim)
    angles = torch.einsum("i,d->id", positions.float(), inv_freq)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def relative_positions(query_len: int, key_len: int, *, clamp_len: int = -1,
                       device: torch.device | str | None = None) -> torch.Tensor:
    """(key_len + query_len,) float distances key_len, key_len - 1, ..., -query_len + 1; clamped
    to [-clamp_len, clamp_len] when clamp_len > 0."""
    pos = torch.arange(key_len, -query_len, -1.0, device=device, dtype=torch.int64).float()
    if clamp_len > 0:
        pos = pos.clamp(-clamp_len, clamp_len)
    return pos


def rel_shift(x: torch.Tensor, key_len: int) -> torch.Tensor:
    """(B, N, T, P) scores against the P distances of `relative_positions` -> (B, N, T, key_len):
    entry (i, j) is the score of distance (key_len - T + i) - j, i.e. query i's against key j."""
    B, N, T, P = x.shape
    x = x.reshape(B, N, P, T)[:, :, 1:, :]
    x = x.reshape(B, N, T, P - 1)
    return x[..., :key_len]


class RelativeAttention(nn.Module):
    """One layer's relative attention, post-LN: LayerNorm(h + O(attention)).

    Projections are bias-free linears H -> N*D (q, k, v, r) and N*D -> H (o). The biases u, v
    (and XLNet's segment bias and the two segment vectors) are this module's own unless `shared`
    (a module holding r_w_bias and r_r_bias, Transformer-XL's one pair for all layers) is given.

    forward(h, g=None, *, pos, mask_h, mask_g=None, mems=None, seg_diff=None, target_mapping=None)
      h       (B, T, H) content stream; g (B, M, H) XLNet's query stream (M = T, or the number of
              targets with target_mapping (B, M, T), one-hot rows: which position each target is)
      pos     (P, H) embedded distances (relative_positions, after dropout)
      mask_h  (B, T, K) bool, True = hidden from the content stream (None: nothing hidden)
      mask_g  (B, T, K) bool, the same for the query stream
      mems    (B, M, H) the memory, prepended to the keys and values
      seg_diff (B, T, K) bool: query and key in different segments (XLNet's relative segments)
      target_positions (B, M) long: the query stream's targets as positions, the fast path for
              one-hot target_mapping rows (the same numbers, computed for M rows instead of T)
    -> (h', g' or None). With `record_weights`, the softmax weights of the last call are kept in
    `.weights` (content stream, (B, N, T, K)) and `.query_weights` (query stream, or None).
    """

    records_attention = True  # models_lib.core.layers.recording_attention finds it

    def __init__(self, hidden_size: int, num_heads: int, head_size: int, *, dropout: float = 0.0,
                 attention_dropout: float = 0.0, layer_norm_eps: float = 1e-12, segments: bool = False,
                 own_biases: bool = True):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        inner = num_heads * head_size
        self.scale = 1.0 / math.sqrt(head_size)
        self.q = nn.Linear(hidden_size, inner, bias=False)
        self.k = nn.Linear(hidden_size, inner, bias=False)
        self.v = nn.Linear(hidden_size, inner, bias=False)
        self.r = nn.Linear(hidden_size, inner, bias=False)
        self.o = nn.Linear(inner, hidden_size, bias=False)
        if own_biases:
            self.r_w_bias = nn.Parameter(torch.zeros(num_heads, head_size))
            self.r_r_bias = nn.Parameter(torch.zeros(num_heads, head_size))
        if segments:
            self.r_s_bias = nn.Parameter(torch.zeros(num_heads, head_size))
            self.seg_embed = nn.Parameter(torch.zeros(2, num_heads, head_size))
        self.segments = segments
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.record_weights = False
        self.weights: torch.Tensor | None = None
        self.query_weights: torch.Tensor | None = None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, self.head_size)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kr: torch.Tensor, biases: tuple,
              mask: torch.Tensor | None, seg_diff: torch.Tensor | None,
              positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, T, N, D), k/v (B, K, N, D), kr (P, N, D) -> ((B, T, N, D), weights (B, N, T, K)).
        With `positions` (B, T) long, query t sits at that position of the segment (the targets of
        XLNet's query stream): its row of distances is gathered instead of shifted."""
        w_bias, r_bias = biases
        K = k.shape[1]
        ac = torch.einsum("bind,bjnd->bnij", q + w_bias, k)
        bd = torch.einsum("bind,jnd->bnij", q + r_bias, kr)  # (B, N, T, P)
        if positions is None:
            bd = rel_shift(bd, K)
        else:  # rel_shift's entry (i, j) is column T_seg - i + j, T_seg = P - K (the segment's length)
            index = (bd.shape[-1] - K - positions)[:, None, :, None] + torch.arange(K, device=bd.device)
            bd = bd.gather(-1, index.expand(-1, bd.shape[1], -1, -1))
        score = ac + bd
        if seg_diff is not None:
            ef = torch.einsum("bind,snd->bnis", q + self.r_s_bias, self.seg_embed)  # (B, N, T, 2)
            score = score + torch.where(seg_diff[:, None], ef[..., 1:2], ef[..., 0:1])
        score = score * self.scale
        if mask is not None:
            score = score.masked_fill(mask[:, None], torch.finfo(score.dtype).min)
        weights = score.float().softmax(-1).to(q.dtype)
        out = torch.einsum("bnij,bjnd->bind", self.attention_dropout(weights), v)
        return out, weights

    def _post(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        out = self.o(vec.reshape(*vec.shape[:-2], -1))
        return self.norm(self.dropout(out) + x)

    def forward(self, h: torch.Tensor, g: torch.Tensor | None = None, *, pos: torch.Tensor,
                mask_h: torch.Tensor | None, mask_g: torch.Tensor | None = None, mems: torch.Tensor | None = None,
                seg_diff: torch.Tensor | None = None, target_mapping: torch.Tensor | None = None,
                target_positions: torch.Tensor | None = None,
                shared: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        owner = shared if shared is not None else self
        biases = (owner.r_w_bias, owner.r_r_bias)
        cat = h if mems is None or mems.shape[1] == 0 else torch.cat([mems, h], dim=1)
        k, v = self._heads(self.k(cat)), self._heads(self.v(cat))
        kr = self._heads(self.r(pos))
        if seg_diff is not None and not self.segments:
            raise ValueError("this attention has no segment encoding")
        vec_h, w_h = self._core(self._heads(self.q(h)), k, v, kr, biases, mask_h, seg_diff)
        out_h = self._post(h, vec_h)
        out_g, w_g = None, None
        if g is not None:
            q_g = self._heads(self.q(g))  # (B, M, N, D)
            if target_positions is not None:  # only the M target rows: no (B, T, K) query-stream scores
                rows = target_positions[:, :, None].expand(-1, -1, k.shape[1])
                vec_g, w_g = self._core(q_g, k, v, kr, biases,
                                        None if mask_g is None else mask_g.gather(1, rows),
                                        None if seg_diff is None else seg_diff.gather(1, rows),
                                        positions=target_positions)
            elif target_mapping is not None:  # transformers' way: every position, mapped there and back
                q_g = torch.einsum("bmnd,bml->blnd", q_g, target_mapping)
                vec_g, w_g = self._core(q_g, k, v, kr, biases, mask_g, seg_diff)
                vec_g = torch.einsum("blnd,bml->bmnd", vec_g, target_mapping)
            else:
                vec_g, w_g = self._core(q_g, k, v, kr, biases, mask_g, seg_diff)
            out_g = self._post(g, vec_g)
        if self.record_weights:
            self.weights = w_h.detach()
            self.query_weights = None if w_g is None else w_g.detach()
        return out_h, out_g


class PositionwiseFF(nn.Module):
    """Both papers' feed-forward sublayer, post-LN: LayerNorm(x + W2 drop(act(W1 x)))."""

    def __init__(self, hidden_size: int, inner_size: int, *, activation: str, dropout: float = 0.0,
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.act = ACTIVATIONS[activation]
        self.layer_1 = nn.Linear(hidden_size, inner_size)
        self.layer_2 = nn.Linear(inner_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dropout(self.layer_2(self.dropout(self.act(self.layer_1(x)))))
        return self.norm(x + y)


def causal_memory_mask(query_len: int, mem_len: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, M + T) bool, True = hidden: query i sees the M memory slots and keys 0..i of its segment."""
    ones = torch.ones(query_len, mem_len + query_len, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1 + mem_len)
