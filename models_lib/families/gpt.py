"""GPT: a decoder-only transformer language model (Radford et al. 2018, GPT-1; 2019, GPT-2).

    cfg = GPTConfig.from_preset("gpt-tiny", vocab_size=8000, pad_token_id=0, eos_token_id=3)
    model = GPTLMHeadModel(cfg)
    out = model(input_ids, attention_mask=None, labels=input_ids)   # CausalLMOutput(loss, logits)
    ids = model.generate(prompt_ids, attention_mask, max_new_tokens=20)  # prompt, then new tokens

The stack is the encoder family's `Encoder` run with a causal mask (and a key/value cache when
generating): `norm_placement` "post" gives GPT-1's blocks (LayerNorm after each residual
addition, no final norm), "pre" GPT-2's (LayerNorm at each sublayer's input, plus a final
LayerNorm after the last block). What is GPT's own is small and lives here: the embeddings
(word + learned absolute position, then dropout; no LayerNorm, no token types) and the output
layer, tied to the word embeddings by default.

Padding: prompts of different lengths are padded on the LEFT (so every row's last token is
real and generation continues from it), with an attention mask (B, T) of 1/0. Position ids then
count the real tokens (attention_mask.cumsum - 1, what transformers does when generating), so a
padded prompt gets the same positions, and the same outputs, as the unpadded one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import generation, vocab
from models_lib.core.config import PresetConfig, block_params, check_sizes
from models_lib.core.encoder import Encoder, init_weights
from models_lib.core.layers import ACTIVATIONS, KVCache, build_attention_mask, new_caches
from models_lib.families.pretraining import IGNORE_INDEX

__all__ = ["GPT_PRESETS", "CausalLMOutput", "GPTConfig", "GPTLMHeadModel"]

# name -> the fields that differ from GPTConfig's defaults (which are GPT-2 small's).
# gpt2-small: Radford et al. 2019 (L12 H768 A12, 1024 positions, byte-level BPE of 50257).
# gpt-mini / gpt-tiny: the same shape scaled down (the BERT family's mini/tiny sizes) for
# training in this app. All are pre-norm (GPT-2); norm_placement="post" gives GPT-1's blocks.
GPT_PRESETS: dict[str, dict[str, Any]] = {
    "gpt-tiny": dict(num_layers=2, hidden_size=128, num_heads=2, max_position_embeddings=256),
    "gpt-mini": dict(num_layers=4, hidden_size=256, num_heads=4, max_position_embeddings=512),
    "gpt2-small": dict(num_layers=12, hidden_size=768, num_heads=12, max_position_embeddings=1024,
                       vocab_size=50257),
}


@dataclass
class GPTConfig(PresetConfig):
    config_label: ClassVar[str] = "GPT"
    presets: ClassVar[dict[str, dict[str, Any]]] = GPT_PRESETS

    family: str = "gpt"

    # Size
    vocab_size: int = 50257
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int | None = None  # None -> 4 * hidden_size
    max_position_embeddings: int = 1024  # the context length

    # Blocks: "pre" = GPT-2 (LayerNorm at each sublayer's input + a final one), "post" = GPT-1
    norm_placement: str = "pre"
    hidden_act: str = "gelu_new"  # GPT-2's tanh approximation of GELU

    # Regularisation and numerics (GPT-2: 0.1 everywhere)
    hidden_dropout: float = 0.1  # on each residual branch's output
    attention_dropout: float = 0.1  # on the attention weights
    embedding_dropout: float = 0.1  # on word + position embeddings
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02

    # Tokens (None = the tokenizer has no such token)
    pad_token_id: int | None = None  # only fills finished rows when generating; GPT has no padding row
    eos_token_id: int | None = None  # ends generation; separates packed documents
    tie_word_embeddings: bool = True  # the output layer is the word embedding table

    # What the encoder stack reads that GPT never changes (not a field: always unshared).
    share_layers = "none"

    def __post_init__(self) -> None:
        if self.family != "gpt":
            raise ValueError(f"A GPTConfig is for the GPT family, got family {self.family!r}.")
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        check_sizes(self, ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                           "max_position_embeddings"))
        if self.hidden_size % self.num_heads:
            raise ValueError(f"The hidden size ({self.hidden_size}) must be divisible by the number of "
                             f"attention heads ({self.num_heads}).")
        if self.norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be 'pre' (GPT-2) or 'post' (GPT-1), got {self.norm_placement!r}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {self.hidden_act!r}; choose one of {', '.join(sorted(ACTIVATIONS))}.")
        for name in ("hidden_dropout", "attention_dropout", "embedding_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value!r}.")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ValueError("layer_norm_eps and initializer_range must be positive.")
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < self.vocab_size):
                raise ValueError(f"{name} {value!r} is outside the vocabulary (size {self.vocab_size}).")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}.")

    @property
    def label(self) -> str:
        return "GPT-2" if self.norm_placement == "pre" else "GPT-1"

    @property
    def max_positions(self) -> int:
        """The longest sequence (prompt and generated tokens together) the model reads."""
        return self.max_position_embeddings

    # Size
    def count_params(self, embeddings: bool = False) -> int:
        """The causal stack's blocks, plus GPT-2's final LayerNorm; with `embeddings`, also the
        word and position tables and an untied output layer: every parameter of GPTLMHeadModel."""
        H, V = self.hidden_size, self.padded_vocab_size  # the tables' rows as allocated (models_lib.core.vocab)
        n = self.num_layers * block_params(H, self.intermediate_size)
        if self.norm_placement == "pre":
            n += 2 * H
        if embeddings:
            n += (V + self.max_position_embeddings) * H + (0 if self.tie_word_embeddings else V * H)
        return n

    def shape(self) -> dict[str, Any]:
        """What the launch form shows of a preset: layers, hidden size, heads, FFN size, a label."""
        L, H, A = self.num_layers, self.hidden_size, self.num_heads
        return {"layers": L, "hidden": H, "heads": A, "ffn": self.intermediate_size, "label": f"L{L} H{H} A{A}"}

    # Serialisation


@dataclass
class CausalLMOutput:
    loss: torch.Tensor | None  # 0-dim mean cross-entropy of token t+1 predicted at t, or None without labels
    logits: torch.Tensor  # (B, T, V), V = config.vocab_size (the padding's columns cut off)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 tensors (B, T, H) when asked for


@dataclass
class GPTGenerationState:
    """What generation.generate carries between steps for GPT."""

    caches: list[KVCache]  # one per layer: the keys/values of every position fed so far
    mask: torch.Tensor | None  # (B, S) 1/0 over those positions; None when nothing is padded
    length: int = 0  # positions fed so far (S)


class GPTEmbeddings(nn.Module):
    """Word + learned absolute position embeddings, then dropout: (B, T) -> (B, T, H).

    No padding row: GPT-2's tokenizer pads (if at all) with its end-of-text token, whose
    embedding must stay trainable; padded positions are hidden by the attention mask instead.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.max_positions = config.max_position_embeddings
        self.word = vocab.VocabEmbedding(config.vocab_size, config.hidden_size)  # padded_vocab_size rows
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.dropout = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, *, below: int | None = None) -> torch.Tensor:
        """position_ids: (T,) or (B, T); below: see check_positions."""
        check_positions(position_ids, self.max_positions, below)
        return self.dropout(self.word(input_ids) + self.position(position_ids))  # (B, T, H)


