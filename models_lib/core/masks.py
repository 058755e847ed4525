"""UniLM self-attention masks: which keys each query may see, per example.

Every builder takes the padding mask (B, T) (1 = real token, 0 = padding, as a tokenizer gives
it) and returns a bool tensor (B, T, T), True where query i may attend to key j, ready to pass
as attention_mask to any encoder model. Padding keys are hidden from every query; a padding
query sees only itself, so that no row is empty (its output is never used).

  bidirectional   every token sees every token (BERT's MLM)
  left_to_right   token i sees tokens 0..i
  right_to_left   token i sees tokens i..T-1
  seq2seq         source tokens (the first source_lengths[b]) see the whole source; target
                  tokens see the source and the target up to themselves
"""
from __future__ import annotations

import torch

MODES = ("bidirectional", "left_to_right", "right_to_left", "seq2seq")


def _with_padding(allowed: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """allowed: (T, T) or (B, T, T); padding_mask: (B, T) -> (B, T, T)."""
    real = padding_mask.bool()  # (B, T)
    mask = allowed & real[:, None, :] & real[:, :, None]  # (B, T, T)
    eye = torch.eye(real.shape[1], dtype=torch.bool, device=real.device)
    return mask | (eye & ~real[:, :, None])  # padding rows: themselves only


def bidirectional(padding_mask: torch.Tensor) -> torch.Tensor:
    T = padding_mask.shape[1]
    return _with_padding(torch.ones(T, T, dtype=torch.bool, device=padding_mask.device), padding_mask)


def left_to_right(padding_mask: torch.Tensor) -> torch.Tensor:
    T = padding_mask.shape[1]
    return _with_padding(torch.ones(T, T, dtype=torch.bool, device=padding_mask.device).tril(), padding_mask)


def right_to_left(padding_mask: torch.Tensor) -> torch.Tensor:
    T = padding_mask.shape[1]
    return _with_padding(torch.ones(T, T, dtype=torch.bool, device=padding_mask.device).triu(), padding_mask)


def seq2seq(padding_mask: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
    """source_lengths: (B,) tokens in each example's source segment ([CLS] source [SEP])."""
    T = padding_mask.shape[1]
    position = torch.arange(T, device=padding_mask.device)
    in_source = position[None, :] < source_lengths.to(padding_mask.device)[:, None]  # (B, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=padding_mask.device).tril()  # (T, T)
    # Any query sees source keys; a target query (only) also sees the target keys up to itself.
    allowed = in_source[:, None, :] | (~in_source[:, :, None] & causal)  # (B, T, T)
    return _with_padding(allowed, padding_mask)


def unilm_mask(mode: str, padding_mask: torch.Tensor, source_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The mask of a UniLM mode by name (what a collator picks per batch or per example)."""
    if mode == "seq2seq":
        if source_lengths is None:
            raise ValueError("the seq2seq mask needs source_lengths (tokens in each example's source segment).")
        return seq2seq(padding_mask, source_lengths)
    builders = {"bidirectional": bidirectional, "left_to_right": left_to_right, "right_to_left": right_to_left}
    if mode not in builders:
        raise ValueError(f"Unknown UniLM mask mode {mode!r}; choose one of {', '.join(MODES)}.")
    return builders[mode](padding_mask)


def seq2seq_token_type_ids(padding_mask: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
    """(B, T) segment ids: 0 for the source, 1 for the target (and 0 for padding)."""
    position = torch.arange(padding_mask.shape[1], device=padding_mask.device)
    target = position[None, :] >= source_lengths.to(padding_mask.device)[:, None]
    return (target & padding_mask.bool()).long()
