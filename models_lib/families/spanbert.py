"""SpanBERT: BERT's encoder trained with span masking, MLM + the span boundary objective (SBO).

Single segment, no NSP. The collator masks whole spans (lengths ~ Geometric(0.2) clipped at
10) and, for every masked token, writes one row of `sbo_pairs` (see heads.SBOHead):
    (batch index, left boundary s-1, right boundary e+1, target position i, relative position i-s)
"""
from __future__ import annotations

import torch
from torch import nn

from models_lib.core.config import SpanBertConfig
from models_lib.core.packing import Packed
from models_lib.heads.pretraining import SBOHead
from models_lib.families.pretraining import EncoderForPreTraining, PreTrainingOutput, token_loss


class SpanBertForPreTraining(EncoderForPreTraining):
    backbone_name = "bert"
    families = ("spanbert",)

    def build_heads(self, config: SpanBertConfig) -> dict[str, nn.Module | None]:
        return {**super().build_heads(config), "sbo_head": SBOHead(config, config.max_span_length)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                sbo_pairs: torch.Tensor | None = None, sbo_labels: torch.Tensor | None = None,
                *, output_hidden_states: bool = False, packed: Packed | None = None,
                mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """mlm_labels (B, T), -100 = not predicted; sbo_pairs (N, 5) long; sbo_labels (N,) the token
        at each pair's target position (read from mlm_labels when None). loss = mlm + sbo.
        packed: several examples per row (models_lib.core.packing); sbo_pairs then index rows
        and columns of the packed batch."""
        hidden, _, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                              packed=packed)
        out = self.masked_lm(hidden, mlm_labels, hidden_states=states, mlm_positions=mlm_positions)
        if sbo_pairs is not None:
            if sbo_pairs.dim() != 2 or sbo_pairs.shape[1] != 5:
                raise ValueError(f"sbo_pairs must be (N, 5): batch, left, right, target, relative position; "
                                 f"got shape {tuple(sbo_pairs.shape)}.")
            if sbo_labels is None:
                if mlm_labels is None:
                    raise ValueError("sbo_pairs need sbo_labels, or mlm_labels to read them from.")
                sbo_labels = mlm_labels[sbo_pairs[:, 0], sbo_pairs[:, 3]]
            scores, out.sbo_logits = self.sbo_head.loss_logits(hidden, sbo_pairs, self.word_embeddings)  # (N, V)
            out.sbo_targets = sbo_labels
            out.sbo_loss = token_loss(scores, sbo_labels)
            out.add_loss(out.sbo_loss)
        return out
