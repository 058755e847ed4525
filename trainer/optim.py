"""AdamW with BERT's weight-decay exclusions and the learning-rate schedules.

Schedules are written in terms of the 1-based update number k (the k-th optimizer step):
warm-up k / warmup_steps up to 1, then
  linear:   (max_steps - k + 1) / (max_steps - warmup_steps)   -> 1/(max_steps - warmup) at the end
  cosine:   0.5 * (1 + cos(pi * (k - warmup - 1) / (max_steps - warmup)))
  constant: 1
Neither the first nor the last update is wasted on a zero learning rate.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from trainer.config import RunConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and biases + normalisation weights (no decay, as in BERT)."""
    no_decay_ids: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)) or "norm" in type(module).__name__.lower()
        for name, p in module.named_parameters(recurse=False):
            if is_norm or name == "bias" or name.endswith("_bias"):
                no_decay_ids.add(id(p))
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():  # parameters() yields each shared tensor once
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if id(p) in no_decay_ids or p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(schedule: str, warmup_steps: int, max_steps: int) -> Callable[[int], float]:
    """f(k): the multiplier of the peak lr for the k-th update (k = 1, 2, ..., max_steps)."""

    def f(k: int) -> float:
        if warmup_steps and k <= warmup_steps:
            return k / warmup_steps
        if schedule == "constant":
            return 1.0
        span = max(1, max_steps - warmup_steps)
        done = min(max(k - warmup_steps - 1, 0), span)  # updates since warm-up ended
        if schedule == "linear":
            return max(0.0, (span - done) / span)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * done / span))
        raise ValueError(f"unknown schedule {schedule!r}")

    return f


def build_optimizer(model: nn.Module, config: RunConfig) -> tuple[torch.optim.Optimizer, LambdaLR]:
    """AdamW + LambdaLR; call scheduler.step() after each optimizer.step()."""
    fused = next(model.parameters()).is_cuda
    optimizer = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr,
                                  betas=tuple(config.betas), eps=config.eps, fused=fused or None)
    f = lr_factor(config.schedule, config.warmup_steps, config.max_steps)
    # LambdaLR passes the number of scheduler.step() calls so far (0 before the 1st update).
    scheduler = LambdaLR(optimizer, lambda i: f(i + 1))
    return optimizer, scheduler


def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm (max_norm 0 = no clipping); returns the norm before
    clipping as a tensor (reading it forces a device sync, so callers do that only when logging)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return torch.zeros(())
    return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
