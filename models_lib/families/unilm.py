"""UniLM: the BERT encoder trained with self-attention masks, plus seq2seq decoding.

The model is BERT with an MLM head (no NSP); what makes it a left-to-right, right-to-left or
seq2seq language model is the (B, T, T) attention mask built by models_lib.core.masks and passed
as attention_mask. Segment ids: 0 for the source, 1 for the target.

Generation (Dong et al. 2019, section 2.3 and 3.2): the target is written one token at a time
by appending a [MASK] after the target so far and predicting it under the seq2seq mask, so the
source is read bidirectionally and the target left to right. `model.generate` does this with
every decoding option of models_lib.core.generation (greedy, sampling, beam search).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from models_lib.core import generation
from models_lib.core import masks
from models_lib.families.pretraining import EncoderForPreTraining


@dataclass
class UniLMGenerationState:
    """What generation.generate carries between steps for UniLM."""

    source: torch.Tensor  # (B, S) each row's real source tokens first, then filler
    lengths: torch.Tensor  # (B,) real source tokens per row
    mask_token_id: int
    target: torch.Tensor | None = None  # (B, t) generated so far; None before the first step


class UniLMForPreTraining(EncoderForPreTraining):
    """forward(input_ids, attention_mask (B, T, T) or (B, T), token_type_ids=None, mlm_labels=None)
    -> PreTrainingOutput (MLM fields)."""

    backbone_name = "bert"
    families = ("unilm",)

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 mask_token_id: int, eos_token_id: int | None, max_new_tokens: int = 20,
                 **options: Any) -> torch.Tensor:
        """(B, S + n) token ids: the source as given, then up to max_new_tokens generated ones.

        input_ids: (B, S) "[CLS] source [SEP]", padded (on either side) with attention_mask
        (B, S) 1/0 when the sources differ in length. Each step appends a [MASK]
        (mask_token_id) after the target so far, with segment id 1 for the target, and
        predicts it seeing the whole source and the target up to itself. A row ends at
        eos_token_id (typically [SEP], kept in the output; pad_token_id after it, default 0);
        n is also cut where the model's positions run out.
        Options as in generation.generate: do_sample, num_beams, temperature, top_k, top_p,
        pad_token_id, length_penalty, generator.
        There is no key/value cache here: under the seq2seq mask the [MASK] of one step becomes
        a real token at the next, which changes what the later positions see, so every step
        re-encodes the whole sequence (cheap at the lengths UniLM is used for).
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}.")
        longest = int(attention_mask.sum(1).max()) if attention_mask is not None else input_ids.shape[1]
        if longest >= self.max_positions:
            raise ValueError(f"the source has {longest} tokens; this model reads at most {self.max_positions} in "
                             f"all, which leaves no room for a target.")
        options.setdefault("pad_token_id", self.config.pad_token_id or 0)
        return generation.generate(_BoundMaskToken(self, mask_token_id), input_ids, attention_mask,
                                   max_new_tokens=min(max_new_tokens, self.max_positions - longest),
                                   eos_token_id=eos_token_id, **options)

    # --- the hooks generation.generate drives (through _BoundMaskToken) ---------------------

    def start_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                         mask_token_id: int) -> tuple[UniLMGenerationState, torch.Tensor]:
        """The source is kept in the state; it also begins the returned sequences."""
        if attention_mask is None:
            source, lengths = input_ids, torch.full((input_ids.shape[0],), input_ids.shape[1],
                                                    dtype=torch.long, device=input_ids.device)
        else:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, but input_ids has "
                                 f"{tuple(input_ids.shape)}.")
            real = attention_mask.bool()
            # A stable sort moves each row's real tokens to the front, in order (any padding side).
            order = torch.sort((~real).int(), dim=1, stable=True).indices  # (B, S)
            source, lengths = input_ids.gather(1, order), real.sum(1)
        return UniLMGenerationState(source, lengths, mask_token_id), input_ids

    def generation_step(self, state: UniLMGenerationState,
                        tokens: torch.Tensor) -> tuple[torch.Tensor, UniLMGenerationState]:
        """Append tokens (the new target token; the source itself at the first step), then
        predict the [MASK] after them: -> logits (B, V)."""
        source, n = state.source, state.lengths  # (B, S), (B,)
        if state.target is None:
            state.target = source.new_zeros(source.shape[0], 0)
        else:
            state.target = torch.cat([state.target, tokens], dim=1)
        target = state.target  # (B, t)
        B, S = source.shape
        t = target.shape[1]
        # Row b: its n_b source tokens, the target, the [MASK], then padding up to the widest row;
        # so positions and segments are what the same row would get alone.
        W = int(n.max()) + t + 1
        j = torch.arange(W, device=source.device)[None, :]  # (1, W)
        n_ = n[:, None]  # (B, 1)
        ids = torch.where(j < n_, source.gather(1, j.clamp(max=S - 1).expand(B, W)), 0)  # (B, W)
        if t:
            in_target = (j >= n_) & (j < n_ + t)
            ids = torch.where(in_target, target.gather(1, (j - n_).clamp(0, t - 1)), ids)
        ids = torch.where(j == n_ + t, state.mask_token_id, ids)
        real = (j <= n_ + t).long()  # (B, W)
        visible = masks.seq2seq(real, n)  # (B, W, W)
        types = masks.seq2seq_token_type_ids(real, n) if self.config.type_vocab_size >= 2 else None
        hidden = self.encode(ids, visible, types)  # (B, W, H)
        at_mask = hidden[torch.arange(B, device=hidden.device), n + t]  # (B, H): only the [MASK]s
        return self.mlm_head(at_mask, self.word_embeddings), state  # (B, V)

    def reorder_generation_state(self, state: UniLMGenerationState, index: torch.Tensor) -> UniLMGenerationState:
        state.source = state.source.index_select(0, index)
        state.lengths = state.lengths.index_select(0, index)
        if state.target is not None:
            state.target = state.target.index_select(0, index)
        return state


