"""Replaced token detection (ELECTRA, Clark et al. 2020).

The generator reads the MLM batch (trainer.objectives.encoder) and fills the masked positions
with sampled tokens; the discriminator tells for every token whether it was replaced. Loss =
generator MLM + rtd_weight x RTD. The generator samples from a torch.Generator of its own whose
state is checkpointed (exact resume); validation samples from a fresh one seeded the same way
every time (the same corrupted batches).
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn

from trainer.charts import BLUE, GREEN, ORANGE, TRAIN, VALID, MetricSpec
from trainer.objectives.base import Objective, Step, StepOutput
from trainer.objectives.encoder import ALL_UNITS, MLMCollator, MaskedBatch

# Seed namespaces of the ELECTRA sampler (independent of the data generators' streams).
_SAMPLE_TRAIN, _SAMPLE_VALID = 11, 12


def seeded_generator(device: str, seed: list[int]) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(hashlib.sha256(repr(seed).encode()).digest()[:8], "little") & (2**63 - 1))
    return g


class ElectraStep(Step):
    """Generator MLM + rtd_weight x discriminator RTD, sampling from a checkpointed generator."""

    perplexities = {"perplexity": "mlm_loss"}

    def __init__(self, config: Any, model: nn.Module, device: str):
        super().__init__(config, model, device)
        self.sampler = seeded_generator(device, [_SAMPLE_TRAIN, config.seed])
        self.valid_sampler = self.sampler

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, "rtd_loss": self.config.rtd_weight}

    def __call__(self, batch: MaskedBatch, *, train: bool) -> StepOutput:
        out = self.model(**batch.model_inputs(), rtd_weight=self.config.rtd_weight,
                         generator=self.sampler if train else self.valid_sampler)
        n = out.mlm_targets.numel()
        losses = {"mlm_loss": out.mlm_loss.detach().float(), "rtd_loss": out.rtd_loss.detach().float()}
        weights = {"mlm_loss": float(n), "rtd_loss": out.rtd_tokens}
        ratios = {
            "mlm_acc": ((out.mlm_logits.detach().argmax(-1) == out.mlm_targets).sum(), float(n)),
            "rtd_acc": (out.rtd_correct, out.rtd_tokens),
            "rtd_precision": (out.rtd_true_positives, out.rtd_predicted_positives),
            "rtd_recall": (out.rtd_true_positives, out.rtd_positives),
        }
        return StepOutput(out.loss, losses, weights, ratios)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "sampler" in state:
            self.sampler.set_state(state["sampler"].cpu())

    def start_validation(self) -> None:
        self.valid_sampler = seeded_generator(self.device, [_SAMPLE_VALID, self.config.seed])


RTD = Objective(
    name="rtd",
    label="Replaced token detection (RTD)",
    help="A small generator fills the masked positions with sampled tokens; the discriminator tells "
         "for every token whether it was replaced. Loss = generator MLM + rtd_weight x RTD (ELECTRA).",
    collator=MLMCollator, step=ElectraStep, units=ALL_UNITS, combines=("mlm",),
    metrics=("rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"),
    settings=("rtd_weight",),
    collator_label="MLM + RTD (ELECTRA)",
    charts=(
        MetricSpec("mlm_loss", "generator", chart="electra_loss", color=BLUE),
        MetricSpec("rtd_loss", "discriminator", chart="electra_loss", color=GREEN, axis="y2"),
        MetricSpec("rtd_precision", "precision", chart="rtd", splits=TRAIN, color=BLUE),
        MetricSpec("rtd_recall", "recall", chart="rtd", splits=TRAIN, color=ORANGE),
        MetricSpec("rtd_acc", "accuracy", chart="rtd", splits=TRAIN, color=GREEN),
        MetricSpec("rtd_precision", "precision", chart="rtd", splits=VALID, color=BLUE),
        MetricSpec("rtd_recall", "recall", chart="rtd", splits=VALID, color=ORANGE),
    ),
)
