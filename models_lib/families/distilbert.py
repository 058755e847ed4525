"""DistilBERT: a student with half the teacher's layers, no token types, no pooler.

The student is an encoder config (presets.DISTILBERT_PRESETS) with an MLM head like BERT's.
`distil_from_teacher` builds one from a trained teacher, initialised from every other teacher
layer (0, 2, 4, ...). `distillation_losses` computes the soft-target and cosine terms of the
DistilBERT loss (5.0 * soft CE at temperature 2 + 2.0 * MLM + 1.0 * cosine).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from models_lib.core.config import EncoderConfig
from models_lib.families.pretraining import EncoderForPreTraining, EncoderWithHeads


class DistilBertForPreTraining(EncoderForPreTraining):
    """forward(input_ids, attention_mask=None, token_type_ids=None (must be None), mlm_labels=None,
    *, output_hidden_states=False) -> PreTrainingOutput (MLM fields, hidden_states when asked)."""

    backbone_name = "distilbert"
    families = ("distilbert",)


@torch.no_grad()
def distil_from_teacher(teacher: EncoderWithHeads) -> DistilBertForPreTraining:
    """A student of ceil(L/2) layers whose layer i is a copy of the teacher's layer 2i.

    The teacher is any post-LN encoder model with an MLM head and unshared layers (BERT,
    RoBERTa, SpanBERT, UniLM). Word and position embeddings, the embedding LayerNorm and the
    MLM head are copied too. The student has no token types, so the teacher's segment-0 row is
    added into the position table: the student's embedding output then equals the teacher's
    for single-segment input (transformers' extraction script simply drops the row).
    """
    tc = teacher.config
    if tc.share_layers != "none" or tc.norm_placement != "post" or tc.embedding_size is not None:
        raise ValueError("distil_from_teacher needs a BERT-style teacher: unshared post-LN layers, no "
                         "factorised embeddings.")
    if not hasattr(teacher, "mlm_head"):
        raise ValueError(f"the teacher ({type(teacher).__name__}) has no MLM head to copy.")
    fields = {f.name: getattr(tc, f.name) for f in dataclasses.fields(EncoderConfig)}
    fields.update(family="distilbert", num_layers=math.ceil(tc.num_layers / 2), type_vocab_size=0, use_pooler=False)
    student = DistilBertForPreTraining(EncoderConfig(**fields))
    src, dst = teacher.backbone, student.backbone
    dst.embeddings.word.load_state_dict(src.embeddings.word.state_dict())
    dst.embeddings.norm.load_state_dict(src.embeddings.norm.state_dict())
    dst.embeddings.position.weight.copy_(src.embeddings.position.weight)
    if src.embeddings.token_type is not None:
        dst.embeddings.position.weight.add_(src.embeddings.token_type.weight[0])
    for i, layer in enumerate(dst.encoder.layers):
        layer.load_state_dict(src.encoder.layers[2 * i].state_dict())
    student.mlm_head.load_state_dict(teacher.mlm_head.state_dict())
    return student.train(teacher.training)


def distillation_losses(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                        student_hidden: torch.Tensor, teacher_hidden: torch.Tensor,
                        mask: torch.Tensor, temperature: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(soft-target loss, cosine loss), as DistilBERT trains.

    logits: (N, V) at the same N positions for both models; hidden: (B, T, H) final hidden
    states; mask: (B, T) 1 for the real tokens the cosine loss covers. The soft-target loss is
    KL(teacher_T || student_T) * T^2 (the T^2 keeps its gradient scale independent of T).
    """
    t = temperature
    soft = F.kl_div(F.log_softmax(student_logits.float() / t, dim=-1), F.softmax(teacher_logits.float() / t, dim=-1),
                    reduction="batchmean") * t * t
    keep = mask.bool()
    s, te = student_hidden[keep].float(), teacher_hidden[keep].float()  # (M, H)
    cosine = F.cosine_embedding_loss(s, te, torch.ones(len(s), device=s.device))
    return soft, cosine
