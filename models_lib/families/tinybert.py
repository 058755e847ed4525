"""TinyBERT (Jiao et al. 2020): a narrow BERT student distilled layer by layer from a teacher.

The student (TinyBertForPreTraining: a BERT encoder with an MLM head) reads the same batch as
its teacher. With M student layers and N teacher layers, student layer m learns from teacher
layer g(m) = m * N / M (`layer_map`; 0 is the embedding layer). The losses (`tinybert_losses`):

- embedding:   MSE(E_S W_e, E_T)               (the embedding layers' outputs)
- attention:   sum over m of MSE(A_S^m, A_T^g(m))   (unnormalised scores q k^T / sqrt(d), per head,
               over the pairs of real tokens)
- hidden:      sum over m of MSE(H_S^m W_h, H_T^g(m))
- prediction:  soft cross-entropy -softmax(z_T / t) . log_softmax(z_S / t) (`prediction_loss`),
               reported less the teacher's entropy (a constant: the same gradient), so it is
               KL(teacher_t || student_t) and 0 when the student predicts as the teacher does

W_e and W_h are learned (hidden_size -> teacher_hidden_size) and exist only when the teacher is
wider (TinyBertConfig.projects); otherwise the states are compared as they are.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.packing import Packed, Unpadded
from models_lib.core.config import EncoderConfig, TinyBertConfig
from models_lib.core.layers import Attention
from models_lib.families.pretraining import EncoderForPreTraining, PreTrainingOutput


class TinyBertForPreTraining(EncoderForPreTraining):
    """forward(input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None, *,
    output_hidden_states=False) -> PreTrainingOutput, as BERT's without NSP; `fit_embedding`
    and `fit_hidden` are W_e and W_h (None when the widths agree)."""

    families = ("tinybert",)

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        heads = super().build_heads(config)
        wide = isinstance(config, TinyBertConfig) and config.projects
        heads["fit_embedding"] = nn.Linear(config.hidden_size, config.teacher_hidden_size) if wide else None
        heads["fit_hidden"] = nn.Linear(config.hidden_size, config.teacher_hidden_size) if wide else None
        return heads

    def project(self, states: torch.Tensor, *, embedding: bool) -> torch.Tensor:
        fit = self.fit_embedding if embedding else self.fit_hidden
        return states if fit is None else fit(states)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                *, output_hidden_states: bool = False, packed: Packed | None = None,
                mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """BERT's MLM forward; with output_hidden_states, also `projected_states`: the L + 1 states
        mapped to the teacher's width (W_e for the embeddings, W_h for the layers). They are made
        here, inside forward, so that DDP sees the projections used by the forward pass."""
        out = super().forward(input_ids, attention_mask, token_type_ids, mlm_labels,
                              output_hidden_states=output_hidden_states, packed=packed,
                              mlm_positions=mlm_positions)
        if output_hidden_states:
            states = out.hidden_states
            out.projected_states = (self.project(states[0], embedding=True),
                                    *(self.project(h, embedding=False) for h in states[1:]))
        return out


def layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """[g(1), ..., g(M)]: the teacher layer (1-based; 0 = embeddings) each student layer learns
    from, g(m) = m * N / M rounded down (the paper's uniform strategy; exact when M divides N)."""
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a TinyBERT student needs between 1 and the teacher's {teacher_layers} layers, "
                         f"not {student_layers}.")
    return [m * teacher_layers // student_layers for m in range(1, student_layers + 1)]


@contextlib.contextmanager
def attention_scores(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, every self-attention of `model` appends its unnormalised scores
    q k^T * scale (B, N, T, T), before the mask and softmax, to the yielded list, in call order
    (one per layer of a forward pass). The scores keep their graph, so a loss on them trains
    the queries and keys."""
    found: list[torch.Tensor] = []

    def hook(module: Attention, args: tuple, _output: torch.Tensor) -> None:
        qkv = module.qkv(args[0])
        if len(args) > 1 and isinstance(args[1], Unpadded):  # a packed batch's real tokens: in their rows
            qkv = args[1].rows(qkv)
        q, k, _ = module._heads(qkv, 3)
        found.append((q @ k.transpose(-1, -2)) * module.scale)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, Attention) and not m.cross]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def _mse(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the entries where `keep` (broadcast to a's shape) is true."""
    keep = keep.expand_as(a)
    return F.mse_loss(a.float()[keep], b.float()[keep])


def tinybert_losses(student_states: tuple[torch.Tensor, ...], student_scores: list[torch.Tensor],
                    teacher_states: tuple[torch.Tensor, ...], teacher_scores: list[torch.Tensor],
                    attention_mask: torch.Tensor, packed: Packed | None = None) -> dict[str, torch.Tensor]:
    """{"emb_loss", "att_loss", "hid_loss"} over the uniform layer map.

    student_states: the student's L + 1 states already projected to the teacher's width
    (TinyBertForPreTraining's `projected_states`; its `hidden_states` when the widths agree);
    teacher_states: the teacher's L + 1 hidden states (B, T, H), the embedding output first;
    scores: L attention-score tensors (B, N, T, T) each; attention_mask (B, T), 1 = real token.
    Padding is left out (for scores: any pair with a padding query or key); in a packed batch
    (`packed`, models_lib.core.packing), so is any pair of two examples' tokens."""
    mapping = layer_map(len(student_scores), len(teacher_scores))
    real = attention_mask.bool()
    tokens = real[:, :, None]                                  # (B, T, 1)
    pairs = (real[:, None, :, None] & real[:, None, None, :])  # (B, 1, T, T)
    if packed is not None:
        pairs = pairs & packed.visibility()
    emb = _mse(student_states[0], teacher_states[0], tokens)
    att = sum(_mse(student_scores[m], teacher_scores[g - 1], pairs) for m, g in enumerate(mapping))
    hid = sum(_mse(student_states[m + 1], teacher_states[g], tokens) for m, g in enumerate(mapping))
    return {"emb_loss": emb, "att_loss": att, "hid_loss": hid}


def prediction_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """TinyBERT's soft cross-entropy of the student's logits against the teacher's at a
    temperature, less the teacher's entropy (constant in the student, so the gradient is the
    paper's): KL(teacher_t || student_t). (N, V) each at the same N positions, averaged over them."""
    t = temperature
    target = F.log_softmax(teacher_logits.float() / t, dim=-1)
    return F.kl_div(F.log_softmax(student_logits.float() / t, dim=-1), target, reduction="batchmean", log_target=True)
