"""BERT: the backbone and the pre-training model (MLM + NSP).

BertConfig is the encoder family's one config class (EncoderConfig, whose defaults are BERT's);
BertConfig.from_preset accepts every preset of every family (models_lib.families.presets).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.config import EncoderConfig
from models_lib.core.encoder import TransformerEncoder
from models_lib.core.packing import Packed
from models_lib.heads.pretraining import NSPHead
from models_lib.families.presets import BERT_PRESETS
from models_lib.families.pretraining import IGNORE_INDEX, EncoderForPreTraining, PreTrainingOutput

BertConfig = EncoderConfig  # the name BERT code has always used

__all__ = ["BERT_PRESETS", "IGNORE_INDEX", "BertConfig", "BertForPreTraining", "BertModel", "PreTrainingOutput"]


class BertModel(TransformerEncoder):
    """The BERT backbone. forward -> EncoderOutput(hidden_states (B, T, H), pooled (B, H) | None);
    encode -> (B, T, H)."""


class BertForPreTraining(EncoderForPreTraining):
    """BERT with its two pre-training heads: masked language model and next-sentence prediction."""

    backbone_name = "bert"
    backbone_class = BertModel
    families = ("bert",)

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        # NSP classifies the pooled [CLS]; a model without a pooler has no NSP head.
        return {**super().build_heads(config), "nsp_head": NSPHead(config.hidden_size) if config.use_pooler else None}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                nsp_labels: torch.Tensor | None = None, *, output_hidden_states: bool = False,
                packed: Packed | None = None,
                mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """mlm_labels (B, T), -100 = not predicted; nsp_labels (B,), 0 = IsNext, 1 = NotNext;
        packed: several examples per row (models_lib.core.packing), nsp_labels one per example."""
        if nsp_labels is not None and self.nsp_head is None:
            raise ValueError("nsp_labels were given but this model has no NSP head (use_pooler=False).")
        hidden, pooled, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                                   packed=packed)
        out = self.masked_lm(hidden, mlm_labels, hidden_states=states, mlm_positions=mlm_positions)
        if self.nsp_head is not None:
            out.nsp_logits = self.nsp_head(pooled)  # (B, 2)
            if nsp_labels is not None:
                out.nsp_loss = F.cross_entropy(out.nsp_logits.float(), nsp_labels)
                out.add_loss(out.nsp_loss)
        return out
