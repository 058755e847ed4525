"""Several examples in one row: what an encoder needs to compute a packed batch.

A padded batch of B examples spends as much on its padding as on its real tokens when the
examples are short (BERT's sentence pairs on a corpus of short documents fill about half of
their rows). A packed batch lays the same B examples end to end in R <= B rows of length L,
and the encoder keeps each example to itself:

  segments   (R, L) long: 0 on padding, k >= 1 on the k-th example of its row. A query sees
             only the keys of its own segment (a block-diagonal attention mask); a padding
             query sees the row's padding, so no query is left without a key.
  positions  (R, L) long: each token's position within its example (0 at its first token), so
             position embeddings start again at every example.
  starts     (B,) long: the flat index (row * L + column) of each example's first token, in
             the examples' order: where the pooler, NSP and SOP read each example's [CLS].
  tokens     (N,) long, optional: the flat indices of the N real tokens, in order. Given, the
             encoder's token-wise layers (projections, feed-forward, norms, dropout) run on
             the N real tokens alone (N, H), and only attention lays them out in their rows
             (`Unpadded`): the padding that packing leaves at the rows' ends is not computed
             either (MosaicBERT's unpadding, with a block-diagonal mask for attention).
  padded_index (N,) long, optional, with padded_width T: each real token's flat index (b * T + t)
             in the padded (B, T) batch the examples came from, in the order of `tokens`. A head
             with an output per token (tagging, QA spans) gives it back in that layout
             (`to_padded`), so that its loss and its readers see the padded batch's positions.

Every token-wise layer (embeddings, projections, feed-forward, norms, heads) computes the same
values as in the padded batch, and attention sees the same keys, so losses and accuracies are
those of the padded batch; only the positions computed are fewer. `pack_rows` (trainer side)
builds these tensors; the encoder turns `Packed.visibility` into the additive mask every layer takes.
"""
from __future__ import annotations

from typing import NamedTuple

import torch


class Packed(NamedTuple):
    segments: torch.Tensor   # (R, L) long, 0 = padding
    positions: torch.Tensor  # (R, L) long, position within the example
    starts: torch.Tensor     # (B,) long, flat index of each example's first token
    tokens: torch.Tensor | None = None  # (N,) long, flat indices of the real tokens (unpadded layers)
    padded_index: torch.Tensor | None = None  # (N,) long, each real token's flat index in the padded (B, T)
    padded_width: int = 0                     # T of that padded layout

    def visibility(self) -> torch.Tensor:
        """(R, 1, L, L) bool, True where a query may see a key (same segment)."""
        s = self.segments
        return (s[:, :, None] == s[:, None, :])[:, None]

    def first_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (R, L, H) -> (B, H): each example's first token, in the examples' order."""
        return hidden.flatten(0, 1).index_select(0, self.starts)

    def real(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (R, L, H) -> (N, H): the real tokens, in the order of `tokens`."""
        return hidden.flatten(0, 1).index_select(0, self.tokens)

    def to_padded(self, x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """x (N, C), one row per real token in the order of `tokens` -> (B, T, C) in the padded
        layout (padded_index, padded_width), `fill` on the padding."""
        if self.padded_index is None or self.tokens is None:
            raise ValueError("going back to the padded layout needs the packing's tokens and padded_index.")
        B, T = self.starts.shape[0], self.padded_width
        out = x.new_full((B * T, x.shape[-1]), fill)
        return out.index_copy(0, self.padded_index, x).view(B, T, x.shape[-1])


class Unpadded(NamedTuple):
    """The real tokens of packed rows as one (N, C) tensor, and how attention lays them out:
    passed to the blocks in place of the attention mask. `mask` is the rows' (R, 1, L, L) mask
    (additive, or bool visibility), so its shape gives R and L."""

    tokens: torch.Tensor  # (N,) flat indices into R * L
    mask: torch.Tensor    # (R, 1, L, L)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C) -> (R, L, C), zeros on the padding."""
        R, L = self.mask.shape[0], self.mask.shape[-1]
        out = torch.zeros(R * L, x.shape[-1], dtype=x.dtype, device=x.device)
        return out.index_copy(0, self.tokens, x).view(R, L, x.shape[-1])

    def real(self, y: torch.Tensor) -> torch.Tensor:
        """(R, L, C) -> (N, C): the real tokens' rows, in order."""
        return y.reshape(-1, y.shape[-1]).index_select(0, self.tokens)


def check_packed(packed: Packed, input_ids: torch.Tensor) -> None:
    if packed.segments.shape != input_ids.shape or packed.positions.shape != input_ids.shape:
        raise ValueError(f"packed segments {tuple(packed.segments.shape)} and positions "
                         f"{tuple(packed.positions.shape)} must have the input's shape {tuple(input_ids.shape)}.")
    if packed.starts.dim() != 1:
        raise ValueError(f"packed starts must be (B,), got shape {tuple(packed.starts.shape)}.")
