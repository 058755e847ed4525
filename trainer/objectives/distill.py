"""Knowledge distillation (DistilBERT, Sanh et al. 2019).

The student (half the teacher's layers, initialised from every other teacher layer) and the
teacher (a BERT checkpoint trained with the run's tokenizer, frozen, in eval mode, not part of
the trained model) read the same MLM batch (trainer.objectives.encoder). soft_loss is
KL(teacher_T || student_T) * T^2 at the masked positions, mlm_loss the student's MLM loss and
cos_loss the cosine loss between their final hidden states (real tokens), weighted 5 / 2 / 1
by default.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.errors import ConfigError
from trainer.charts import BLUE, GREEN, ORANGE, MetricSpec, train_then_valid
from trainer.objectives.base import Objective, Step, StepOutput
from trainer.objectives.encoder import ALL_UNITS, MLMCollator, MaskedBatch


class DistillationStep(Step):
    """DistilBERT: soft targets + MLM + cosine, against a frozen teacher."""

    perplexities = {"perplexity": "mlm_loss"}

    def __init__(self, config: Any, model: nn.Module, device: str, teacher: nn.Module):
        super().__init__(config, model, device)
        self.teacher = teacher

    @property
    def loss_weights(self) -> dict[str, float]:
        return self.config.distill_weights

    def __call__(self, batch: MaskedBatch, *, train: bool) -> StepOutput:
        from models_lib.families.distilbert import distillation_losses

        cfg = self.config
        student = self.model(batch.input_ids, batch.attention_mask, None, batch.mlm_labels,
                             output_hidden_states=True, packed=batch.packed,
                             mlm_positions=batch.mlm_positions)
        with torch.no_grad():
            teacher = self.teacher(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels,
                                   output_hidden_states=True, packed=batch.packed,
                                   mlm_positions=batch.mlm_positions)
        # Soft targets over the masked positions (the (N, V) logits of both models, same order).
        soft, cos = distillation_losses(student.mlm_logits, teacher.mlm_logits, student.hidden_states[-1],
                                        teacher.hidden_states[-1], batch.attention_mask,
                                        temperature=cfg.distill_temperature)
        loss = cfg.distill_soft_weight * soft + cfg.distill_mlm_weight * student.mlm_loss + cfg.distill_cos_weight * cos
        n = student.mlm_targets.numel()
        losses = {"soft_loss": soft.detach().float(), "mlm_loss": student.mlm_loss.detach().float(),
                  "cos_loss": cos.detach().float()}
        weights = {"soft_loss": float(n), "mlm_loss": float(n), "cos_loss": batch.attention_mask.sum()}
        ratios = {"mlm_acc": ((student.mlm_logits.detach().argmax(-1) == student.mlm_targets).sum(), float(n))}
        return StepOutput(loss, losses, weights, ratios)


def prepare_student(config: Any, model: nn.Module, *, vocab_size: int, data_dir: Path | None,
                    device: str, **_: Any) -> dict[str, Any]:
    """Load the teacher, start the student from it, and hand the teacher to the step."""
    teacher = load_teacher(config, vocab_size=vocab_size, data_dir=data_dir)
    init_student(model, teacher)
    return {"teacher": teacher.to(device)}


def load_teacher(config: Any, *, vocab_size: int, data_dir: Path | None) -> nn.Module:
    """The DistilBERT teacher: a BERT checkpoint trained with the run's tokenizer, frozen, in eval
    mode. The catalog's teacher check (trainer.catalog) has run before: this loads."""
    from models_lib.checkpoint import load_model
    from trainer.prep.tokenization import tokenizers_differ

    folder = Path(config.teacher_checkpoint)
    if data_dir is not None and tokenizers_differ(folder, data_dir):
        raise ConfigError(f"The teacher checkpoint {folder.name} was trained with another tokenizer than this "
                          f"run's; a student reads the teacher's vocabulary, so train it on the teacher's "
                          f"tokenizer.")
    try:
        teacher = load_model(folder, map_location="cpu")
    except ValueError as e:
        raise ConfigError(f"The teacher checkpoint {folder.name} cannot be loaded: {e}") from None
    if teacher.config.vocab_size != vocab_size:
        raise ConfigError(f"The teacher's vocabulary has {teacher.config.vocab_size:,} tokens, the run's tokenizer "
                          f"{vocab_size:,}; train the student on the teacher's tokenizer.")
    if not hasattr(teacher, "mlm_head"):
        raise ConfigError(f"The teacher checkpoint {folder.name} has no masked-LM head to distil.")
    teacher.eval().requires_grad_(False)
    return teacher


@torch.no_grad()
def init_student(student: nn.Module, teacher: nn.Module) -> None:
    """Copy models_lib's distil_from_teacher initialisation (teacher layers 0, 2, 4, ...,
    embeddings, MLM head) into the student built from the run's config."""
    from models_lib.families.distilbert import distil_from_teacher

    try:
        student.load_state_dict(distil_from_teacher(teacher).state_dict(), strict=True)
    except (RuntimeError, ValueError) as e:  # the catalog's teacher check covers this first; belt and braces
        raise ConfigError(f"The student does not fit its teacher: {e}") from None


DISTILL = Objective(
    name="distill",
    label="Knowledge distillation",
    help="A student with half the teacher's layers learns the teacher's soft predictions at a "
         "temperature, the true tokens (MLM) and the direction of its hidden states (DistilBERT).",
    collator=MLMCollator, step=DistillationStep, units=ALL_UNITS, requires=("mlm",), combines=("mlm",),
    packs=True,
    metrics=("soft_loss", "cos_loss"),
    settings={"distill_temperature": (0.5, 20.0), "distill_soft_weight": (0.0, 100.0),
              "distill_mlm_weight": (0.0, 100.0), "distill_cos_weight": (0.0, 100.0)},  # DistilBERT: 2, 5, 2, 1
    collator_label="MLM + distillation (DistilBERT)",
    prepare=prepare_student,
    charts=train_then_valid(
        MetricSpec("soft_loss", "soft targets", chart="distill", color=BLUE),
        MetricSpec("mlm_loss", "MLM", chart="distill", color=ORANGE),
        MetricSpec("cos_loss", "cosine", chart="distill", color=GREEN),
    ),
)