def check_positions(position_ids: torch.Tensor, max_positions: int, below: int | None = None) -> None:
    """A sentence, not an index error, for positions past the model's table. `below`: a bound the
    caller knows the positions keep under (the length it numbered them from), checked on the host
    instead of reading their maximum back from the device (a sync in every step)."""
    if below is not None:
        if below > max_positions:
            raise ValueError(f"the sequence has {below} tokens, but this model reads at most {max_positions}.")
    elif position_ids.numel() and int(position_ids.max()) >= max_positions:
        raise ValueError(f"the sequence reaches position {int(position_ids.max()) + 1}, but this model "
                         f"reads at most {max_positions} tokens.")


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) 1/0 -> (B, S) position ids counting the real tokens from 0; padding gets 0 (its
    output is never used). With left padding each row starts at position 0 at its first real
    token, exactly as if it had not been padded."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class GPTLMHeadModel(nn.Module):
    """Embeddings -> causal transformer stack (models_lib.core.encoder.Encoder) -> logits over the vocabulary.

    forward(input_ids (B, T), attention_mask (B, T) 1/0 = None, labels (B, T) = None,
            position_ids (B, T) or (T,) = None) -> CausalLMOutput
    Labels are aligned with input_ids (labels = input_ids is the usual choice) and shifted inside:
    the logits at t predict labels[t + 1]; -100 marks labels that are not predicted.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"GPTLMHeadModel needs a GPTConfig, not a {type(config).__name__}.")
        self.config = config
        self.embeddings = GPTEmbeddings(config)
        self.encoder = Encoder(config)
        # Untied: a separate output matrix. Tied: the word embedding table itself, read on every
        # call, so the tie survives loading, moving and casting, and is stored once.
        self.lm_head = None if config.tie_word_embeddings else vocab.VocabLinear(config.hidden_size, config.vocab_size,
                                                                                  bias=False)
        self.apply(lambda m: init_weights(m, config.initializer_range))
        if config.norm_placement == "pre":
            # GPT-2 (Radford et al. 2019, section 2.3): the weights of the layers that write into
            # the residual stream are scaled by 1/sqrt(N), N = 2 per block (attention and FFN),
            # so the stream's variance does not grow with depth. GPT-1 used plain N(0, 0.02).
            std = config.initializer_range / math.sqrt(2 * config.num_layers)
            for block in self.encoder.layers:
                nn.init.normal_(block.attention.out.weight, mean=0.0, std=std)
                nn.init.normal_(block.ffn.down.weight, mean=0.0, std=std)

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    @property
    def word_embeddings(self) -> torch.Tensor:
        return self.embeddings.word.weight  # (V_pad, H): padded_vocab_size rows, those past vocab_size zero

    @property
    def output_embeddings(self) -> torch.Tensor:
        """(V_pad, H): the output layer's weight (the word embeddings when tied), padded."""
        return self.word_embeddings if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) final hidden states -> (..., V): the product runs over the padded table (an
        aligned matmul), the padding's columns are cut off, so no loss or sampler sees them."""
        return vocab.logits(hidden, self.output_embeddings, None, self.config.vocab_size)

    def loss_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (..., V_pad) with the padding columns at -inf, for the model's own loss; the
        logits (..., V)): models_lib.core.vocab.loss_logits."""
        return vocab.loss_logits(hidden, self.output_embeddings, None, self.config.vocab_size)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               position_ids: torch.Tensor | None = None,
               output_hidden_states: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Final hidden states (B, T, H) (after the final norm for GPT-2); with output_hidden_states,
        L + 1 tensors: the embedding output and each layer's output (the last is the final one).
        attention_mask (B, T) 1/0 padding (left padding for generation)."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be a (batch, length) tensor, got shape {tuple(input_ids.shape)}.")
        T = input_ids.shape[1]
        numbered_here = position_ids is None  # then every position is below T
        if attention_mask is not None and attention_mask.dim() == 2:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, but input_ids has "
                                 f"{tuple(input_ids.shape)}.")
            if position_ids is None:
                position_ids = positions_from_mask(attention_mask)  # (B, T)
            if bool(attention_mask.all()):
                attention_mask = None  # nothing padded: attention keeps its causal fast path
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)  # (T,)
        mask = build_attention_mask(attention_mask)
        if attention_mask is not None and attention_mask.dim() == 2:
            # A padding query would see no key at all (padding comes first): let it see itself, so
            # that its (unused) row is well defined and attention maps stay causal.
            real = attention_mask.bool()
            mask = mask | (torch.eye(T, dtype=torch.bool, device=real.device) & ~real[:, None, :, None])  # (B,1,T,T)
        x = self.embeddings(input_ids, position_ids, below=T if numbered_here else None)  # (B, T, H)
        return self.encoder(x, mask, output_hidden_states, causal=True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, position_ids: torch.Tensor | None = None, *,
                output_hidden_states: bool = False) -> CausalLMOutput:
        states = self.encode(input_ids, attention_mask, position_ids, output_hidden_states)
        hidden = states[-1] if output_hidden_states else states
        loss = None
        if labels is None:
            logits = self.logits(hidden)  # (B, T, V)
        else:
            if labels.shape != input_ids.shape:
                raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}, "
                                 f"got {tuple(labels.shape)}.")
            # The loss reads the padded scores (padding columns at -inf): the unpadded softmax.
            scores, logits = self.loss_logits(hidden)  # (B, T, V_pad), (B, T, V)
            # The logits at t predict the token at t + 1. Shifting the labels left (nothing to
            # predict after the last token) rather than slicing the logits keeps the (B*T, V)
            # logits a view: no copy of the largest tensor of the step, forward or backward.
            # Sum over the predicted tokens / their count (at least 1): the mean, without a device
            # sync to ask whether any token is predicted; with none it is a graph-connected zero.
            targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)  # (B, T)
            total = F.cross_entropy(scores.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                                    reduction="sum")
            loss = total / targets.ne(IGNORE_INDEX).sum().clamp(min=1)
        return CausalLMOutput(loss, logits, states if output_hidden_states else None)

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """The parameters from the bottom up, each once: [embeddings, layer 0, ..., layer L-1, head]
        (fine-tuning's layer-wise lr decay, freezing and gradual unfreezing). The head holds the
        final LayerNorm (GPT-2) and an untied output layer; a tied one is the embedding table,
        which stays in the embeddings group."""
        groups: list[list[nn.Parameter]] = []
        seen: set[int] = set()
        for params in (list(self.embeddings.parameters()), *(list(layer.parameters()) for layer in self.encoder.layers)):
            groups.append([p for p in params if id(p) not in seen])
            seen.update(id(p) for p in params)
        groups.append([p for p in self.parameters() if id(p) not in seen])
        return groups

    # --- generation (driven by models_lib.core.generation.generate) -----------------------------

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 **kwargs: Any) -> torch.Tensor:
        """(B, S + n) token ids: the prompt, then up to max_new_tokens generated ones (n is fewer
        when every row produced eos_token_id, or when the model's positions run out).

        Options (see generation.generate): max_new_tokens=20, do_sample=False, num_beams=1,
        temperature=1.0, top_k=0, top_p=1.0, eos_token_id, pad_token_id (both default to the
        config's), length_penalty=1.0, generator. Prompts of different lengths: left padding
        with attention_mask (B, S) 1/0.
        """
        kwargs.setdefault("eos_token_id", self.config.eos_token_id)
        kwargs.setdefault("pad_token_id", self.config.pad_token_id)
        S = input_ids.shape[-1]
        room = self.max_positions - S
        if room < 1:
            raise ValueError(f"the prompt has {S} tokens; this model reads at most {self.max_positions}, "
                             f"which leaves no room to generate.")
        kwargs["max_new_tokens"] = min(kwargs.get("max_new_tokens", 20), room)
        return generation.generate(self, input_ids, attention_mask, **kwargs)

    def start_generation(self, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor | None = None) -> tuple[GPTGenerationState, torch.Tensor]:
        """Nothing to precompute: the prompt itself is the first thing fed (into empty caches)."""
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, but input_ids has "
                                 f"{tuple(input_ids.shape)}.")
            if not bool(attention_mask.all()):
                mask = attention_mask.long()
        return GPTGenerationState(new_caches(len(self.encoder.order)), mask), input_ids

    def generation_step(self, state: GPTGenerationState,
                        tokens: torch.Tensor) -> tuple[torch.Tensor, GPTGenerationState]:
        """Feed tokens (B, t) after the S cached positions; -> next-token logits (B, V)."""
        B, t = tokens.shape
        if state.mask is None:
            positions = torch.arange(state.length, state.length + t, device=tokens.device)  # (t,)
            keys = None
        else:
            if state.length:  # what is fed after the prompt is always real
                state.mask = torch.cat([state.mask, state.mask.new_ones(B, t)], dim=1)  # (B, S + t)
            positions = positions_from_mask(state.mask)[:, -t:]  # (B, t)
            keys = build_attention_mask(state.mask)  # (B, 1, 1, S + t): padded keys hidden
        x = self.embeddings(tokens, positions)  # (B, t, H)
        hidden = self.encoder(x, keys, causal=True, caches=state.caches)  # (B, t, H)
        state.length += t
        return self.logits(hidden[:, -1]), state  # (B, V)

    def reorder_generation_state(self, state: GPTGenerationState, index: torch.Tensor) -> GPTGenerationState:
        for cache in state.caches:
            cache.reorder(index)
        if state.mask is not None:
            state.mask = state.mask.index_select(0, index)
        return state

    def merge_generation_state(self, state: GPTGenerationState, other: GPTGenerationState) -> GPTGenerationState:
        """The rows of `other` (prompts started apart) after the rows of `state`, in one state: the
        shorter side's keys and values are left-padded to the longer's positions, the padding hidden
        by the mask, so every row goes on as it would alone (a server adds requests to a running batch)."""
        S = max(state.length, other.length)

        def padded_mask(st: GPTGenerationState, rows: int) -> torch.Tensor:
            mask = st.mask if st.mask is not None else torch.ones(rows, st.length, dtype=torch.long,
                                                                  device=st.caches[0].k.device)
            return F.pad(mask, (S - st.length, 0))

        rows_a, rows_b = state.caches[0].k.shape[0], other.caches[0].k.shape[0]
        mask = torch.cat([padded_mask(state, rows_a), padded_mask(other, rows_b)])
        for a, b in zip(state.caches, other.caches):
            a.k = torch.cat([F.pad(a.k, (0, 0, S - a.length, 0)), F.pad(b.k, (0, 0, S - b.length, 0))])
            a.v = torch.cat([F.pad(a.v, (0, 0, S - a.v.shape[2], 0)), F.pad(b.v, (0, 0, S - b.v.shape[2], 0))])
        state.mask, state.length = mask, S
        return self.compact_generation_state(state)

    def compact_generation_state(self, state: GPTGenerationState) -> GPTGenerationState:
        """Drop the leading positions that are padding in every row (left by rows that have left the
        batch), so a batch that rows keep joining and leaving does not grow without bound."""
        if state.mask is None:
            return state
        real = state.mask.any(0).nonzero()
        first = int(real[0]) if len(real) else state.length
        if first:
            for cache in state.caches:
                cache.k, cache.v = cache.k[:, :, first:], cache.v[:, :, first:]
            state.mask, state.length = state.mask[:, first:], state.length - first
        if bool(state.mask.all()):
            state.mask = None
        return state
