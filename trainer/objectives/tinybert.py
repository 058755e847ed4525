"""TinyBERT's distillation (Jiao et al. 2020), beside DistilBERT's recipe (trainer.objectives.distill).

The student (a TinyBERT preset, randomly initialised) and the teacher (a BERT checkpoint
trained with the run's tokenizer, frozen, in eval mode, not part of the trained model) read the
same MLM batch. The run has two phases: for the first (1 - tinybert_prediction_share) of
max_steps the loss is the layer-to-layer one, emb_loss + att_loss + hid_loss over the uniform
layer map; for the rest it is pred_loss, the soft cross-entropy of the student's MLM logits
against the teacher's at tinybert_temperature (models_lib.families.tinybert has the losses).
Every part is reported in both phases (so the dashboard charts each throughout), as is the
student's own MLM loss (weight 0: what its perplexity is of).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.charts import BLUE, GREEN, ORANGE, ChartSpec, MetricSpec, train_then_valid
from trainer.objectives.base import Objective, Step, StepOutput
from trainer.objectives.distill import load_teacher
from trainer.objectives.encoder import ALL_UNITS, MLMCollator, MaskedBatch

LAYER_LOSSES = ("emb_loss", "att_loss", "hid_loss")
PURPLE = "#8a4fd0"  # the prediction loss, beside charts.py's three colours


class TinyBertStep(Step):
    """TinyBERT: layer distillation, then prediction-layer distillation, against a frozen teacher."""

    perplexities = {"perplexity": "mlm_loss"}

    def __init__(self, config: Any, model: nn.Module, device: str, teacher: nn.Module):
        super().__init__(config, model, device)
        self.teacher = teacher
        self.micro_batches = 0  # training calls so far (grad_accum per optimizer step); checkpointed

    @property
    def steps_done(self) -> int:
        return self.micro_batches // max(1, self.config.grad_accum)

    def predicting(self, index: int) -> bool:
        """Whether the step of 0-based `index` is in the prediction-layer phase: the last
        tinybert_prediction_share of max_steps."""
        cfg = self.config
        return index >= round((1.0 - cfg.tinybert_prediction_share) * cfg.max_steps)

    def weights_at(self, index: int) -> dict[str, float]:
        layer = 0.0 if self.predicting(index) else 1.0
        return {**{k: layer for k in LAYER_LOSSES}, "pred_loss": 1.0 - layer, "mlm_loss": 0.0}

    @property
    def loss_weights(self) -> dict[str, float]:
        """The weights of the step just trained (what a validation after it reports)."""
        return self.weights_at(max(self.steps_done - 1, 0))

    def __call__(self, batch: MaskedBatch, *, train: bool) -> StepOutput:
        from models_lib.families.tinybert import attention_scores, prediction_loss, tinybert_losses

        with attention_scores(self.model) as student_scores:
            student = self.model(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels,
                                 output_hidden_states=True, packed=batch.packed,
                                 mlm_positions=batch.mlm_positions)
        with torch.no_grad(), attention_scores(self.teacher) as teacher_scores:
            teacher = self.teacher(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels,
                                   output_hidden_states=True, packed=batch.packed,
                                   mlm_positions=batch.mlm_positions)
        parts = tinybert_losses(student.projected_states, student_scores, teacher.hidden_states, teacher_scores,
                                batch.attention_mask, batch.packed)
        n = student.mlm_targets.numel()
        parts["pred_loss"] = (prediction_loss(student.mlm_logits, teacher.mlm_logits, self.config.tinybert_temperature)
                              if n else student.mlm_logits.sum() * 0.0)
        weights = self.weights_at(self.steps_done) if train else self.loss_weights
        loss = sum(weights[k] * v for k, v in parts.items() if weights[k])
        if train:
            self.micro_batches += 1
        real = batch.attention_mask.sum()
        losses = {**{k: v.detach().float() for k, v in parts.items()}, "mlm_loss": student.mlm_loss.detach().float()}
        counts = {"emb_loss": real, "att_loss": real, "hid_loss": real, "pred_loss": float(n), "mlm_loss": float(n)}
        ratios = {"mlm_acc": ((student.mlm_logits.detach().argmax(-1) == student.mlm_targets).sum(), float(n))}
        return StepOutput(loss, losses, counts, ratios)

    def state_dict(self) -> dict[str, Any]:
        return {"micro_batches": self.micro_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.micro_batches = int(state.get("micro_batches", 0))


def prepare_student(config: Any, model: nn.Module, *, vocab_size: int, data_dir: Path | None,
                    device: str, **_: Any) -> dict[str, Any]:
    """Load the teacher (frozen) and hand it to the step; the student starts from its own
    initialisation, as in TinyBERT's general distillation."""
    return {"teacher": load_teacher(config, vocab_size=vocab_size, data_dir=data_dir).to(device)}


TINYBERT = Objective(
    name="tinybert",
    label="TinyBERT distillation",
    help="A narrow student learns the teacher's embeddings, attention scores and hidden states layer by layer "
         "(mean squared errors, with learned projections to a wider teacher), then its soft predictions.",
    collator=MLMCollator, step=TinyBertStep, units=ALL_UNITS, requires=("mlm",), combines=("mlm",),
    packs=True,
    metrics=("emb_loss", "att_loss", "hid_loss", "pred_loss"),
    settings={"tinybert_temperature": (0.5, 20.0), "tinybert_prediction_share": (0.0, 1.0)},
    collator_label="MLM + TinyBERT distillation",
    prepare=prepare_student,
    chart_specs=(ChartSpec("tinybert", "TinyBERT distillation losses", order=45, legend="metric_split"),),
    charts=train_then_valid(
        MetricSpec("emb_loss", "embeddings", chart="tinybert", color=BLUE),
        MetricSpec("att_loss", "attention", chart="tinybert", color=ORANGE),
        MetricSpec("hid_loss", "hidden states", chart="tinybert", color=GREEN),
        MetricSpec("pred_loss", "predictions", chart="tinybert", color=PURPLE),
    ),
)
