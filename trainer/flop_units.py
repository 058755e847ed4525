"""The units the FLOP formulas are written in, shared by trainer.training.flops (the families'
formulas) and the objectives' head_flops hooks, which trainer.training cannot be imported by."""
from __future__ import annotations

from typing import Any


def matmul_flops(n_in: int, n_out: int) -> float:
    """Forward FLOPs of one token through an n_in x n_out weight matrix."""
    return 2.0 * n_in * n_out


def output_vocab(c: Any) -> int:
    """The output layer's width as computed: the padded vocabulary (models_lib.core.vocab)."""
    return getattr(c, "padded_vocab_size", c.vocab_size)
