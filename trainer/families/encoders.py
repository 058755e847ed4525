"""What the encoder families (BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA, DistilBERT, UniLM) share:
one configured encoder (models_lib.core.config.EncoderConfig), presets named `{family}-{size}`
in models_lib's one preset module, BERT's masking units and BERT's Adam settings. Their
explorer behaviour is Family's default (fill-mask, sentence pairs, encoder attention)."""
from __future__ import annotations

ENCODER_CONFIG = "models_lib.core.config:EncoderConfig"
# One formula for every encoder stack with an MLM head (trainer.training.flops, its docstring).
ENCODER_FLOPS = "trainer.training.flops:encoder_flops"
# Units any MLM-style objective takes ("span" needs SpanBERT's SBO).
WORD_UNITS = ("token", "word", "phrase", "ngram")
# BERT paper: Adam lr 1e-4, b1 0.9, b2 0.999, wd 0.01, warm-up then linear decay.
BERT_ADAM = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"}


def preset_table(family: str) -> str:
    """The import string of a family's preset table in models_lib.families.presets."""
    return f"models_lib.families.presets:{family.upper()}_PRESETS"