class _BoundMaskToken:
    """The model as generation.generate drives it, with the [MASK] id bound to start_generation.

    The id is kept here rather than on the model, so concurrent generations with one cached
    model cannot see each other's settings."""

    def __init__(self, model: UniLMForPreTraining, mask_token_id: int):
        self.model, self.mask_token_id = model, mask_token_id

    @property
    def training(self) -> bool:
        return self.model.training

    @property
    def config(self):  # generation.next_logits reads config.vocab_size
        return self.model.config

    def eval(self) -> _BoundMaskToken:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> _BoundMaskToken:
        self.model.train(mode)
        return self

    def start_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        return self.model.start_generation(input_ids, attention_mask, mask_token_id=self.mask_token_id)

    def generation_step(self, state: UniLMGenerationState, tokens: torch.Tensor):
        return self.model.generation_step(state, tokens)

    def reorder_generation_state(self, state: UniLMGenerationState, index: torch.Tensor):
        return self.model.reorder_generation_state(state, index)


@torch.no_grad()
def generate_seq2seq(model: UniLMForPreTraining, source_ids: torch.Tensor, *, max_new_tokens: int,
                     mask_id: int, eos_id: int, source_mask: torch.Tensor | None = None,
                     pad_id: int = 0) -> torch.Tensor:
    """Greedy decoding with the seq2seq mask, as UniLM generates (see UniLMForPreTraining.generate).

    source_ids: (B, S) "[CLS] source [SEP]" (padded, with source_mask (B, S) 1/0, when the sources
    differ in length). Stops at eos_id (typically [SEP], kept in the output), after
    max_new_tokens, or when the model's positions run out.
    Returns (B, N) generated ids only, pad_id after an example's end.
    """
    if source_ids.dim() != 2:
        raise ValueError(f"source_ids must be (batch, length), got shape {tuple(source_ids.shape)}.")
    if max_new_tokens < 1:
        return source_ids.new_zeros(source_ids.shape[0], 0)
    out = model.generate(source_ids, source_mask, mask_token_id=mask_id, eos_token_id=eos_id, pad_token_id=pad_id,
                         max_new_tokens=max_new_tokens)
    return out[:, source_ids.shape[1]:]
