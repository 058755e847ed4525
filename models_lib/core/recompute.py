"""Activation checkpointing: a stack's blocks keep only their inputs in the forward pass and
recompute the rest during the backward pass (torch.utils.checkpoint, non-reentrant). That costs
about one more forward pass of the blocks (~1/3 more compute per training step) and saves the
activations inside every block, which is what grows with layers x batch x sequence length.

A stack that supports it (`models_lib.core.encoder.Encoder`: the encoder families and GPT;
`models_lib.families.t5.T5Stack`) is a `RecomputedStack` and calls each block through
`run_block`; `set_activation_checkpointing(model, True)` switches every such stack of a model.
It applies only in training mode with gradients on: evaluation and generation (with their
key/value caches) run the blocks as usual. The dropout masks of the recomputed pass are the
first pass's (the RNG state is replayed), so the gradients are the ones without checkpointing.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class RecomputedStack(nn.Module):
    """A stack of blocks whose activations may be recomputed in the backward pass."""

    activation_checkpointing: bool = False

    def run_block(self, block: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """block(*args, **kwargs), through torch.utils.checkpoint when this stack checkpoints and
        the call is part of a training step."""
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(block, *args, use_reentrant=False, **kwargs)
        return block(*args, **kwargs)


def set_activation_checkpointing(model: nn.Module, enabled: bool = True) -> int:
    """Turn activation checkpointing on (or off) in every stack of `model`; returns how many
    stacks there are (0: the model has no transformer blocks, e.g. ELMo)."""
    stacks = [m for m in model.modules() if isinstance(m, RecomputedStack)]
    for stack in stacks:
        stack.activation_checkpointing = enabled
    return len(stacks)
