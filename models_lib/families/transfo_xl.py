"""Transformer-XL: a causal language model over segments with a recurrent memory (Dai et al. 2019).

    cfg = TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=8000, mem_len=64)
    model = TransfoXLLMHeadModel(cfg)
    mems = None
    for segment, targets in consecutive_segments:            # (B, T) each, one stream per row
        out = model(segment, labels=targets, mems=mems, use_mems=True)
        mems = out.mems                                       # per layer (B, <= mem_len, H), no gradient

Segment-level recurrence: each layer attends over the memory (the last `mem_len` input states of
that layer from the previous segments, gradient stopped) followed by the current segment, under
a causal mask; a query therefore reaches at most mem_len positions before its segment. Positions
are relative (models_lib.core.relative): sinusoidal R(i - j) projected by W_r, with the learned
u and v biases shared by all layers (`untie_r` gives each layer its own). Blocks are post-LN, the
FFN uses ReLU, the word embeddings are scaled by sqrt(H) and the output layer is tied to them
(the paper's adaptive softmax is not used).

`labels` are the tokens that follow each input position (not shifted inside): a segment
[x_t .. x_t+T-1] is labelled [x_t+1 .. x_t+T], so the last position predicts the next segment's
first token and no token of the stream goes unpredicted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import generation
from models_lib.core import vocab
from models_lib.core.config import PresetConfig, check_lengths, check_probabilities, check_sizes, check_token_ids
from models_lib.core.relative import PositionwiseFF, RelativeAttention, causal_memory_mask, relative_positions, \
    sinusoid
from models_lib.families.pretraining import IGNORE_INDEX

__all__ = ["TRANSFO_XL_PRESETS", "TransfoXLConfig", "TransfoXLLMHeadModel", "TransfoXLOutput"]

# transfo-xl-base: the paper's WikiText-103 base model (L16, d 410, 10 heads of 41, FFN 2100,
# segment 150, memory 150). -tiny / -mini: small shapes for training in this app.
TRANSFO_XL_PRESETS: dict[str, dict[str, Any]] = {
    "transfo-xl-tiny": dict(num_layers=2, hidden_size=128, num_heads=2, head_size=64, intermediate_size=512,
                            mem_len=64),
    "transfo-xl-mini": dict(num_layers=4, hidden_size=256, num_heads=4, head_size=64, intermediate_size=1024,
                            mem_len=128),
    "transfo-xl-base": dict(num_layers=16, hidden_size=410, num_heads=10, head_size=41, intermediate_size=2100,
                            mem_len=150),
}


@dataclass
class TransfoXLConfig(PresetConfig):
    config_label: ClassVar[str] = "Transformer-XL"
    presets: ClassVar[dict[str, dict[str, Any]]] = TRANSFO_XL_PRESETS

    family: str = "transfo_xl"

    vocab_size: int = 32000
    hidden_size: int = 410
    num_layers: int = 16
    num_heads: int = 10
    head_size: int = 41
    intermediate_size: int = 2100

    mem_len: int = 150  # states of previous segments each layer attends to (0: no recurrence)
    clamp_len: int = -1  # distances beyond it share its encoding (-1: none)
    untie_r: bool = False  # False: one u and one v for all layers (the paper)

    dropout: float = 0.1  # embeddings, positions, sublayer outputs, FFN inner activations, before the output layer
    attention_dropout: float = 0.0  # on the attention weights (the paper's dropatt)
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02

    pad_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.family != "transfo_xl":
            raise ValueError(f"A TransfoXLConfig is for the Transformer-XL family, got family {self.family!r}.")
        check_sizes(self, ("vocab_size", "hidden_size", "num_layers", "num_heads", "head_size", "intermediate_size"))
        if self.hidden_size % 2:
            raise ValueError(f"The hidden size must be even (sine and cosine halves), not {self.hidden_size}.")
        check_lengths(self, ("mem_len",))
        check_probabilities(self, ("dropout", "attention_dropout"))
        check_token_ids(self, ("pad_token_id", "eos_token_id"))

    @property
    def label(self) -> str:
        return "Transformer-XL"

    @property
    def max_positions(self) -> int:
        """Relative positions set no limit on a segment; the trainer reads this as the longest input."""
        return 10**6

    def count_params(self, embeddings: bool = False) -> int:
        H, N, D, F_ = self.hidden_size, self.num_heads, self.head_size, self.intermediate_size
        V = self.padded_vocab_size  # the vocabulary tables' rows as allocated (models_lib.core.vocab)
        attention = 5 * H * N * D + 2 * H + (2 * N * D if self.untie_r else 0)
        ffn = 2 * H * F_ + F_ + H + 2 * H
        n = self.num_layers * (attention + ffn) + (0 if self.untie_r else 2 * N * D)
        if embeddings:
            n += V * H + V + (0 if self.tie_word_embeddings else V * H)
        return n

    def shape(self) -> dict[str, Any]:
        L, H, A = self.num_layers, self.hidden_size, self.num_heads
        return {"layers": L, "hidden": H, "heads": A, "ffn": self.intermediate_size, "label": f"L{L} H{H} A{A}",
                "memory": self.mem_len}


@dataclass
class TransfoXLOutput:
    loss: torch.Tensor | None  # mean cross-entropy over the labels that are not -100
    logits: torch.Tensor  # (B, T, V)
    mems: list[torch.Tensor] | None = None  # with use_mems: per layer (B, <= mem_len, H), detached
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class TransfoXLGenerationState:
    mems: list[torch.Tensor] | None
    history: torch.Tensor | None = None  # with mem_len 0: every token so far, read again at each step


class SharedBiases(nn.Module):
    """The paper's u (r_w_bias) and v (r_r_bias), one pair for every layer."""

    def __init__(self, num_heads: int, head_size: int):
        super().__init__()
        self.r_w_bias = nn.Parameter(torch.zeros(num_heads, head_size))
        self.r_r_bias = nn.Parameter(torch.zeros(num_heads, head_size))


