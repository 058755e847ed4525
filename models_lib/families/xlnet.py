"""XLNet: the permutation language model with two-stream attention (Yang et al. 2019).

    cfg = XLNetConfig.from_preset("xlnet-tiny", vocab_size=8000)
    model = XLNetLMHeadModel(cfg)
    out = model(input_ids, perm_mask=perm, target_mapping=targets, labels=labels)   # XLNetOutput
    out.logits   # (B, M, V): one row per target (the query stream); (B, T, V) without target_mapping
    out.mems     # with use_mems=True: per layer the content states to prepend next time (detached)

A factorisation order z is realised by masks over the natural order: `perm_mask` (B, T, T),
1 where query i may NOT see key j (j comes at or after i in z). Two streams run through the
same weights: the content stream h (initialised from the word embeddings, sees itself) and the
query stream g (initialised from one learned vector `mask_emb`: it knows its position, through
the relative encoding, not its content). Only the targets (`target_mapping` (B, M, T) one-hot
rows) get a query stream, and their logits predict them: XLNet's partial prediction.

Positions are Transformer-XL's relative encoding (models_lib.core.relative) with the memory of
previous segments prepended as keys and values (`mems`); segments are encoded relatively:
a learned vector per "same segment" / "other segment" (token_type_ids; the memory counts as
segment 0, as in transformers). attn_type "bi" (the default) lets every token see every other
one but for perm_mask; "uni" adds a causal mask.

The layout of the parameters follows transformers' XLNetLMHeadModel one to one (the per-head
(H, N, D) tensors become bias-free linears), so models_lib.hf.xlnet only renames and reshapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import vocab
from models_lib.core.config import PresetConfig, check_lengths, check_probabilities, check_sizes, check_token_ids
from models_lib.core.layers import ACTIVATIONS
from models_lib.core.relative import PositionwiseFF, RelativeAttention, causal_memory_mask, relative_positions, \
    sinusoid
from models_lib.families.pretraining import IGNORE_INDEX

__all__ = ["XLNET_PRESETS", "XLNetConfig", "XLNetLMHeadModel", "XLNetOutput"]

# xlnet-base-cased: Yang et al. 2019 (L12 H768 A12, FFN 3072, SentencePiece vocabulary of 32000,
# memory 384 in pre-training); xlnet-tiny / -mini: the same shape scaled down for this app.
XLNET_PRESETS: dict[str, dict[str, Any]] = {
    "xlnet-tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512, mem_len=64),
    "xlnet-mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024, mem_len=128),
    "xlnet-base-cased": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072, mem_len=384,
                             vocab_size=32000),
}


@dataclass
class XLNetConfig(PresetConfig):
    config_label: ClassVar[str] = "XLNet"
    presets: ClassVar[dict[str, dict[str, Any]]] = XLNET_PRESETS

    family: str = "xlnet"

    vocab_size: int = 32000
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"

    # Memory and positions
    mem_len: int = 384  # content states of previous segments kept as extra keys/values (0 = none)
    reuse_len: int = 0  # 0: cache every position of a segment; n: only its first n (XLNet's pre-training)
    attn_type: str = "bi"  # "bi": bidirectional but for perm_mask; "uni": also causal
    clamp_len: int = -1  # distances beyond it share its encoding (-1: no clamping)

    dropout: float = 0.1  # embeddings, positions, each sublayer's output and the FFN's inner activations
    attention_dropout: float = 0.1  # on the attention weights (transformers uses `dropout` for both)
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    pad_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.family != "xlnet":
            raise ValueError(f"An XLNetConfig is for the XLNet family, got family {self.family!r}.")
        check_sizes(self, ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size"))
        if self.hidden_size % self.num_heads:
            raise ValueError(f"The hidden size ({self.hidden_size}) must be divisible by the number of "
                             f"attention heads ({self.num_heads}).")
        if self.hidden_size % 2:
            raise ValueError(f"The hidden size must be even (sine and cosine halves), not {self.hidden_size}.")
        check_lengths(self, ("mem_len", "reuse_len"))
        if self.attn_type not in ("bi", "uni"):
            raise ValueError(f"attn_type must be 'bi' or 'uni', not {self.attn_type!r}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {self.hidden_act!r}; choose one of {', '.join(sorted(ACTIVATIONS))}.")
        check_probabilities(self, ("dropout", "attention_dropout"))
        check_token_ids(self, ("pad_token_id", "eos_token_id"))

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def label(self) -> str:
        return "XLNet"

    @property
    def max_positions(self) -> int:
        """Relative positions set no hard limit; the trainer reads this as the longest input."""
        return 10**6

    def count_params(self, embeddings: bool = False) -> int:
        """The layers (with `embeddings`: also the word table, mask_emb and the output bias:
        every parameter of XLNetLMHeadModel)."""
        H, F_, V = self.hidden_size, self.intermediate_size, self.padded_vocab_size  # the tables' rows as allocated
        attention = 5 * H * H + 3 * H + 2 * H + 2 * H  # q k v r o; u, v, s biases; 2 segment vectors; LayerNorm
        ffn = 2 * H * F_ + F_ + H + 2 * H
        n = self.num_layers * (attention + ffn)
        if embeddings:
            n += V * H + H + V + (0 if self.tie_word_embeddings else V * H)
        return n

    def shape(self) -> dict[str, Any]:
        L, H, A = self.num_layers, self.hidden_size, self.num_heads
        return {"layers": L, "hidden": H, "heads": A, "ffn": self.intermediate_size, "label": f"L{L} H{H} A{A}"}


@dataclass
class XLNetOutput:
    loss: torch.Tensor | None  # mean cross-entropy over the labels that are not -100
    logits: torch.Tensor  # (B, M, V) with target_mapping, else (B, T, V)
    mems: list[torch.Tensor] | None = None  # per layer (B, M', H), detached
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 content-stream states (B, T, H)


class XLNetLayer(nn.Module):
    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.attention = RelativeAttention(config.hidden_size, config.num_heads, config.head_size,
                                           dropout=config.dropout, attention_dropout=config.attention_dropout,
                                           layer_norm_eps=config.layer_norm_eps, segments=True)
        self.ffn = PositionwiseFF(config.hidden_size, config.intermediate_size, activation=config.hidden_act,
                                  dropout=config.dropout, layer_norm_eps=config.layer_norm_eps)

    def forward(self, h: torch.Tensor, g: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, g = self.attention(h, g, **kwargs)
        return self.ffn(h), (None if g is None else self.ffn(g))


class XLNetLMHeadModel(nn.Module):
    """forward(input_ids (B, T), attention_mask (B, T) 1/0 = None, token_type_ids (B, T) = None,
    perm_mask (B, T, T) = None, target_mapping (B, M, T) = None, labels = None, mems = None,
    *, use_mems=False, output_hidden_states=False) -> XLNetOutput

    labels: (B, M) with target_mapping (the token of each target), else (B, T); not shifted.
    target_positions (B, M) long, instead of target_mapping: each target's position (one-hot
    mapping rows), computed for the M targets only (what training uses; the same logits)."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        if not isinstance(config, XLNetConfig):
            raise ValueError(f"XLNetLMHeadModel needs an XLNetConfig, not a {type(config).__name__}.")
        self.config = config
        H = config.hidden_size
        self.word_embedding = vocab.VocabEmbedding(config.vocab_size, H)  # padded_vocab_size rows
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, H))
        self.layers = nn.ModuleList(XLNetLayer(config) for _ in range(config.num_layers))
        self.dropout = nn.Dropout(config.dropout)
        self.lm_head = None if config.tie_word_embeddings else vocab.VocabLinear(H, config.vocab_size, bias=False)
        self.lm_bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        vocab.declare(self, ("lm_bias",), config.vocab_size)
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(vocab.real_rows(module), 0.0, std)  # of a vocabulary table, the real rows
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeAttention):
            for p in (module.r_w_bias, module.r_r_bias, module.r_s_bias, module.seg_embed):
                nn.init.normal_(p, 0.0, std)
        elif module is self:
            nn.init.normal_(self.mask_emb, 0.0, std)

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    @property
    def output_embeddings(self) -> torch.Tensor:
        return self.word_embedding.weight if self.lm_head is None else self.lm_head.weight

    def _cache(self, current: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor | None:
        """The next memory of one layer: the memory and this segment's input states, the last mem_len."""
        mem_len = self.config.mem_len
        if mem_len == 0:
            return None
        if self.config.reuse_len > 0:
            current = current[:, :self.config.reuse_len]
        both = current if previous is None else torch.cat([previous, current], dim=1)
        return both[:, -mem_len:].detach()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, perm_mask: torch.Tensor | None = None,
                target_mapping: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                mems: list[torch.Tensor] | None = None, *, target_positions: torch.Tensor | None = None,
                use_mems: bool = False, output_hidden_states: bool = False) -> XLNetOutput:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be a (batch, length) tensor, got shape {tuple(input_ids.shape)}.")
        B, T = input_ids.shape
        device = input_ids.device
        if mems is not None and (len(mems) != len(self.layers) or mems[0] is None):
            mems = None
        M = 0 if mems is None else mems[0].shape[1]
        K = M + T

        # What each query may not see (True), over the memory and this segment's keys.
        hidden = None
        if self.config.attn_type == "uni":
            hidden = causal_memory_mask(T, M, device=device)[None].expand(B, T, K)
        data = None
        if attention_mask is not None:
            data = (attention_mask == 0)[:, None, :].expand(B, T, T)
        if perm_mask is not None:
            data = perm_mask.bool() if data is None else data | perm_mask.bool()
        if data is not None:
            if M:
                data = torch.cat([data.new_zeros(B, T, M), data], dim=2)
            hidden = data if hidden is None else hidden | data
        mask_g = hidden
        mask_h = None
        if hidden is not None:  # the content stream always sees its own position
            eye = torch.eye(T, dtype=torch.bool, device=device)
            if M:
                eye = torch.cat([eye.new_zeros(T, M), eye], dim=1)
            mask_h = hidden & ~eye

        h = self.dropout(self.word_embedding(input_ids))
        g = None
        if target_positions is not None:  # the same as one-hot target_mapping rows, computed for M rows only
            target_mapping = None
            g = self.dropout(self.mask_emb.expand(B, target_positions.shape[1], -1)).to(h.dtype)
        elif target_mapping is not None:
            g = self.dropout(self.mask_emb.expand(B, target_mapping.shape[1], -1)).to(h.dtype)
            target_mapping = target_mapping.to(h.dtype)

        seg_diff = None
        if token_type_ids is not None:
            keys = token_type_ids if not M else torch.cat([token_type_ids.new_zeros(B, M), token_type_ids], dim=1)
            seg_diff = token_type_ids[:, :, None] != keys[:, None, :]

        pos = relative_positions(T, K, clamp_len=self.config.clamp_len, device=device)
        pos = self.dropout(sinusoid(pos, self.config.hidden_size).to(h.dtype))

        new_mems: list[torch.Tensor] = []
        states = [h] if output_hidden_states else None
        for i, layer in enumerate(self.layers):
            if use_mems:
                cached = self._cache(h, None if mems is None else mems[i])
                if cached is not None:
                    new_mems.append(cached)
            h, g = layer(h, g, pos=pos, mask_h=mask_h, mask_g=mask_g, mems=None if mems is None else mems[i],
                         seg_diff=seg_diff, target_mapping=target_mapping, target_positions=target_positions)
            if states is not None:
                states.append(h)
        out = self.dropout(g if g is not None else h)
        loss = None
        if labels is None:
            logits = self.logits(out)
        else:  # the loss reads the padded scores (padding at -inf): the unpadded softmax
            scores, logits = self.loss_logits(out)
            if labels.shape != logits.shape[:2]:
                raise ValueError(f"labels must have shape {tuple(logits.shape[:2])}, got {tuple(labels.shape)}.")
            total = F.cross_entropy(scores.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
                                    reduction="sum")
            loss = total / labels.ne(IGNORE_INDEX).sum().clamp(min=1)
        return XLNetOutput(loss, logits, new_mems if use_mems and new_mems else None,
                           tuple(states) if states is not None else None)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V): over the padded table, the padding's columns cut off."""
        return vocab.logits(hidden, self.output_embeddings, self.lm_bias, self.config.vocab_size)

    def loss_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (..., V_pad) with the padding columns at -inf, for the loss; logits (..., V))."""
        return vocab.loss_logits(hidden, self.output_embeddings, self.lm_bias, self.config.vocab_size)
