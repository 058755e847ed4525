"""TinyBERT (Jiao et al. 2020): a narrow BERT student distilled layer by layer from a trained
BERT teacher (embeddings, attention scores, hidden states, then predictions). Its shape is its
preset (TinyBERT-4: 4 layers, hidden 312, 12 heads, FFN 1200) plus model_overrides; the
teacher decides only the width of the learned projections (teacher_hidden_size) and the
number of heads, which the attention loss compares head by head."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError
from trainer.families.distilbert import DistilBertFamily
from trainer.families.encoders import ENCODER_FLOPS, WORD_UNITS, preset_table

if TYPE_CHECKING:
    from trainer.config import RunConfig


class TinyBertFamily(DistilBertFamily):
    def check_run(self, config: "RunConfig") -> None:
        if not config.teacher_checkpoint:
            raise ConfigError("TinyBERT distils a trained BERT teacher: set teacher_checkpoint to the folder of a "
                              "BERT checkpoint trained with the same tokenizer (on the web form, choose one of your "
                              "BERT checkpoints).")

    def validate_teacher(self, config: "RunConfig") -> dict[str, Any]:
        """The teacher's model_config.json after checking that the student fits it: no more layers
        than the teacher (each student layer learns from teacher layer m * N / M), the teacher's
        number of heads, projections to the teacher's width, and positions for seq_len."""
        meta = self.read_teacher(config)
        teacher = meta["config"]
        name = Path(config.teacher_checkpoint).name
        model_cfg = self.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
        layers, heads = int(teacher.get("num_layers", 12)), int(teacher.get("num_heads", 12))
        if model_cfg.num_layers > layers:
            raise ConfigError(f"The student has {model_cfg.num_layers} layers but the teacher {name} only {layers}; "
                              f"TinyBERT maps each student layer to a deeper teacher layer, so choose at most {layers}.")
        if model_cfg.num_heads != heads:
            raise ConfigError(f"The student has {model_cfg.num_heads} attention heads and the teacher {name} {heads}; "
                              f"TinyBERT's attention loss compares them head by head, so set num_heads to {heads}.")
        wanted = self.student_overrides(teacher)
        if model_cfg.teacher_hidden_size != wanted["teacher_hidden_size"]:
            raise ConfigError(f"The teacher {name} is {wanted['teacher_hidden_size']} wide, so the student's "
                              f"projections must map to that width; set model_overrides to "
                              f"{json.dumps({**config.model_overrides, **wanted})}.")
        positions = int(teacher.get("max_position_embeddings", 512))
        if config.seq_len > positions:
            raise ConfigError(f"seq_len {config.seq_len} is longer than the teacher's {positions} positions; the "
                              f"teacher reads the same sequences, so use at most {positions}.")
        return meta

    def student_overrides(self, teacher_config: dict[str, Any]) -> dict[str, Any]:
        """The field a teacher asks of a TinyBERT student: the width W_e and W_h map to."""
        return {"teacher_hidden_size": int(teacher_config.get("hidden_size", 768))}


FAMILY = TinyBertFamily(
    name="tinybert",
    label="TinyBERT",
    preset_table=preset_table("tinybert"),
    config_class="models_lib.core.config:TinyBertConfig",
    model_class="models_lib.families.tinybert:TinyBertForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "tinybert"),
    required_objectives=("mlm", "tinybert"),
    default_objectives=("mlm", "tinybert"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    # Jiao et al. 2020, general distillation: Adam, lr 1e-4, warm-up then linear decay.
    optimizer_defaults={"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"},
    default_preset="tinybert-4",
    config_fields=("teacher_checkpoint",),  # the objective's own settings follow it
    teacher_families=("bert",),
    refusals={"nsp": "TinyBERT distils the teacher's layers and masked-LM predictions; it has no next sentence "
                     "prediction (NSP)."},
    about="A narrow BERT student distilled layer by layer from a trained BERT teacher: embeddings, "
          "attention scores and hidden states, then its predictions.",
)
