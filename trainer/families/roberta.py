"""RoBERTa (Liu et al. 2019): BERT's encoder with a byte-level BPE vocabulary, dynamic masking,
packed full-length inputs and no NSP."""
from __future__ import annotations

from trainer.families.base import Family
from trainer.families.encoders import ENCODER_CONFIG, ENCODER_FLOPS, WORD_UNITS, preset_table

FAMILY = Family(
    name="roberta",
    label="RoBERTa",
    preset_table=preset_table("roberta"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.roberta:RobertaForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm",),
    required_objectives=("mlm",),
    default_objectives=("mlm",),
    tokenizer_algorithms=("bpe",),
    masking_units=WORD_UNITS,
    # Liu et al. 2019: Adam b2 0.98 (stabler with large batches), eps 1e-6, wd 0.01; lr 6e-4 (base).
    optimizer_defaults={"lr": 6e-4, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"},
    default_preset="roberta-tiny",
    refusals={"nsp": "RoBERTa is trained without next sentence prediction (NSP): Liu et al. found that "
                     "dropping it does not hurt. Train MLM only."},
    about="BERT's encoder with a byte-level BPE vocabulary, dynamic masking, packed full-length "
          "inputs and no NSP.",
    hf_model_types=("roberta",),
    hf_token_types=False,
)
