"""The optimizers (AdamW, or PyTorch's Adafactor for T5) with BERT's weight-decay exclusions,
and the learning-rate schedules.

Schedules are written in terms of the 1-based update number k (the k-th optimizer step):
warm-up k / warmup_steps up to 1, then
  linear:   (max_steps - k + 1) / (max_steps - warmup_steps)   -> 1/(max_steps - warmup) at the end
  cosine:   0.5 * (1 + cos(pi * (k - warmup - 1) / (max_steps - warmup)))
  constant: 1
Neither the first nor the last update is wasted on a zero learning rate.
  inverse_sqrt (T5): sqrt(W / max(k, W)) with W = max(warmup_steps, 1): constant 1 for the first
            W updates (no linear ramp), then 1/sqrt(k) scaled to meet 1 at k = W. T5's
            lr = 1/sqrt(max(step, 10^4)) is lr 0.01 with warmup_steps 10^4.

Adafactor is torch.optim.Adafactor (Shazeer & Stern 2018, as PyTorch implements it): factored
second moments, beta2 = 1 - t^-0.8, update clipping at RMS 1, no first moment, and a
relative step size rho_t = min(lr, 1/sqrt(t)) times max(1e-3, RMS(weight)). Our schedule sets
the group lr, so with lr 0.01 and the inverse_sqrt schedule rho_t is T5's 1/sqrt(max(t, 10^4))
(the min() with 1/sqrt(t) never bites, as lr x factor <= 1/sqrt(t) whenever lr <= 1/sqrt(W)).
Its weight decay is decoupled and scaled by that lr (theta -= lr * wd * theta); T5 used none.
betas and eps are AdamW's and do not apply.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from trainer.config import OptimArgs


def no_decay_ids(model: nn.Module) -> set[int]:
    """The ids of the biases and normalisation weights, which take no weight decay (as in BERT).
    A bias is a parameter named bias or *_bias, or any parameter of a module so named: T5's
    relative_attention_bias is an embedding table of biases added to the attention scores
    (transformers' Trainer leaves it undecayed too: its rule is every name containing "bias")."""
    ids: set[int] = set()
    for qualname, module in model.named_modules():
        is_norm = isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)) or "norm" in type(module).__name__.lower()
        is_bias = qualname.rsplit(".", 1)[-1].endswith("_bias")
        for name, p in module.named_parameters(recurse=False):
            if is_norm or is_bias or name == "bias" or name.endswith("_bias"):
                ids.add(id(p))
    return ids


def split_decay(params: Iterable[nn.Parameter], no_decay: set[int]) -> tuple[list, list]:
    """(decayed, not decayed): the ids in `no_decay` (no_decay_ids) and every vector or scalar
    go without decay. Frozen parameters (requires_grad False) and repeats are left out."""
    decay, plain, seen = [], [], set()
    for p in params:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (plain if id(p) in no_decay or p.ndim < 2 else decay).append(p)
    return decay, plain


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and biases + normalisation weights (no decay, as in BERT)."""
    decay, no_decay = split_decay(model.parameters(), no_decay_ids(model))  # each shared tensor once
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(schedule: str, warmup_steps: int, max_steps: int) -> Callable[[int], float]:
    """f(k): the multiplier of the peak lr for the k-th update (k = 1, 2, ..., max_steps)."""

    if schedule == "inverse_sqrt":
        w = max(warmup_steps, 1)
        return lambda k: math.sqrt(w / max(k, w))

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


OPTIMIZERS = ("adamw", "adafactor")


def build_optimizer(model: nn.Module, optim: OptimArgs, max_steps: int,
                    groups: list[dict] | None = None) -> tuple[torch.optim.Optimizer, LambdaLR]:
    """optim.optimizer (AdamW or Adafactor) + LambdaLR over `max_steps` updates (RunConfig.optim and
    .max_steps); call scheduler.step() after each optimizer.step(). groups: the parameter groups
    (default: param_groups(model, optim.weight_decay)); one that sets its own "lr" keeps it, and
    the schedule scales every group's own lr (fine-tuning's layer-wise decay)."""
    groups = param_groups(model, optim.weight_decay) if groups is None else groups
    cuda = next(model.parameters()).is_cuda
    if optim.optimizer == "adafactor":
        # PyTorch's defaults are Adafactor's published ones (beta2 decay -0.8, clipping threshold
        # 1.0, eps (None -> dtype's eps, 1e-3)); only the lr (the cap of the relative step size,
        # driven by the schedule) and the weight decay come from the optim. On a GPU the
        # multi-tensor path saves a kernel launch per parameter (at the cost of some memory).
        optimizer: torch.optim.Optimizer = torch.optim.Adafactor(groups, lr=optim.lr, foreach=cuda or None)
    elif optim.optimizer in ("adamw", ""):
        # The fused kernel (one pass over all parameters) on the CPU as on a GPU: the default
        # for-loop implementation costs a dozen small kernels per parameter tensor, which for a
        # small model is a fair share of the step (transformers' Trainer uses the fused one too).
        fused = fused_adamw_supported(groups)
        optimizer = torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                                      fused=fused or None)
    else:  # RunConfig refuses this first
        raise ValueError(f"unknown optimizer {optim.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    f = lr_factor(optim.schedule, optim.warmup_steps, max_steps)
    # LambdaLR passes the number of scheduler.step() calls so far (0 before the 1st update).
    scheduler = LambdaLR(optimizer, lambda i: f(i + 1))
    return optimizer, scheduler


def fused_adamw_supported(groups: list[dict]) -> bool:
    """Whether AdamW's fused kernel takes these parameters: on a GPU (as before), or floating-point
    plain tensors (not FSDP2's sharded DTensors) all on the CPU."""
    params = [p for g in groups for p in g["params"]]
    devices = {p.device.type for p in params}
    if devices == {"cuda"}:
        return True
    return devices == {"cpu"} and all(p.is_floating_point() and type(p.data) is torch.Tensor for p in params)


def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm (max_norm 0 = no clipping); returns the norm before
    clipping as a tensor (reading it forces a device sync, so callers do that only when logging)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return torch.zeros(())
    return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
