"""The bidirectional encoder: embeddings -> blocks -> (pooler), configured by fields.

BERT is the default of every field. The other fields are what the encoder variants change,
so those become configurations rather than copies:
  embedding_size     ALBERT: embeddings of size E < H, then one E -> H projection
  share_layers       ALBERT: "all" (one block applied L times), "attention" or "ffn"
  norm_placement     "post" (BERT) or "pre" (LayerNorm at each sublayer's input + a final one)
  position_offset    RoBERTa: position ids start at 2 (its table has 514 rows)
  type_vocab_size    0 = no token-type embeddings (DistilBERT, RoBERTa has 1)
  use_pooler         False = no [CLS] pooler (DistilBERT)
The modules read those fields from a config object (`models_lib.bert.BertConfig`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from .layers import FeedForward, SelfAttention, build_attention_mask

if TYPE_CHECKING:
    from .bert import BertConfig


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation; use as `model.apply(lambda m: init_weights(m, std))`."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            # The padding row is meant to be a constant (and gets no gradient); start it at zero.
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class Embeddings(nn.Module):
    """Word + learned absolute position + token type, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.embedding_size or config.hidden_size
        self.position_offset = config.position_offset
        self.max_positions = config.max_positions
        self.word = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, E)
        self.token_type = nn.Embedding(config.type_vocab_size, E) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        # ALBERT's factorisation: a small vocabulary table, lifted to the hidden size once.
        self.project = nn.Linear(E, config.hidden_size) if E != config.hidden_size else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[1]
        if T > self.max_positions:
            raise ValueError(f"the sequence has {T} tokens but this model accepts at most {self.max_positions}.")
        positions = torch.arange(self.position_offset, self.position_offset + T, device=input_ids.device)
        x = self.word(input_ids) + self.position(positions)  # (B, T, E) + (T, E)
        if self.token_type is not None:
            # No segment ids means everything is segment 0; adding row 0 skips a (B, T) gather.
            x = x + (self.token_type(token_type_ids) if token_type_ids is not None else self.token_type.weight[0])
        elif token_type_ids is not None:
            raise ValueError("this model has no token type embeddings (type_vocab_size=0); pass token_type_ids=None.")
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x  # (B, T, H)


class Block(nn.Module):
    """One transformer layer: self-attention then feed-forward, each in a residual branch.

    `attention` / `ffn` may be passed in to share those sublayers with other blocks (ALBERT).
    """

    def __init__(self, config: BertConfig, *, attention: SelfAttention | None = None,
                 ffn: FeedForward | None = None):
        super().__init__()
        H, eps = config.hidden_size, config.layer_norm_eps
        self.pre_norm = config.norm_placement == "pre"
        self.attention = attention or SelfAttention(H, config.num_heads, dropout=config.attention_dropout)
        self.attn_norm = nn.LayerNorm(H, eps=eps)
        self.ffn = ffn or FeedForward(H, config.intermediate_size, activation=config.hidden_act)
        self.ffn_norm = nn.LayerNorm(H, eps=eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_norm:
            # Pre-LN keeps an un-normalised residual path, which trains stably without warmup.
            x = x + self.dropout(self.attention(self.attn_norm(x), mask))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        # Post-LN (BERT): normalise after each residual addition.
        x = self.attn_norm(x + self.dropout(self.attention(x, mask)))  # (B, T, H)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, T, H)


class Encoder(nn.Module):
    """The stack of blocks; with pre-LN, a final LayerNorm (the residual stream is un-normalised)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        L = config.num_layers
        if config.share_layers == "all":
            # One set of weights applied L times: what ALBERT does by default.
            self.layers = nn.ModuleList([Block(config)])
            self.order = [0] * L
        else:
            first = Block(config)
            rest = [
                Block(config,
                      attention=first.attention if config.share_layers == "attention" else None,
                      ffn=first.ffn if config.share_layers == "ffn" else None)
                for _ in range(L - 1)
            ]
            self.layers = nn.ModuleList([first, *rest])
            self.order = list(range(L))
        self.final_norm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                           if config.norm_placement == "pre" else None)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for i in self.order:
            x = self.layers[i](x, mask)  # (B, T, H)
        return self.final_norm(x) if self.final_norm is not None else x


class Pooler(nn.Module):
    """dense + tanh on the first ([CLS]) position: the sentence vector NSP/SOP classify."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H)


class EncoderOutput(NamedTuple):
    hidden_states: torch.Tensor  # (B, T, H) final layer
    pooled: torch.Tensor | None  # (B, H), None without a pooler


class TransformerEncoder(nn.Module):
    """Embeddings + encoder stack + optional pooler: the backbone every encoder head sits on."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config.hidden_size) if config.use_pooler else None
        self.apply(lambda m: init_weights(m, config.initializer_range))

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Final hidden states (B, T, H). attention_mask: (B, T) 1/0 padding, or (B, T, T) / (B, 1, T, T)."""
        if attention_mask is not None and attention_mask.dim() == 2 and bool(attention_mask.all()):
            # Nothing is padded: drop the mask so attention can take its unmasked fast path.
            attention_mask = None
        mask = build_attention_mask(attention_mask)
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
        return self.encoder(x, mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> EncoderOutput:
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        return EncoderOutput(hidden, self.pooler(hidden) if self.pooler is not None else None)
