"""BERT (Devlin et al. 2019): a post-LN encoder with segment embeddings, trained with MLM and,
optionally, next sentence prediction. The encoder default every other encoder family varies."""
from __future__ import annotations

from trainer.families.base import Family
from trainer.families.encoders import BERT_ADAM, ENCODER_FLOPS, WORD_UNITS

FAMILY = Family(
    name="bert",
    label="BERT",
    preset_table="models_lib.families.bert:BERT_PRESETS",
    config_class="models_lib.families.bert:BertConfig",
    model_class="models_lib.families.bert:BertForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "nsp"),
    required_objectives=("mlm",),
    default_objectives=("mlm", "nsp"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    optimizer_defaults=dict(BERT_ADAM),
    default_preset="bert-tiny",
    about="Post-LN encoder with segment embeddings; MLM, optionally with next sentence prediction.",
    hf_model_types=("bert",),
)
