"""DistilBERT (Sanh et al. 2019): a student with half a trained BERT teacher's layers, distilled
from its soft predictions and hidden states. The teacher is a checkpoint on disk, so the run
config names it (teacher_checkpoint) and this family checks that the student's preset fits it."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError
from trainer.families.base import Family
from trainer.families.encoders import ENCODER_CONFIG, ENCODER_FLOPS, WORD_UNITS, preset_table

if TYPE_CHECKING:
    from trainer.config import RunConfig

# Fields of the student that follow from the teacher (the rest come from the preset).
STUDENT_SHAPE = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings")


class DistilBertFamily(Family):
    def check_run(self, config: "RunConfig") -> None:
        if not config.teacher_checkpoint:
            raise ConfigError("DistilBERT distils a trained BERT teacher: set teacher_checkpoint to the folder of a "
                              "BERT checkpoint trained with the same tokenizer (on the web form, choose one of your "
                              "BERT checkpoints).")

    def validate_teacher(self, config: "RunConfig") -> dict[str, Any]:
        """The teacher's model_config.json ({"family", "config", ...}), after checking that the
        folder exists and holds a checkpoint of a teacher family that the student's preset fits.
        ConfigError otherwise. The engine, the CLI and the web app call this before training."""
        meta = self.read_teacher(config)
        model_cfg = self.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
        folder = Path(config.teacher_checkpoint)
        teacher = dict(meta["config"])
        if (teacher.get("share_layers", "none") != "none" or teacher.get("norm_placement", "post") != "post"
                or teacher.get("embedding_size") is not None):
            raise ConfigError(f"The teacher checkpoint {folder.name} is a BERT with shared layers, pre-LN blocks or "
                              f"factorised embeddings; a DistilBERT student copies every other layer of a plain "
                              f"BERT.")
        wanted = self.student_overrides(teacher)
        have = {k: getattr(model_cfg, k) for k in STUDENT_SHAPE}
        if have != wanted:
            shape = f"L{teacher.get('num_layers')} H{teacher.get('hidden_size')} A{teacher.get('num_heads')}"
            differ = ", ".join(f"{k} {have[k]} (needs {wanted[k]})" for k in STUDENT_SHAPE if have[k] != wanted[k])
            raise ConfigError(f"The student must have half the teacher's layers and its width: the teacher is "
                              f"{shape}, but the {config.preset} preset with these model_overrides gives "
                              f"{differ}. Set model_overrides to {json.dumps(wanted)}.")
        return meta

    def read_teacher(self, config: "RunConfig") -> dict[str, Any]:
        """The teacher's model_config.json ({"family", "config", ...}) after checking that the
        folder holds a complete checkpoint of one of the teacher families; ConfigError otherwise."""
        from trainer import families

        if not config.teacher_checkpoint:
            raise ConfigError(f"{self.label} has no teacher to check: teacher_checkpoint is empty.")
        folder = Path(config.teacher_checkpoint)
        meta_path = folder / "model_config.json"
        if not meta_path.is_file() or not (folder / "model.safetensors").is_file():
            raise ConfigError(f"The teacher checkpoint {folder} does not exist or is incomplete "
                              f"(model_config.json and model.safetensors are needed).")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            meta["config"] = dict(meta["config"])
            family = meta.get("family", "bert")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError):
            raise ConfigError(f"The teacher checkpoint {folder.name} has an unreadable model_config.json.") from None
        if family not in self.teacher_families:
            label = families.get(family).label if family in families.names() else family
            raise ConfigError(f"The teacher checkpoint {folder.name} holds a model of another family ({label}); "
                              f"{self.label}'s teacher must be a BERT checkpoint.")
        return meta

    def student_overrides(self, teacher_config: dict[str, Any]) -> dict[str, Any]:
        """The student's shape fields for a teacher's config dict: half its layers (rounded up, as
        distil_from_teacher takes layers 0, 2, 4, ...), the same width, heads and positions."""
        from models_lib.core.config import EncoderConfig  # defaults for fields an old config lacks

        base = EncoderConfig()
        value = {k: teacher_config.get(k, getattr(base, k)) for k in STUDENT_SHAPE}
        if value["intermediate_size"] is None:
            value["intermediate_size"] = 4 * value["hidden_size"]
        value["num_layers"] = math.ceil(int(value["num_layers"]) / 2)
        return value


FAMILY = DistilBertFamily(
    name="distilbert",
    label="DistilBERT",
    preset_table=preset_table("distilbert"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.distilbert:DistilBertForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "distill"),
    required_objectives=("mlm", "distill"),
    default_objectives=("mlm", "distill"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    # Sanh et al. 2019: Adam lr 5e-4, eps 1e-6, warm-up then linear decay.
    optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"},
    default_preset="distilbert-tiny",
    config_fields=("teacher_checkpoint",),  # the distillation objective's own settings follow it
    teacher_families=("bert",),  # models_lib.families.distilbert.distil_from_teacher copies a BERT
    refusals={"nsp": "DistilBERT drops token types and the pooler, so it has no next sentence "
                     "prediction (NSP)."},
    about="A student with half a trained BERT teacher's layers, distilled from its soft predictions "
          "and hidden states.",
    hf_model_types=("distilbert",),
    hf_token_types=False,
)
