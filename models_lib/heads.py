"""Pre-training heads that sit on an encoder backbone; each is small and separate."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .layers import ACTIVATIONS

if TYPE_CHECKING:
    from .bert import BertConfig


class MLMHead(nn.Module):
    """dense H -> E + activation + LayerNorm, then the decoder: the word embedding matrix + a bias.

    The decoder weight is not a parameter of this head: the caller passes the word embedding
    table on every call, so the tie cannot come undone (after loading, moving or casting) and
    the weight appears once in a state dict. Only the output bias belongs to the head.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.embedding_size or config.hidden_size  # ALBERT predicts from the embedding size
        self.dense = nn.Linear(config.hidden_size, E)
        self.act = ACTIVATIONS[config.hidden_act]
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """hidden: (..., H), usually only the masked positions (N, H); decoder_weight: (V, E) -> (..., V)."""
        x = self.norm(self.act(self.dense(hidden)))  # (..., E)
        return F.linear(x, decoder_weight, self.bias)  # (..., V)


class NSPHead(nn.Module):
    """Two-way classifier on the pooled [CLS] vector: 0 = IsNext, 1 = NotNext (also SOP's head)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.classifier = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)  # (B, 2)
