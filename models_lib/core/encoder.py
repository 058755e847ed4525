"""The bidirectional encoder: embeddings -> blocks -> (pooler), configured by fields.

BERT is the default of every field. The other fields are what the encoder variants change,
so those become configurations rather than copies:
  embedding_size          ALBERT/ELECTRA: embeddings of size E, then one E -> H projection
  share_layers            ALBERT: "all" (one block applied L times), "attention" or "ffn"
  norm_placement          "post" (BERT) or "pre" (LayerNorm at each sublayer's input + a final one)
  positions_from_padding  RoBERTa: position ids count the non-pad tokens, from pad_token_id + 1
  position_offset         the first position id of plain (arange) positions
  type_vocab_size         0 = no token-type embeddings (DistilBERT; RoBERTa has 1)
  use_pooler              False = no [CLS] pooler (DistilBERT, RoBERTa, ELECTRA)
The modules read those fields from a config object (`models_lib.core.config.EncoderConfig`).
The Embeddings module can be passed in, so two encoders share one (ELECTRA's G and D).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from models_lib.core.layers import FeedForward, KVCache, SelfAttention, additive_mask, build_attention_mask
from models_lib.core.packing import Packed, Unpadded, check_packed
from models_lib.core.recompute import RecomputedStack
from models_lib.core.vocab import VocabEmbedding, real_rows

if TYPE_CHECKING:
    from models_lib.core.config import EncoderConfig


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation; use as `model.apply(lambda m: init_weights(m, std))`. A table or
    output layer padded past the vocabulary (models_lib.core.vocab) draws its real rows only."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(real_rows(module), mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(real_rows(module), mean=0.0, std=std)
        if module.padding_idx is not None:
            # The padding row is meant to be a constant (and gets no gradient); start it at zero.
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class Embeddings(nn.Module):
    """Word + learned absolute position + token type, then LayerNorm and dropout: (B, T) -> (B, T, E)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        E = config.embedding_size or config.hidden_size
        self.position_offset = config.position_offset
        self.max_positions = config.max_positions
        self.pad_token_id = config.pad_token_id if config.positions_from_padding else None
        # config.padded_vocab_size rows: the vocabulary, then zero rows no id reaches (models_lib.core.vocab)
        self.word = VocabEmbedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, E)
        self.token_type = nn.Embedding(config.type_vocab_size, E) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def position_ids(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """(T,) for plain positions; (B, T) when they are counted from the padding (RoBERTa) or
        given: `positions` (B, T), each token's place in its example (a packed batch's)."""
        if positions is not None:
            first = self.position_offset if self.pad_token_id is None else self.pad_token_id + 1
            return positions + first
        T = input_ids.shape[1]
        if self.pad_token_id is None:
            return torch.arange(self.position_offset, self.position_offset + T, device=input_ids.device)
        # fairseq's make_positions: real tokens get pad+1, pad+2, ... in order; pads keep pad_token_id,
        # so a left-padded sequence has the same positions as the unpadded one.
        real = input_ids.ne(self.pad_token_id)
        return torch.cumsum(real, dim=1) * real + self.pad_token_id  # (B, T)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[1]
        if T > self.max_positions:
            raise ValueError(f"the sequence has {T} tokens but this model accepts at most {self.max_positions}.")
        x = self.word(input_ids) + self.position(self.position_ids(input_ids, positions))  # (B, T, E) + (T or B,T, E)
        if self.token_type is not None:
            # No segment ids means everything is segment 0; adding row 0 skips a (B, T) gather.
            x = x + (self.token_type(token_type_ids) if token_type_ids is not None else self.token_type.weight[0])
        elif token_type_ids is not None:
            raise ValueError("this model has no token type embeddings (type_vocab_size=0); pass token_type_ids=None.")
        return self.dropout(self.norm(x))  # (B, T, E)


class Block(nn.Module):
    """One transformer layer: self-attention then feed-forward, each in a residual branch.

    `attention` / `ffn` may be passed in to share those sublayers with other blocks (ALBERT).
    """

    def __init__(self, config: EncoderConfig, *, attention: SelfAttention | None = None,
                 ffn: FeedForward | None = None):
        super().__init__()
        H, eps = config.hidden_size, config.layer_norm_eps
        self.pre_norm = config.norm_placement == "pre"
        self.attention = attention or SelfAttention(H, config.num_heads, dropout=config.attention_dropout)
        self.attn_norm = nn.LayerNorm(H, eps=eps)
        self.ffn = ffn or FeedForward(H, config.intermediate_size, activation=config.hidden_act)
        self.ffn_norm = nn.LayerNorm(H, eps=eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, causal: bool = False,
                cache: KVCache | None = None) -> torch.Tensor:
        """`causal` and `cache` are for decoder-only use of the block (GPT), see layers.Attention."""
        if self.pre_norm:
            # Pre-LN keeps an un-normalised residual path, which trains stably without warmup.
            x = x + self.dropout(self.attention(self.attn_norm(x), mask, causal=causal, cache=cache))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        # Post-LN (BERT): normalise after each residual addition.
        x = self.attn_norm(x + self.dropout(self.attention(x, mask, causal=causal, cache=cache)))  # (B, T, H)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, T, H)


class Encoder(RecomputedStack):
    """The stack of blocks; with pre-LN, a final LayerNorm (the residual stream is un-normalised).
    Its blocks may recompute their activations in the backward pass (models_lib.core.recompute)."""

    def __init__(self, config: EncoderConfig):
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, *, causal: bool = False,
                caches: list[KVCache] | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """(B, T, H) -> (B, T, H); with output_hidden_states, the input and every layer's output
        (L + 1 tensors, the last one after the final norm of a pre-LN stack). `causal` and
        `caches` (one KVCache per applied layer) serve decoder-only models (GPT)."""
        states = [x]
        for n, i in enumerate(self.order):
            if caches is None:
                x = self.run_block(self.layers[i], x, mask, causal=causal)  # (B, T, H)
            else:
                x = self.layers[i](x, mask, causal=causal, cache=caches[n])
            states.append(x)
        if self.final_norm is not None:
            x = states[-1] = self.final_norm(x)
        return tuple(states) if output_hidden_states else x


def _compute_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype attention scores are computed in: autocast's where it is on, else the weights'."""
    kind = weight.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return weight.dtype


class Pooler(nn.Module):
    """dense + tanh on the first ([CLS]) position: the sentence vector NSP/SOP classify."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor, packed: Packed | None = None) -> torch.Tensor:
        first = hidden[:, 0] if packed is None else packed.first_tokens(hidden)  # (B, H)
        return torch.tanh(self.dense(first))  # (B, H)


class EncoderOutput(NamedTuple):
    hidden_states: torch.Tensor  # (B, T, H) final layer
    pooled: torch.Tensor | None  # (B, H), None without a pooler


class TransformerEncoder(nn.Module):
    """Embeddings (+ E -> H projection) + encoder stack + optional pooler: the backbone every
    encoder head sits on.

    `embeddings` may be an Embeddings module owned by another encoder (ELECTRA shares one
    between generator and discriminator); it is then used as is, not re-initialised.
    """

    def __init__(self, config: EncoderConfig, *, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = config
        E = config.embedding_size
        if embeddings is not None and embeddings.word.embedding_dim != (E or config.hidden_size):
            raise ValueError(f"the shared embeddings have width {embeddings.word.embedding_dim}, but this encoder "
                             f"expects {E or config.hidden_size}.")
        self.embeddings = embeddings if embeddings is not None else Embeddings(config)
        # ALBERT's factorisation (and ELECTRA's narrower encoders): lift E to H once, per encoder.
        self.embeddings_project = nn.Linear(E, config.hidden_size) if E is not None else None
        self.encoder = Encoder(config)
        self.pooler = Pooler(config.hidden_size) if config.use_pooler else None
        for module in self.children():
            if module is not embeddings:
                module.apply(lambda m: init_weights(m, config.initializer_range))

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None,
               output_hidden_states: bool = False, *,
               packed: Packed | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Final hidden states (B, T, H). attention_mask: (B, T) 1/0 padding, or (B, T, T) /
        (B, 1, T, T) with True where a query may see a key (UniLM, see models_lib.core.masks).
        `packed` (models_lib.core.packing): the rows hold several examples each; attention stays
        inside each (and inside a (B, T, T) attention_mask, when one is given too) and positions
        start again at each example's first token.

        With output_hidden_states: a tuple of L + 1 tensors (B, T, H), the embedding output
        (after the projection) and each layer's output; the last is the final hidden states.
        """
        positions = None
        if packed is not None:
            check_packed(packed, input_ids)
            positions = packed.positions
            if attention_mask is not None and attention_mask.dim() == 3:  # per-example visibility (UniLM)
                mask = build_attention_mask(attention_mask) & packed.visibility()
            else:
                # additive once, for every layer
                mask = additive_mask(packed.visibility(), _compute_dtype(self.embeddings.word.weight))
            if packed.tokens is not None:  # unpadded: the blocks compute the N real tokens only
                x = self.embeddings(input_ids, token_type_ids, positions).flatten(0, 1).index_select(0, packed.tokens)
                if self.embeddings_project is not None:
                    x = self.embeddings_project(x)  # (N, H)
                layout = Unpadded(packed.tokens, mask)
                states = self.encoder(x, layout, output_hidden_states)
                # back to (R, L, H), zeros on the padding
                return tuple(layout.rows(s) for s in states) if output_hidden_states else layout.rows(states)
        else:
            if attention_mask is not None and attention_mask.dim() == 2 and bool(attention_mask.all()):
                # Nothing is padded: drop the mask so attention can take its unmasked fast path.
                attention_mask = None
            mask = build_attention_mask(attention_mask)
        x = self.embeddings(input_ids, token_type_ids, positions)  # (B, T, E)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # (B, T, H)
        return self.encoder(x, mask, output_hidden_states)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> EncoderOutput:
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        return EncoderOutput(hidden, self.pooler(hidden) if self.pooler is not None else None)
