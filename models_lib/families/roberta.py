"""RoBERTa: BERT's encoder with other settings, trained with MLM only (no NSP, no pooler).

What differs is all in the config (presets.ROBERTA_PRESETS): position ids counted from the
padding token (positions_from_padding; 514 rows for 512 tokens), one token type, LayerNorm
eps 1e-5, a 50k byte-level BPE vocabulary. Its LM head always uses exact GELU.
"""
from __future__ import annotations

from models_lib.families.pretraining import EncoderForPreTraining


class RobertaForPreTraining(EncoderForPreTraining):
    """forward(input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None) -> PreTrainingOutput."""

    backbone_name = "roberta"
    families = ("roberta",)
    mlm_activation = "gelu"  # transformers' RobertaLMHead ignores hidden_act
