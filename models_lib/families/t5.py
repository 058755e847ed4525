"""T5 (Raffel et al. 2020), versions 1.0 and 1.1: an encoder-decoder with relative position bias.

    cfg = T5Config.from_preset("t5-tiny", vocab_size=8000, pad_token_id=0, eos_token_id=3)
    model = T5ForConditionalGeneration(cfg)
    out = model(input_ids, attention_mask, labels=labels)   # Seq2SeqLMOutput(loss, logits, encoder_hidden_states)
    ids = model.generate(input_ids, attention_mask, max_new_tokens=20)   # (B, 1 + n), start token first

What makes it T5 (each item a config field or a fixed choice below):
- pre-norm blocks with RMSNorm (no mean subtraction, no bias) and a final norm per stack;
  no biases in any linear layer;
- relative position bias instead of position embeddings: a (num_buckets, num_heads) table
  per stack, looked up by the bucket of (key position - query position) and added to the
  attention scores of every layer of that stack (computed once per forward pass); buckets
  split by sign in the encoder (bidirectional), only the past in the decoder (causal);
  cross-attention has none;
- no 1/sqrt(d_kv) scaling of the scores: the initialisation of the query projection
  (std (d_model * d_kv)^-0.5) carries it instead;
- feed-forward ReLU (v1.0) or gated-GELU (v1.1), dropout inside it, after every sublayer,
  on the embeddings and on the attention weights;
- v1.0 ties the output softmax to the shared embedding table and scales the decoder output
  by d_model^-0.5 first; v1.1 has a separate lm_head and no scaling.
Token ids: the decoder starts from decoder_start_token_id (T5: the pad token); labels are
shifted right into the decoder inputs, -100 (ignored in the loss) becoming the pad token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import vocab
from models_lib.core.config import PresetConfig, positive_int
from models_lib.core.generation import generate as _generate
from models_lib.core.layers import ACTIVATIONS, Attention, FeedForward, KVCache, RMSNorm, build_attention_mask, new_caches
from models_lib.core.recompute import RecomputedStack

__all__ = ["T5_PRESETS", "T5Config", "T5ForConditionalGeneration", "T5GenerationState", "Seq2SeqLMOutput",
           "relative_position_bucket", "shift_right"]

VERSIONS = ("1.0", "1.1")

# Sizes. t5-small and t5-base are v1.0's (Raffel et al. 2020, "Exploring the Limits of Transfer
# Learning with a Unified Text-to-Text Transformer", section 3.1.1 and Table 14: Small has
# d_model 512, d_ff 2048, d_kv 64, 8 heads, 6 + 6 layers; Base 768/3072/64, 12 heads, 12 + 12).
# t5-tiny and t5-mini are scaled down for this app. v1.1 (the T5 repository's released_checkpoints
# notes) also changes the sizes (e.g. its Small has d_model 512, d_ff 1024, 8 + 8 layers, 6 heads);
# version="1.1" here only switches the FFN to gated-GELU and unties the softmax, sizes stay as below.
T5_PRESETS: dict[str, dict[str, Any]] = {
    "t5-tiny": dict(d_model=64, d_ff=256, d_kv=16, num_heads=4, num_layers=2, num_decoder_layers=2),
    "t5-mini": dict(d_model=256, d_ff=1024, d_kv=32, num_heads=8, num_layers=4, num_decoder_layers=4),
    "t5-small": dict(d_model=512, d_ff=2048, d_kv=64, num_heads=8, num_layers=6, num_decoder_layers=6),
    "t5-base": dict(d_model=768, d_ff=3072, d_kv=64, num_heads=12, num_layers=12, num_decoder_layers=12),
}


def _token_id(name: str, value: Any, vocab_size: int, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab_size:
        raise ValueError(f"{name} {value!r} is not a token id of the vocabulary (size {vocab_size}).")


def parse_feed_forward_proj(value: str) -> tuple[str, bool]:
    """(activation name in layers.ACTIVATIONS, gated) for transformers' feed_forward_proj:
    "relu", "gelu", ... or "gated-" + one of them. "gated-gelu" means the tanh GELU
    (gelu_new), as in the released v1.1 checkpoints and transformers."""
    gated = value.startswith("gated-")
    act = value.removeprefix("gated-")
    if value == "gated-gelu":
        act = "gelu_new"
    if act not in ACTIVATIONS:
        raise ValueError(f"feed_forward_proj must be an activation ({', '.join(sorted(ACTIVATIONS))}) or "
                         f"'gated-' followed by one, e.g. 'relu' (T5 v1.0) or 'gated-gelu' (v1.1); got {value!r}.")
    return act, gated


@dataclass
class T5Config(PresetConfig):
    """Field names are transformers' T5Config names where it has them, so config.json maps 1:1."""
    config_label: ClassVar[str] = "T5"
    presets: ClassVar[dict[str, dict[str, Any]]] = T5_PRESETS


    family: str = "t5"
    version: str = "1.0"  # "1.0" | "1.1": the defaults of feed_forward_proj and tie_word_embeddings

    # Size
    vocab_size: int = 32128  # SentencePiece 32k + 100 sentinels, padded to a multiple of 128
    d_model: int = 512
    d_kv: int = 64  # head size; num_heads * d_kv need not equal d_model
    d_ff: int = 2048
    num_layers: int = 6  # encoder layers
    num_decoder_layers: int | None = None  # None -> num_layers
    num_heads: int = 8

    # Relative position bias
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    # Regularisation, numerics, initialisation
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: str | None = None  # None -> "relu" (1.0) or "gated-gelu" (1.1)
    tie_word_embeddings: bool | None = None  # None -> True (1.0: tied, output scaled) or False (1.1)
    initializer_factor: float = 1.0  # multiplies every initialisation std (1.0 = T5's)

    # Tokens
    pad_token_id: int = 0
    eos_token_id: int | None = 1
    decoder_start_token_id: int | None = None  # None -> pad_token_id (T5's choice)

    def __post_init__(self) -> None:
        if self.family != "t5":
            raise ValueError(f"A T5Config is for the T5 family, got family {self.family!r}.")
        if self.version not in VERSIONS:
            raise ValueError(f"T5 version must be '1.0' or '1.1', got {self.version!r}.")
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        if self.feed_forward_proj is None:
            self.feed_forward_proj = "relu" if self.version == "1.0" else "gated-gelu"
        if self.tie_word_embeddings is None:
            self.tie_word_embeddings = self.version == "1.0"
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                     "relative_attention_num_buckets", "relative_attention_max_distance"):
            positive_int(name, getattr(self, name))
        if self.relative_attention_num_buckets < 4:
            raise ValueError("relative_attention_num_buckets must be at least 4 (half of them, per direction in "
                             f"the encoder, count exact distances), got {self.relative_attention_num_buckets}.")
        if self.relative_attention_max_distance <= self.relative_attention_num_buckets // 2:
            raise ValueError(f"relative_attention_max_distance ({self.relative_attention_max_distance}) must exceed "
                             f"half the number of buckets ({self.relative_attention_num_buckets // 2}): the buckets "
                             "beyond the exact ones are spaced logarithmically up to that distance.")
        if not isinstance(self.dropout_rate, (int, float)) or not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be between 0 and 1, got {self.dropout_rate!r}.")
        for name in ("layer_norm_epsilon", "initializer_factor"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
        if not isinstance(self.feed_forward_proj, str):
            raise ValueError(f"feed_forward_proj must be a string such as 'relu' or 'gated-gelu', "
                             f"got {self.feed_forward_proj!r}.")
        parse_feed_forward_proj(self.feed_forward_proj)
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}.")
        _token_id("pad_token_id", self.pad_token_id, self.vocab_size, optional=False)
        _token_id("eos_token_id", self.eos_token_id, self.vocab_size, optional=True)
        _token_id("decoder_start_token_id", self.decoder_start_token_id, self.vocab_size, optional=False)

    @property
    def label(self) -> str:
        return "T5"

    @property
    def max_positions(self) -> int:
        """Relative positions set no hard limit (distances past max_distance share a bucket); the
        trainer reads this as the longest input it may feed."""
        return 10**6

    @property
    def activation(self) -> str:
        return parse_feed_forward_proj(self.feed_forward_proj)[0]

    @property
    def is_gated(self) -> bool:
        return parse_feed_forward_proj(self.feed_forward_proj)[1]

    # Size
    def count_params(self, embeddings: bool = False) -> int:
        """Both stacks without the vocabulary's tables: no biases; attention projections H x
        (heads * d_kv) (the decoder's cross-attention too); a gated FFN (v1.1) has two input
        matrices; RMSNorms have weights only; each stack has a relative-bias table (buckets x
        heads) and a final norm. With `embeddings`, also the shared embedding table and an
        untied lm_head: every parameter of T5ForConditionalGeneration."""
        H, A = self.d_model, self.num_heads
        inner = A * self.d_kv
        attention = 4 * H * inner
        ffn = (3 if self.is_gated else 2) * H * self.d_ff
        encoder = self.num_layers * (attention + ffn + 2 * H)
        decoder = self.num_decoder_layers * (2 * attention + ffn + 3 * H)
        stacks = 2 * (self.relative_attention_num_buckets * A + H)
        n = encoder + decoder + stacks
        if embeddings:  # the tables' rows as allocated: padded_vocab_size (models_lib.core.vocab)
            n += self.padded_vocab_size * H * (1 if self.tie_word_embeddings else 2)
        return n

    def shape(self) -> dict[str, Any]:
        """What the launch form shows of a preset: encoder and decoder layers, width, heads, FFN, a label."""
        Le, Ld, H, A = self.num_layers, self.num_decoder_layers, self.d_model, self.num_heads
        return {"layers": Le, "decoder_layers": Ld, "hidden": H, "heads": A, "ffn": self.d_ff,
                "label": f"L{Le}+{Ld} H{H} A{A}"}

    # Serialisation


