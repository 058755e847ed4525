"""ELECTRA (Clark et al. 2020): a small generator fills the masks, a discriminator spots replaced
tokens. Only the generator has an MLM head, so fill-mask asks it (and says so)."""
from __future__ import annotations

from typing import Any

from trainer.families import activations
from trainer.families.base import Family, ModelField
from trainer.families.encoders import ENCODER_CONFIG, WORD_UNITS, preset_table

GENERATOR_NOTE = ("ELECTRA: these are the generator's predictions; the discriminator, the model ELECTRA keeps, "
                  "only tells original from replaced tokens.")


class ElectraFamily(Family):
    def activation_bytes(self, model_cfg: Any, batch: Any) -> int:
        """The discriminator's stack plus the generator's, which runs too: same depth, narrower."""
        generator = activations.block_elements(model_cfg.generator_config(), batch) * model_cfg.num_layers
        return super().activation_bytes(model_cfg, batch) + int(activations.ACTIVATION_BYTES * generator)

    def fill_mask_model(self, model: Any) -> tuple[Any, str]:
        generator = getattr(model, "generator", None)
        if generator is not None and hasattr(generator, "mlm_head"):
            return generator, GENERATOR_NOTE
        return model, ""  # a discriminator alone (an imported ElectraForPreTraining folder) has no MLM head


FAMILY = ElectraFamily(
    name="electra",
    label="ELECTRA",
    preset_table=preset_table("electra"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.electra:ElectraForPreTraining",
    flops_formula="trainer.training.flops:electra_flops",
    objectives=("mlm", "rtd"),
    required_objectives=("mlm", "rtd"),
    default_objectives=("mlm", "rtd"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    # Clark et al. 2020: Adam lr 5e-4 (small), eps 1e-6, wd 0.01, linear decay.
    optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"},
    default_preset="electra-tiny",
    model_fields=(
        ModelField("generator_size", "Generator size",
                   "The generator's width as a fraction of the discriminator's (ELECTRA: 1/4 to 1/2; "
                   "hidden size, FFN and heads scale, depth stays).",
                   bounds=(0.25, 0.5)),
    ),
    refusals={"nsp": "ELECTRA's discriminator is trained on single segments without next sentence "
                     "prediction (NSP)."},
    about="A small generator fills the masks, a discriminator spots replaced tokens; only the "
          "discriminator is kept for fine-tuning.",
    hf_model_types=("electra",),
)
