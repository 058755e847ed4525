"""Pre-training heads that sit on an encoder backbone; each is small and separate.

  MLMHead   masked LM (BERT, RoBERTa, ALBERT, DistilBERT, SpanBERT, UniLM, ELECTRA's generator)
  NSPHead   next-sentence prediction on the pooled [CLS] (BERT); SOPHead: sentence order (ALBERT)
  RTDHead   replaced-token detection, one logit per token (ELECTRA's discriminator)
  SBOHead   span boundary objective (SpanBERT)
Heads that predict tokens take the word embedding table as their decoder weight on every call.
That table and their output bias have config.padded_vocab_size rows (models_lib.core.vocab); the
logits they return have exactly config.vocab_size columns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from models_lib.core import vocab
from models_lib.core.layers import ACTIVATIONS

if TYPE_CHECKING:
    from models_lib.core.config import EncoderConfig


class MLMHead(nn.Module):
    """dense H -> E + activation + LayerNorm, then the decoder: the word embedding matrix + a bias.

    The decoder weight is not a parameter of this head: the caller passes the word embedding
    table on every call, so the tie cannot come undone (after loading, moving or casting) and
    the weight appears once in a state dict. Only the output bias belongs to the head.
    `activation` overrides config.hidden_act where a family fixes it (RoBERTa's and ELECTRA's
    generator heads always use exact GELU).
    """

    def __init__(self, config: EncoderConfig, *, activation: str | None = None):
        super().__init__()
        E = config.embedding_size or config.hidden_size  # ALBERT/ELECTRA predict from the embedding size
        self.dense = nn.Linear(config.hidden_size, E)
        self.act = ACTIVATIONS[activation or config.hidden_act]
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        vocab.declare(self, ("bias",), config.vocab_size)

    def forward(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """hidden: (..., H), usually only the masked positions (N, H); decoder_weight: the padded
        (V_pad, E) table -> (..., V) logits over the real vocabulary."""
        x = self.norm(self.act(self.dense(hidden)))  # (..., E)
        return vocab.logits(x, decoder_weight, self.bias, self.vocab_size)  # (..., V)

    def loss_logits(self, hidden: torch.Tensor, decoder_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (..., V_pad) with the padding at -inf, for the loss; the logits (..., V)): see
        models_lib.core.vocab.loss_logits."""
        x = self.norm(self.act(self.dense(hidden)))  # (..., E)
        return vocab.loss_logits(x, decoder_weight, self.bias, self.vocab_size)


class NSPHead(nn.Module):
    """Two-way classifier on the pooled [CLS] vector: 0 = IsNext, 1 = NotNext."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.classifier = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)  # (B, 2)


class SOPHead(NSPHead):
    """Sentence-order prediction (ALBERT): the same classifier; 0 = in order, 1 = swapped."""


class RTDHead(nn.Module):
    """Replaced-token detection: dense H -> H + activation, then one logit per token (> 0 = replaced)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.act(self.dense(hidden))).squeeze(-1)  # (B, T)


class SBOHead(nn.Module):
    """Span boundary objective (SpanBERT): predict each span token x_i from the two tokens just
    outside the span and the token's place in it:

        h = LN(act(W1 [x_(s-1); x_(e+1); p_(i-s)]))     (3H -> H)
        y = LN(act(W2 h))                                (H -> E)
        logits = y @ word_embeddings^T + bias

    `pairs` is a (N, 5) long tensor, one row per predicted token:
        (batch index, left boundary position s-1, right boundary position e+1,
         target position i, relative position i - s  (0 .. max_span_length-1))
    The target position is not needed to compute the logits; it says which label belongs to
    the row (SpanBertForPreTraining reads the label there from mlm_labels when none are given).
    """

    def __init__(self, config: EncoderConfig, max_span_length: int):
        super().__init__()
        H, E = config.hidden_size, config.embedding_size or config.hidden_size
        self.position = nn.Embedding(max_span_length, H)
        self.dense1 = nn.Linear(3 * H, H)
        self.norm1 = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dense2 = nn.Linear(H, E)
        self.norm2 = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.act = ACTIVATIONS[config.hidden_act]
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        vocab.declare(self, ("bias",), config.vocab_size)

    def forward(self, hidden: torch.Tensor, pairs: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """hidden: (B, T, H); pairs: (N, 5); decoder_weight: the padded (V_pad, E) table -> logits (N, V)."""
        return vocab.logits(self._features(hidden, pairs), decoder_weight, self.bias, self.vocab_size)  # (N, V)

    def loss_logits(self, hidden: torch.Tensor, pairs: torch.Tensor,
                    decoder_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (N, V_pad) with the padding at -inf, for the loss; the logits (N, V))."""
        return vocab.loss_logits(self._features(hidden, pairs), decoder_weight, self.bias, self.vocab_size)

    def _features(self, hidden: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        batch, left, right, _, relative = pairs.unbind(dim=1)  # each (N,)
        x = torch.cat([hidden[batch, left], hidden[batch, right], self.position(relative)], dim=-1)  # (N, 3H)
        x = self.norm1(self.act(self.dense1(x)))  # (N, H)
        return self.norm2(self.act(self.dense2(x)))  # (N, E)