@dataclass
class Seq2SeqLMOutput:
    loss: torch.Tensor | None  # 0-dim mean cross-entropy over labels != -100; None without labels
    logits: torch.Tensor  # (B, L, V), V = config.vocab_size (the padding's columns cut off)
    encoder_hidden_states: torch.Tensor  # (B, S, d_model), the encoder's final (normalised) states


@dataclass
class T5GenerationState:
    """What incremental decoding carries from step to step (see models_lib.core.generation)."""

    encoder_states: torch.Tensor  # (B, S, d_model)
    encoder_mask: torch.Tensor | None  # bool (B, 1, 1, S), True = a real token
    self_caches: list[KVCache]  # one per decoder layer: the decoder's keys/values so far
    cross_caches: list[KVCache]  # one per decoder layer: the encoder states' keys/values, filled at step 1


# ---------------------------------------------------------------------------------------------
# Relative position bias


def relative_position_bucket(relative: torch.Tensor, *, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """Bucket of each relative position (key position - query position), long, same shape.

    Mesh TensorFlow's scheme, which T5 defines: with `bidirectional` the buckets are split in
    two halves, the upper one for keys after the query; otherwise keys after the query (which
    a causal decoder masks anyway) fall into bucket 0 with distance 0. Within a half, the first
    half of the buckets are the exact distances 0, 1, ...; the rest cover larger distances on a
    log scale up to max_distance, beyond which everything shares the last bucket.
    """
    if bidirectional:
        num_buckets //= 2
        offset = (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        offset = torch.zeros_like(relative)
        distance = (-relative).clamp(min=0)
    exact = num_buckets // 2
    # Distances below `exact` are replaced by the `where` below; clamping to 1 keeps log finite.
    log_scaled = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_scaled * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


# ---------------------------------------------------------------------------------------------
# Blocks and stacks


class T5Block(nn.Module):
    """Pre-norm: x + dropout(sublayer(norm(x))) for self-attention, (decoder) cross-attention,
    and the feed-forward network."""

    def __init__(self, config: T5Config, *, decoder: bool):
        super().__init__()
        H, N, D, p = config.d_model, config.num_heads, config.d_kv, config.dropout_rate
        eps = config.layer_norm_epsilon
        self.attn_norm = RMSNorm(H, eps)
        self.attention = Attention(H, N, head_size=D, dropout=p, bias=False, scaled=False)
        if decoder:
            self.cross_norm = RMSNorm(H, eps)
            self.cross_attention = Attention(H, N, head_size=D, dropout=p, bias=False, scaled=False, cross=True)
        else:
            self.cross_norm = self.cross_attention = None
        self.ffn_norm = RMSNorm(H, eps)
        self.ffn = FeedForward(H, config.d_ff, activation=config.activation, bias=False, gated=config.is_gated,
                               dropout=p)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, position_bias: torch.Tensor, *,
                causal: bool = False, context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, cross_cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attn_norm(x), mask, bias=position_bias, causal=causal, cache=cache))
        if self.cross_attention is not None:
            x = x + self.dropout(self.cross_attention(self.cross_norm(x), context_mask, context=context,
                                                      cache=cross_cache))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))  # (B, T, H)


