"""Bottleneck adapters (Houlsby et al. 2019; the T5 study's adapter layers, Raffel et al. 2020, 3.5.1):
after each attention and each feed-forward sublayer, h -> h + up(relu(down(h))), down H -> d and
up d -> H. The up-projection starts at zero, so a model with fresh adapters computes exactly what
it did without them; training then moves it away from the identity.

    names = attach(model, size=64)          # an adapter after every attention and feed-forward sublayer
    adapter_size(model)                     # 64 (0: none)
    trained = adapter_parameters(model) + norm_parameters(model)   # what trains beside the head

Placement (Houlsby): an adapter reads the sublayer's output (after its output projection) and its
result goes on to the block's dropout, residual addition and layer norm, which the block does as
before. It is a child `adapter` of the Attention or FeedForward module (models_lib.core.layers) it
follows, added by a forward hook, so every family built from those modules takes adapters without
changes to its code: the encoders (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, SpanBERT, TinyBERT,
UniLM), GPT, and T5's encoder and decoder (self- and cross-attention). A sublayer several layers
share (ALBERT) has one adapter, shared as its weights are. Adapters are not linear, so they cannot
be merged into the model's weights: a checkpoint keeps them (models_lib.checkpoint records their
size in model_config.json and attaches them again when it loads).
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.layers import Attention, FeedForward, RMSNorm

INIT_STD = 1e-2  # the down-projection's initial spread (Houlsby: near-identity, small weights)


class BottleneckAdapter(nn.Module):
    """h -> h + up(relu(down(h))): (..., H) -> (..., H), the identity while `up` is zero."""

    def __init__(self, hidden_size: int, size: int, *, device: torch.device | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.size = size
        self.down = nn.Linear(hidden_size, size, device=device, dtype=dtype)
        self.up = nn.Linear(size, hidden_size, device=device, dtype=dtype)
        with torch.no_grad():
            nn.init.normal_(self.down.weight, std=INIT_STD)
            nn.init.zeros_(self.down.bias)
            nn.init.zeros_(self.up.weight)
            nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.up(F.relu(self.down(h)))

    def extra_repr(self) -> str:
        return f"size={self.size}"


def _through_adapter(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    adapter = module._modules.get("adapter")
    return output if adapter is None else adapter(output)


def _sublayers(model: nn.Module) -> list[tuple[str, nn.Module, int]]:
    """(name, module, its output width) for every attention and feed-forward sublayer, each once."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, Attention):
            out.append((name, module, module.out.out_features))
        elif isinstance(module, FeedForward):
            out.append((name, module, module.down.out_features))
    return out


def attach(model: nn.Module, *, size: int) -> list[str]:
    """Put an adapter of bottleneck `size` after every attention and feed-forward sublayer of
    `model`, on its weights' device and dtype; returns the sublayers' names. ValueError for a size
    below 1, a model that already has adapters, or one with no such sublayer."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"an adapter's bottleneck size must be a whole number of at least 1, not {size!r}.")
    if has_adapters(model):
        raise ValueError(f"this model already has adapters (bottleneck size {adapter_size(model)}).")
    plan = _sublayers(model)
    if not plan:
        raise ValueError(f"{type(model).__name__} has no attention or feed-forward layer of models_lib's blocks "
                         f"for adapters to follow.")
    for _, module, width in plan:
        weight = next(module.parameters())
        module.add_module("adapter", BottleneckAdapter(width, size, device=weight.device, dtype=weight.dtype))
        module.register_forward_hook(_through_adapter)
    return [name for name, *_ in plan]


def adapted(model: nn.Module) -> Iterator[tuple[str, nn.Module, BottleneckAdapter]]:
    """(sublayer's name, sublayer, its adapter) for every adapter of `model`."""
    for name, module in model.named_modules():
        adapter = module._modules.get("adapter") if isinstance(module, (Attention, FeedForward)) else None
        if isinstance(adapter, BottleneckAdapter):
            yield name, module, adapter


def has_adapters(model: nn.Module) -> bool:
    return any(True for _ in adapted(model))


def adapter_size(model: nn.Module) -> int:
    """The bottleneck size of `model`'s adapters; 0 when it has none."""
    return next((adapter.size for _, _, adapter in adapted(model)), 0)


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for _, _, adapter in adapted(model) for p in adapter.parameters()]


def norm_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The weights (and biases) of every LayerNorm and RMSNorm of `model`: Houlsby's adapters train them too."""
    return [p for m in model.modules() if isinstance(m, (nn.LayerNorm, RMSNorm)) for p in m.parameters(recurse=False)]


def settings(model: nn.Module) -> dict | None:
    """What model_config.json records of the adapters ({"size": d}), None without any."""
    size = adapter_size(model)
    return {"size": size} if size else None


def attach_like(source: nn.Module, target: nn.Module) -> None:
    """Give `target` adapters of `source`'s size, when `source` has some (before copying its weights)."""
    size = adapter_size(source)
    if size:
        attach(target, size=size)
