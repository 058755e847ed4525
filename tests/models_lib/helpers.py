"""Small shared pieces for the models_lib tests: non-trivial random weights and padded batches."""
from __future__ import annotations

import torch

from models_lib.core import vocab


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Non-trivial values everywhere (LayerNorm weights away from 1, biases away from 0); eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # shared and tied tensors are visited once
            noise = torch.randn(p.shape, generator=g)
            if "LayerNorm.weight" in name or "layer_norm.weight" in name or "norm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)
    vocab.zero_padding(model)  # our models' vocabulary padding rows stay zero (models_lib.core.vocab)
    return model.eval()


def padded_batch(vocab: int, *, pad_id: int = 0, B: int = 3, T: int = 12, segments: bool = True,
                 left: bool = False, seed: int = 1):
    """(input_ids, attention_mask, token_type_ids or None): example 0 full, 1 and 2 padded
    (on the right, or on the left with left=True). Real ids avoid the low special ids."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab, (B, T), generator=g)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    if B > 1:
        attention_mask[1, 8:] = 0
    if B > 2:
        attention_mask[2, 5:] = 0
    if left:
        attention_mask = attention_mask.flip(1)
    input_ids[attention_mask == 0] = pad_id
    token_type_ids = None
    if segments:
        token_type_ids = torch.zeros(B, T, dtype=torch.long)
        token_type_ids[:, T // 2:] = 1
        token_type_ids[attention_mask == 0] = 0
    return input_ids, attention_mask, token_type_ids