class T5Stack(RecomputedStack):
    """The encoder (bidirectional) or the decoder (causal, with cross-attention): embeddings in,
    final normalised states out. One relative-position table for the whole stack. Its blocks may
    recompute their activations in the backward pass (models_lib.core.recompute)."""

    def __init__(self, config: T5Config, *, decoder: bool):
        super().__init__()
        self.config, self.is_decoder = config, decoder
        layers = config.num_decoder_layers if decoder else config.num_layers
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_heads)
        self.layers = nn.ModuleList(T5Block(config, decoder=decoder) for _ in range(layers))
        self.final_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def position_bias(self, query_len: int, key_len: int, past: int = 0) -> torch.Tensor:
        """(1, N, T, S) additive scores; the queries are positions past .. past + T - 1 (past =
        tokens already in the cache), the keys 0 .. S - 1."""
        device = self.relative_attention_bias.weight.device
        queries = torch.arange(past, past + query_len, device=device)[:, None]
        keys = torch.arange(key_len, device=device)[None, :]
        buckets = relative_position_bucket(keys - queries, bidirectional=not self.is_decoder,
                                           num_buckets=self.config.relative_attention_num_buckets,
                                           max_distance=self.config.relative_attention_max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)  # (T, S, N) -> (1, N, T, S)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, context: torch.Tensor | None = None,
                context_mask: torch.Tensor | None = None, caches: list[KVCache] | None = None,
                cross_caches: list[KVCache] | None = None) -> torch.Tensor:
        """x (B, T, H) embedded tokens; mask bool broadcastable to (B, 1, T, S), True = may attend
        (the decoder adds the causal part itself); context (B, S_enc, H) and context_mask
        (B, 1, 1, S_enc) for the decoder's cross-attention. -> (B, T, H)."""
        past = caches[0].length if caches else 0
        T = x.shape[1]
        bias = self.position_bias(T, past + T, past)  # once for every layer of the stack
        x = self.dropout(x)
        for i, layer in enumerate(self.layers):
            if caches is None and cross_caches is None:
                x = self.run_block(layer, x, mask, bias, causal=self.is_decoder, context=context,
                                   context_mask=context_mask)
            else:
                x = layer(x, mask, bias, causal=self.is_decoder, context=context, context_mask=context_mask,
                          cache=caches[i] if caches is not None else None,
                          cross_cache=cross_caches[i] if cross_caches is not None else None)
        return self.dropout(self.final_norm(x))


