"""ALBERT (Lan et al. 2020): factorised embeddings, layers that share weights, n-gram masking and
sentence order prediction."""
from __future__ import annotations

from trainer.families.base import Family, ModelField
from trainer.families.encoders import BERT_ADAM, ENCODER_CONFIG, ENCODER_FLOPS, preset_table

FAMILY = Family(
    name="albert",
    label="ALBERT",
    preset_table=preset_table("albert"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.albert:AlbertForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "sop"),
    required_objectives=("mlm",),
    default_objectives=("mlm", "sop"),
    tokenizer_algorithms=("unigram",),
    masking_units=("ngram", "token", "word", "phrase"),
    optimizer_defaults=dict(BERT_ADAM),  # ALBERT used LAMB (lr 0.00176); AdamW here
    default_preset="albert-tiny",
    model_fields=(
        ModelField("share_layers", "Cross-layer sharing",
                   "Which weights the layers share: all of them (ALBERT's default), only the attention, "
                   "only the feed-forward network, or none.",
                   choices=("all", "attention", "ffn", "none"),
                   choice_labels=("All layers", "Attention only", "Feed-forward only", "None")),
    ),
    refusals={"nsp": "ALBERT replaces next sentence prediction (NSP) with sentence order prediction "
                     "(SOP); choose SOP."},
    about="Factorised embeddings (vocab x E, then E -> H) and layers that share weights; MLM with "
          "n-gram masking plus sentence order prediction.",
    hf_model_types=("albert",),
)