class TransfoXLLayer(nn.Module):
    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        self.attention = RelativeAttention(config.hidden_size, config.num_heads, config.head_size,
                                           dropout=config.dropout, attention_dropout=config.attention_dropout,
                                           layer_norm_eps=config.layer_norm_eps, own_biases=config.untie_r)
        self.ffn = PositionwiseFF(config.hidden_size, config.intermediate_size, activation="relu",
                                  dropout=config.dropout, layer_norm_eps=config.layer_norm_eps)

    def forward(self, h: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.ffn(self.attention(h, **kwargs)[0])


class TransfoXLLMHeadModel(nn.Module):
    """forward(input_ids (B, T), attention_mask (B, T) 1/0 = None, labels (B, T) = None, mems = None,
    *, use_mems=False, output_hidden_states=False) -> TransfoXLOutput (labels: see the module doc)."""

    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        if not isinstance(config, TransfoXLConfig):
            raise ValueError(f"TransfoXLLMHeadModel needs a TransfoXLConfig, not a {type(config).__name__}.")
        self.config = config
        H = config.hidden_size
        self.word_embedding = vocab.VocabEmbedding(config.vocab_size, H)  # padded_vocab_size rows
        self.emb_scale = math.sqrt(H)
        self.biases = None if config.untie_r else SharedBiases(config.num_heads, config.head_size)
        self.layers = nn.ModuleList(TransfoXLLayer(config) for _ in range(config.num_layers))
        self.dropout = nn.Dropout(config.dropout)
        self.lm_head = None if config.tie_word_embeddings else vocab.VocabLinear(H, config.vocab_size, bias=False)
        self.lm_bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        vocab.declare(self, ("lm_bias",), config.vocab_size)
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Embedding):
            nn.init.normal_(vocab.real_rows(module), 0.0, std)  # of a vocabulary table, the real rows
        elif isinstance(module, nn.Linear):
            nn.init.normal_(vocab.real_rows(module), 0.0, std)  # of a vocabulary table, the real rows
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, (SharedBiases, RelativeAttention)) and hasattr(module, "r_w_bias"):
            nn.init.normal_(module.r_w_bias, 0.0, std)
            nn.init.normal_(module.r_r_bias, 0.0, std)

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    @property
    def output_embeddings(self) -> torch.Tensor:
        return self.word_embedding.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V): over the padded table, the padding's columns cut off."""
        return vocab.logits(hidden, self.output_embeddings, self.lm_bias, self.config.vocab_size)

    def loss_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (..., V_pad) with the padding columns at -inf, for the loss; logits (..., V))."""
        return vocab.loss_logits(hidden, self.output_embeddings, self.lm_bias, self.config.vocab_size)

    def _cache(self, current: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor | None:
        if self.config.mem_len == 0:
            return None
        both = current if previous is None else torch.cat([previous, current], dim=1)
        return both[:, -self.config.mem_len:].detach()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, mems: list[torch.Tensor] | None = None, *,
                use_mems: bool = False, output_hidden_states: bool = False) -> TransfoXLOutput:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be a (batch, length) tensor, got shape {tuple(input_ids.shape)}.")
        B, T = input_ids.shape
        device = input_ids.device
        if mems is not None and (len(mems) != len(self.layers) or mems[0].shape[0] != B):
            raise ValueError(f"mems must hold one (batch {B}, length, hidden) tensor per layer.")
        M = 0 if mems is None else mems[0].shape[1]
        K = M + T
        hidden = causal_memory_mask(T, M, device=device)[None]  # (1, T, K)
        if attention_mask is not None and not bool(attention_mask.all()):
            keys = (attention_mask == 0)
            if M:
                keys = torch.cat([keys.new_zeros(B, M), keys], dim=1)
            hidden = (hidden | keys[:, None, :]) & ~_diagonal(T, M, device)  # a padded query sees itself
        hidden = hidden.expand(B, T, K)

        h = self.dropout(self.word_embedding(input_ids) * self.emb_scale)
        pos = relative_positions(T, K, clamp_len=self.config.clamp_len, device=device)
        pos = self.dropout(sinusoid(pos, self.config.hidden_size).to(h.dtype))
        new_mems: list[torch.Tensor] = []
        states = [h] if output_hidden_states else None
        for i, layer in enumerate(self.layers):
            if use_mems:
                cached = self._cache(h, None if mems is None else mems[i])
                if cached is not None:
                    new_mems.append(cached)
            h = layer(h, pos=pos, mask_h=hidden, mems=None if mems is None else mems[i], shared=self.biases)
            if states is not None:
                states.append(h)
        loss = None
        if labels is None:
            logits = self.logits(self.dropout(h))
        else:  # the loss reads the padded scores (padding at -inf): the unpadded softmax
            scores, logits = self.loss_logits(self.dropout(h))
            if labels.shape != input_ids.shape:
                raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}, "
                                 f"got {tuple(labels.shape)}.")
            total = F.cross_entropy(scores.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
                                    reduction="sum")
            loss = total / labels.ne(IGNORE_INDEX).sum().clamp(min=1)
        return TransfoXLOutput(loss, logits, new_mems if new_mems else None,
                               tuple(states) if states is not None else None)

    # --- generation (driven by models_lib.core.generation.generate) -----------------------------

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 **kwargs: Any) -> torch.Tensor:
        """(B, S + n): the prompt, then up to max_new_tokens generated tokens. Each new token reads
        the memory (the last mem_len positions) and itself, as the model reads a stream in
        evaluation; with mem_len 0 (no memory) the whole text so far is read again at each step.
        Prompts of one length only (no padding)."""
        kwargs.setdefault("eos_token_id", self.config.eos_token_id)
        kwargs.setdefault("pad_token_id", self.config.pad_token_id)
        return generation.generate(self, input_ids, attention_mask, **kwargs)

    def start_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                         ) -> tuple[TransfoXLGenerationState, torch.Tensor]:
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("Transformer-XL generates from prompts of one length; padded prompts are not supported.")
        return TransfoXLGenerationState(None), input_ids

    def generation_step(self, state: TransfoXLGenerationState,
                        tokens: torch.Tensor) -> tuple[torch.Tensor, TransfoXLGenerationState]:
        if self.config.mem_len == 0:  # no memory to carry the context: read the whole text each step
            state.history = tokens if state.history is None else torch.cat([state.history, tokens], dim=1)
            return self(state.history).logits[:, -1], state
        out = self(tokens, mems=state.mems, use_mems=True)
        state.mems = out.mems
        return out.logits[:, -1], state

    def reorder_generation_state(self, state: TransfoXLGenerationState,
                                 index: torch.Tensor) -> TransfoXLGenerationState:
        if state.mems is not None:
            state.mems = [m.index_select(0, index) for m in state.mems]
        if state.history is not None:
            state.history = state.history.index_select(0, index)
        return state


def _diagonal(T: int, M: int, device: torch.device) -> torch.Tensor:
    """(1, T, M + T) bool: each query's own key."""
    eye = torch.eye(T, dtype=torch.bool, device=device)
    if M:
        eye = torch.cat([eye.new_zeros(T, M), eye], dim=1)
    return eye[None]