def shift_right(labels: torch.Tensor, start_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: the start token, then labels[:, :-1], with the
    ignored positions (-100) turned into padding."""
    shifted = labels.new_full(labels.shape, start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


class T5ForConditionalGeneration(nn.Module):
    """Shared embedding table, encoder stack, decoder stack, output softmax (tied or lm_head)."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.shared = vocab.VocabEmbedding(config.vocab_size, config.d_model)  # padded_vocab_size rows
        self.encoder = T5Stack(config, decoder=False)
        self.decoder = T5Stack(config, decoder=True)
        self.lm_head = None if config.tie_word_embeddings else vocab.VocabLinear(config.d_model, config.vocab_size,
                                                                                bias=False)
        self.apply(self._init_weights)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """T5's initialisation (Mesh TensorFlow's, as transformers reproduces it): normals whose
        std is the fan-in^-0.5 of each projection, except the queries, whose std also carries
        the 1/sqrt(d_kv) that the scores leave out; embeddings (and lm_head) std 1."""
        c = self.config
        f, H, D, N = c.initializer_factor, c.d_model, c.d_kv, c.num_heads
        if isinstance(module, T5ForConditionalGeneration):
            vocab.real_rows(module.shared).normal_(0.0, f)  # the padding rows stay zero
            if module.lm_head is not None:
                vocab.real_rows(module.lm_head).normal_(0.0, f)
        elif isinstance(module, T5Stack):
            module.relative_attention_bias.weight.normal_(0.0, f * H ** -0.5)
        elif isinstance(module, RMSNorm):
            module.weight.fill_(f)
        elif isinstance(module, FeedForward):
            for linear in (module.up, module.gate):
                if linear is not None:
                    linear.weight.normal_(0.0, f * H ** -0.5)
            module.down.weight.normal_(0.0, f * c.d_ff ** -0.5)
        elif isinstance(module, Attention):
            inner = N * D
            if module.cross:
                q, kv = module.q.weight, module.kv.weight
            else:
                q, kv = module.qkv.weight[:inner], module.qkv.weight[inner:]
            q.normal_(0.0, f * (H * D) ** -0.5)
            kv.normal_(0.0, f * H ** -0.5)  # keys and values
            module.out.weight.normal_(0.0, f * inner ** -0.5)

    # --- forward ------------------------------------------------------------------------------
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S) -> (B, S, d_model) final encoder states."""
        return self.encoder(self.shared(input_ids), build_attention_mask(attention_mask))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, L, H) -> (B, L, V). v1.0 (tied): rescale by d_model^-0.5 before the
        shared table, since the embeddings were initialised with std 1, not d_model^-0.5. The
        product covers the padded table; the padding's columns are cut off."""
        V = self.config.vocab_size
        if self.lm_head is None:
            return vocab.logits(hidden * self.config.d_model ** -0.5, self.shared.weight, None, V)
        return self.lm_head(hidden)  # a VocabLinear: the real vocabulary's columns

    def loss_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores (B, L, V_pad) with the padding columns at -inf, for the loss; logits (B, L, V))."""
        if self.lm_head is None:
            return vocab.loss_logits(hidden * self.config.d_model ** -0.5, self.shared.weight, None,
                                     self.config.vocab_size)
        return vocab.loss_logits(hidden, self.lm_head.weight, None, self.config.vocab_size)

    def decode(self, decoder_input_ids: torch.Tensor, encoder_states: torch.Tensor,
               encoder_mask: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None, *,
               caches: list[KVCache] | None = None, cross_caches: list[KVCache] | None = None) -> torch.Tensor:
        """Decoder states (B, L, H); encoder_mask bool (B, 1, 1, S) or None."""
        return self.decoder(self.shared(decoder_input_ids), build_attention_mask(decoder_attention_mask),
                            context=encoder_states, context_mask=encoder_mask, caches=caches,
                            cross_caches=cross_caches)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, *,
                encoder_hidden_states: torch.Tensor | None = None) -> Seq2SeqLMOutput:
        """input_ids (B, S), attention_mask (B, S) 1/0; decoder_input_ids (B, L) or, when absent,
        labels (B, L) shifted right; labels -100 are left out of the loss. Passing
        encoder_hidden_states (from `encode`) skips the encoder."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("T5 needs decoder_input_ids or labels (which are shifted right into the "
                                 "decoder inputs).")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)
        if encoder_hidden_states is None:
            encoder_hidden_states = self.encode(input_ids, attention_mask)
        hidden = self.decode(decoder_input_ids, encoder_hidden_states, build_attention_mask(attention_mask),
                             decoder_attention_mask)
        loss = None
        if labels is None:
            logits = self.logits(hidden)  # (B, L, V)
        else:  # the loss reads the padded scores (padding at -inf): the unpadded softmax
            scores, logits = self.loss_logits(hidden)
            loss = F.cross_entropy(scores.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_hidden_states=encoder_hidden_states)

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """The parameters from the bottom up, each once, for fine-tuning's layer-wise lr decay,
        freezing and gradual unfreezing: [embeddings, encoder layer 0, ..., encoder layer L-1,
        decoder layer 0, ..., decoder layer L_dec-1, head]. The decoder reads the encoder's top,
        so it counts as above it. The embeddings group holds the shared table (the tied output
        layer too) and both stacks' relative position tables; the head holds the two final
        RMSNorms and an untied lm_head."""
        bottom = [self.shared.weight, self.encoder.relative_attention_bias.weight,
                  self.decoder.relative_attention_bias.weight]
        groups: list[list[nn.Parameter]] = []
        seen: set[int] = set()
        layers = (*self.encoder.layers, *self.decoder.layers)
        for params in (bottom, *(list(layer.parameters()) for layer in layers)):
            groups.append([p for p in params if id(p) not in seen])
            seen.update(id(p) for p in params)
        groups.append([p for p in self.parameters() if id(p) not in seen])
        return groups

    # --- generation (driven by models_lib.core.generation.generate) -------------------------------
    def start_generation(self, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor | None = None) -> tuple[T5GenerationState, torch.Tensor]:
        """Run the encoder once; decoding starts from the decoder start token (B, 1)."""
        n = self.config.num_decoder_layers
        state = T5GenerationState(self.encode(input_ids, attention_mask), build_attention_mask(attention_mask),
                                  new_caches(n), new_caches(n))
        start = input_ids.new_full((input_ids.shape[0], 1), self.config.decoder_start_token_id)
        return state, start

    def generation_step(self, state: T5GenerationState,
                        tokens: torch.Tensor) -> tuple[torch.Tensor, T5GenerationState]:
        """Feed tokens (B, t) after the cached ones; next-token logits (B, V). The position bias
        covers only the new query positions (offset by the cache length)."""
        hidden = self.decode(tokens, state.encoder_states, state.encoder_mask, caches=state.self_caches,
                             cross_caches=state.cross_caches)
        return self.logits(hidden[:, -1:])[:, 0], state

    def reorder_generation_state(self, state: T5GenerationState, index: torch.Tensor) -> T5GenerationState:
        for cache in (*state.self_caches, *state.cross_caches):
            cache.reorder(index)
        mask = state.encoder_mask
        if mask is not None:
            mask = mask.index_select(0, index)
        return T5GenerationState(state.encoder_states.index_select(0, index), mask, state.self_caches,
                                 state.cross_caches)

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 max_new_tokens: int = 20, do_sample: bool = False, num_beams: int = 1, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, eos_token_id: int | None = None,
                 pad_token_id: int | None = None, length_penalty: float = 1.0,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, 1 + n) token ids: the decoder start token, then up to max_new_tokens generated ones
        (rows that finished with eos are padded), as transformers returns them."""
        return _generate(self, input_ids, attention_mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                         num_beams=num_beams, temperature=temperature, top_k=top_k, top_p=top_p,
                         eos_token_id=self.config.eos_token_id if eos_token_id is None else eos_token_id,
                         pad_token_id=self.config.pad_token_id if pad_token_id is None else pad_token_id,
                         length_penalty=length_penalty, generator=generator)
