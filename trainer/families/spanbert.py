"""SpanBERT (Joshi et al. 2020): BERT's encoder trained on single segments with span masking and
the span boundary objective (SBO), whose position table must cover the longest span."""
from __future__ import annotations

from typing import Any

from trainer.errors import ConfigError
from trainer.families.base import Family
from trainer.families.encoders import BERT_ADAM, ENCODER_CONFIG, ENCODER_FLOPS, preset_table

LONGEST_SPAN = 10  # span lengths ~ Geometric(0.2), clipped at 10 words (trainer.objectives.masking)


class SpanBertFamily(Family):
    def check_model_config(self, model_cfg: Any) -> None:
        if getattr(model_cfg, "max_span_length", LONGEST_SPAN) < LONGEST_SPAN:
            raise ConfigError(f"SpanBERT's spans are up to {LONGEST_SPAN} words long, so max_span_length (the SBO "
                              f"head's position table) must be at least {LONGEST_SPAN}, not "
                              f"{model_cfg.max_span_length}.")


FAMILY = SpanBertFamily(
    name="spanbert",
    label="SpanBERT",
    preset_table=preset_table("spanbert"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.spanbert:SpanBertForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "sbo"),
    required_objectives=("mlm", "sbo"),
    default_objectives=("mlm", "sbo"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=("span",),
    optimizer_defaults=dict(BERT_ADAM),
    default_preset="spanbert-tiny",
    refusals={"nsp": "SpanBERT trains on single segments without next sentence prediction (NSP)."},
    about="BERT's encoder trained on single segments with span masking and the span boundary objective.",
)
