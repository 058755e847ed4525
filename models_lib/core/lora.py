"""LoRA (Hu et al. 2021): a frozen linear layer W plus a trained low-rank update (alpha / r) B A,
A (r, in) initialised as peft does (Kaiming-uniform), B (out, r) at zero, so training starts
from the pre-trained function; dropout on the adapter's input only.

    adapted = attach(model, r=8, alpha=16, dropout=0.05, targets=("query", "value"))
    with merged(model): save_model(model, folder)   # W + (alpha / r) B A written as plain weights
    with detached(model): ...                        # the model without its adapters (W alone)

Targets name projections in any family's blocks (models_lib.core.layers): "query", "key",
"value" (slices of a fused Q/K/V matrix each get their own A and B, so they map one to one onto
transformers' separate query/key/value layers), "output" (attention's output projection),
"ffn_up" (the feed-forward's first layer, and its gate when gated) and "ffn_down". The adapter
is a child module `lora` of the linear layer it adapts, added by a forward hook: the linear's own
weight keeps its name.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence

import torch
from torch import nn

from models_lib.core.layers import Attention, FeedForward

TARGETS = ("query", "key", "value", "output", "ffn_up", "ffn_down")


class LoRAAdapter(nn.Module):
    """The update of one linear layer whose output is `parts` equal slices (3 for a fused Q/K/V);
    the slices in `enabled` get their own A and B, the others none."""

    def __init__(self, linear: nn.Linear, *, parts: int, enabled: Sequence[int], r: int, alpha: float,
                 dropout: float):
        super().__init__()
        if linear.out_features % parts:
            raise ValueError(f"{linear.out_features} outputs do not split into {parts} parts.")
        self.parts, self.enabled, self.r, self.alpha = parts, tuple(enabled), r, float(alpha)
        self.size = linear.out_features // parts
        device, dtype = linear.weight.device, linear.weight.dtype
        self.lora_A = nn.ParameterList(nn.Parameter(torch.empty(r, linear.in_features, device=device, dtype=dtype))
                                       for _ in self.enabled)
        self.lora_B = nn.ParameterList(nn.Parameter(torch.zeros(self.size, r, device=device, dtype=dtype))
                                       for _ in self.enabled)
        for a in self.lora_A:
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout)

    @property
    def scale(self) -> float:
        return self.alpha / self.r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The update of the linear's output for input x (..., in) -> (..., out)."""
        d = self.dropout(x)
        pieces: list[torch.Tensor | None] = [None] * self.parts
        for k, i in enumerate(self.enabled):
            pieces[i] = (d @ self.lora_A[k].t()) @ self.lora_B[k].t() * self.scale
        zeros = x.new_zeros(*x.shape[:-1], self.size)
        return torch.cat([p if p is not None else zeros for p in pieces], dim=-1)

    def delta_weight(self) -> torch.Tensor:
        """(out, in): what merging adds to the linear's weight."""
        rows = [torch.zeros(self.size, self.lora_A[0].shape[1], device=self.lora_A[0].device,
                            dtype=self.lora_A[0].dtype)] * self.parts
        for k, i in enumerate(self.enabled):
            rows[i] = self.lora_B[k] @ self.lora_A[k] * self.scale
        return torch.cat(rows, dim=0)

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha:g}, parts={self.parts}, enabled={self.enabled}"


def _add_update(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    adapter = module._modules.get("lora")
    return output if adapter is None else output + adapter(args[0])


def _plan(model: nn.Module, targets: Sequence[str]) -> list[tuple[str, nn.Linear, int, tuple[int, ...]]]:
    """(module name, linear, parts, enabled parts) for every projection `targets` names."""
    want = set(targets)
    out = []
    for name, module in model.named_modules():
        if isinstance(module, Attention):
            qkv = [i for i, t in enumerate(("query", "key", "value")) if t in want]
            if module.cross:
                if "query" in want:
                    out.append((f"{name}.q", module.q, 1, (0,)))
                kv = [i - 1 for i in qkv if i > 0]
                if kv:
                    out.append((f"{name}.kv", module.kv, 2, tuple(kv)))
            elif qkv:
                out.append((f"{name}.qkv", module.qkv, 3, tuple(qkv)))
            if "output" in want:
                out.append((f"{name}.out", module.out, 1, (0,)))
        elif isinstance(module, FeedForward):
            if "ffn_up" in want:
                out += [(f"{name}.{n}", lin, 1, (0,)) for n, lin in (("up", module.up), ("gate", module.gate))
                        if lin is not None]
            if "ffn_down" in want:
                out.append((f"{name}.down", module.down, 1, (0,)))
    return out


def attach(model: nn.Module, *, r: int, alpha: float, dropout: float = 0.0,
           targets: Sequence[str] = ("query", "value")) -> list[str]:
    """Add an adapter to each projection `targets` names; returns their module names. ValueError
    for an unknown target, a rank below 1, or a model with no such projection."""
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ValueError(f"LoRA targets are some of {', '.join(TARGETS)}; got {', '.join(targets) or 'none'}.")
    if r < 1:
        raise ValueError(f"LoRA's rank must be at least 1, not {r}.")
    plan = _plan(model, targets)
    if not plan:
        raise ValueError(f"{type(model).__name__} has no {' or '.join(targets)} projection for LoRA to adapt.")
    for _, linear, parts, enabled in plan:
        if "lora" in linear._modules:
            raise ValueError("This model already has LoRA adapters.")
        linear.add_module("lora", LoRAAdapter(linear, parts=parts, enabled=enabled, r=r, alpha=alpha,
                                              dropout=dropout))
        linear.register_forward_hook(_add_update)
    return [name for name, *_ in plan]


def adapted(model: nn.Module) -> Iterator[tuple[str, nn.Linear, LoRAAdapter]]:
    """(linear's name, linear, its adapter) for every adapted layer of `model`."""
    for name, module in model.named_modules():
        adapter = module._modules.get("lora") if isinstance(module, nn.Linear) else None
        if isinstance(adapter, LoRAAdapter):
            yield name, module, adapter


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for _, _, adapter in adapted(model) for p in adapter.parameters()]


@contextlib.contextmanager
def detached(model: nn.Module) -> Iterator[list[tuple[nn.Linear, LoRAAdapter]]]:
    """The model without its adapters (its state dict, its outputs) inside the block."""
    taken = [(linear, adapter) for _, linear, adapter in adapted(model)]
    for linear, _ in taken:
        del linear._modules["lora"]
    try:
        yield taken
    finally:
        for linear, adapter in taken:
            linear.add_module("lora", adapter)


@contextlib.contextmanager
def merged(model: nn.Module) -> Iterator[None]:
    """Inside the block each adapted weight is W + (alpha / r) B A and the adapters are off: the
    model is a plain one of its class, with the same outputs (up to rounding). W is restored exactly
    after."""
    with torch.no_grad(), detached(model) as taken:
        saved = [(linear, linear.weight.detach().clone()) for linear, _ in taken]
        for linear, adapter in taken:
            linear.weight.add_(adapter.delta_weight().to(linear.weight.dtype))
        try:
            yield
        finally:
            for linear, weight in saved:
                linear.weight.copy_(weight)
