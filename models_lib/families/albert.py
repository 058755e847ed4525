"""ALBERT: factorised embeddings, cross-layer sharing, sentence-order prediction.

The first two are config fields of the one encoder (embedding_size -> an E -> H projection;
share_layers "all" | "attention" | "ffn" | "none"); the MLM head predicts from the embedding
size E (dense H -> E, then the E-wide word embeddings as decoder). SOP classifies the pooled
[CLS]: label 0 = the two segments in their original order, 1 = swapped.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.packing import Packed
from models_lib.core.config import EncoderConfig
from models_lib.heads.pretraining import SOPHead
from models_lib.families.pretraining import EncoderForPreTraining, PreTrainingOutput


class AlbertForPreTraining(EncoderForPreTraining):
    backbone_name = "albert"
    families = ("albert",)

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        return {**super().build_heads(config), "sop_head": SOPHead(config.hidden_size) if config.use_pooler else None}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                sop_labels: torch.Tensor | None = None, *, output_hidden_states: bool = False,
                packed: Packed | None = None,
                mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """mlm_labels (B, T), -100 = not predicted; sop_labels (B,), 0 = in order, 1 = swapped;
        packed: several examples per row (models_lib.core.packing), sop_labels one per example."""
        if sop_labels is not None and self.sop_head is None:
            raise ValueError("sop_labels were given but this model has no SOP head (use_pooler=False).")
        hidden, pooled, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                                   packed=packed)
        out = self.masked_lm(hidden, mlm_labels, hidden_states=states, mlm_positions=mlm_positions)
        if self.sop_head is not None:
            out.sop_logits = self.sop_head(pooled)  # (B, 2)
            if sop_labels is not None:
                out.sop_loss = F.cross_entropy(out.sop_logits.float(), sop_labels)
                out.add_loss(out.sop_loss)
        return out
