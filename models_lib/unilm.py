"""UniLM: the BERT encoder trained with self-attention masks, plus greedy seq2seq decoding.

The model is BERT with an MLM head (no NSP); what makes it a left-to-right, right-to-left or
seq2seq language model is the (B, T, T) attention mask built by models_lib.masks and passed
as attention_mask. Segment ids: 0 for the source, 1 for the target.
"""
from __future__ import annotations

import torch

from . import masks
from .pretraining import EncoderForPreTraining


class UniLMForPreTraining(EncoderForPreTraining):
    """forward(input_ids, attention_mask (B, T, T) or (B, T), token_type_ids=None, mlm_labels=None)
    -> PreTrainingOutput (MLM fields)."""

    backbone_name = "bert"
    families = ("unilm",)


@torch.no_grad()
def generate_seq2seq(model: UniLMForPreTraining, source_ids: torch.Tensor, *, max_new_tokens: int,
                     mask_id: int, eos_id: int, source_mask: torch.Tensor | None = None,
                     pad_id: int = 0) -> torch.Tensor:
    """Greedy decoding with the seq2seq mask, as UniLM generates.

    source_ids: (B, S) "[CLS] source [SEP]" (right-padded, with source_mask (B, S) 1/0, when the
    sources differ in length). At each step a [MASK] is appended after the target so far; the
    model predicts it seeing the whole source and the target up to and including itself; the
    prediction replaces the [MASK]. Stops at eos_id (typically [SEP], kept in the output), after
    max_new_tokens, or when the model's positions run out.
    Returns (B, N) generated ids, pad_id after an example's end.
    """
    if source_ids.dim() != 2:
        raise ValueError(f"source_ids must be (batch, length), got shape {tuple(source_ids.shape)}.")
    was_training = model.training
    model.eval()
    lengths = (source_mask.sum(1).tolist() if source_mask is not None else [source_ids.shape[1]] * len(source_ids))
    outputs = [_generate_one(model, row[: int(n)], max_new_tokens, mask_id, eos_id)
               for row, n in zip(source_ids, lengths)]
    model.train(was_training)
    width = max((len(o) for o in outputs), default=0)
    result = torch.full((len(outputs), width), pad_id, dtype=torch.long, device=source_ids.device)
    for i, o in enumerate(outputs):
        result[i, : len(o)] = torch.tensor(o, dtype=torch.long)
    return result


def _generate_one(model: UniLMForPreTraining, source: torch.Tensor, max_new_tokens: int,
                  mask_id: int, eos_id: int) -> list[int]:
    S = len(source)
    if S >= model.max_positions:
        raise ValueError(f"the source has {S} tokens; this model reads at most {model.max_positions} in all, "
                         f"which leaves no room for a target.")
    two_segments = model.config.type_vocab_size >= 2
    target: list[int] = []
    for _ in range(min(max_new_tokens, model.max_positions - S)):
        ids = torch.cat([source, source.new_tensor(target + [mask_id])])[None]  # (1, T)
        T = ids.shape[1]
        mask = masks.seq2seq(torch.ones(1, T, dtype=torch.long, device=ids.device),
                             torch.tensor([S], device=ids.device))  # (1, T, T)
        types = (torch.arange(T, device=ids.device) >= S).long()[None] if two_segments else None
        hidden = model.encode(ids, mask, types)  # (1, T, H)
        token = int(model.mlm_head(hidden[0, -1], model.word_embeddings).argmax())  # only the [MASK]'s (V,)
        target.append(token)
        if token == eos_id:
            break
    return target
