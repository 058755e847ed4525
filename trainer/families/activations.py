"""The activation memory a transformer stack keeps for the backward pass: the estimate every
family starts from (Family.activation_bytes; trainer.catalog.size checks a run's memory with it).

A batch is anything with `size`, `length` and `recompute` (trainer.catalog.size.Batch). Counted
in fp32 (mixed precision keeps some in half, where the estimate is then high) and without the
allocator's own overhead.
"""
from __future__ import annotations

from typing import Any

# Per layer:
ACTIVATION_BYTES = 4
WIDTH_TENSORS = 10  # per token, as wide as the model: input, q, k, v, context, projection, 2 norms, 2 dropouts
INNER_TENSORS = 2   # per token, as wide as the feed-forward: before and after its nonlinearity
SCORE_TENSORS = 2   # per head and pair of positions: the softmax kept for backward and its dropout mask
# A family whose layer is more than one encoder block says so on its Family (activation_factor,
# or an activation_bytes hook of its own: T5's decoder, ELECTRA's generator, ELMo's LSTMs).


def transformer_activation_bytes(model_cfg: Any, batch: Any, *, layers: float | None = None,
                                 factor: float = 1.0) -> int:
    """A transformer stack's activations: batch x length x (width tensors + feed-forward tensors)
    x layers, plus batch x heads x length x keys x layers for the attention scores. `layers`:
    blocks' worth of layers (default the config's num_layers), each keeping `factor` blocks."""
    return int(ACTIVATION_BYTES * stack_elements(model_cfg, batch, layers=layers, factor=factor))


def stack_elements(model_cfg: Any, batch: Any, *, layers: float | None = None, factor: float = 1.0) -> float:
    """Elements a stack of `layers` blocks keeps for the backward pass: every block's (times
    `factor`), or with activation checkpointing each layer's input and one block's live."""
    per_layer = block_elements(model_cfg, batch)
    layers = float(model_cfg.num_layers) if layers is None else layers
    if batch.recompute:  # each layer's input is kept; one layer's activations live at a time
        return batch.size * batch.length * width(model_cfg) * layers + per_layer
    return per_layer * layers * factor


def width(model_cfg: Any) -> int:
    """The model's width: hidden_size, or T5's d_model."""
    return int(getattr(model_cfg, "hidden_size", None) or getattr(model_cfg, "d_model"))


def block_elements(model_cfg: Any, batch: Any) -> int:
    """Elements one transformer block keeps for ``batch``: its token tensors and its attention scores."""
    hidden = width(model_cfg)
    inner = int(getattr(model_cfg, "intermediate_size", None) or getattr(model_cfg, "d_ff", None) or 4 * hidden)
    heads = int(getattr(model_cfg, "num_heads", 1) or 1)
    keys = batch.length + int(getattr(model_cfg, "mem_len", 0) or 0)  # Transformer-XL, XLNet: the memory too
    tokens = batch.size * batch.length
    return tokens * (WIDTH_TENSORS * hidden + INNER_TENSORS * inner) + SCORE_TENSORS * batch.size * heads * batch.length * keys
