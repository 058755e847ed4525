"""Replaced token detection (ELECTRA, Clark et al. 2020).

The generator reads the MLM batch (trainer.objectives.encoder) and fills the masked positions
with sampled tokens; the discriminator tells for every token whether it was replaced. Loss =
generator MLM + rtd_weight x RTD. The generator samples from a torch.Generator of its own whose
state is checkpointed (exact resume); validation samples from a fresh one seeded the same way
every time (the same corrupted batches). The step draws one uniform per labelled position from
it and the model samples by inverse CDF (models_lib.families.electra.sample_tokens), so that
the compiled forward holds no Generator.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
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
        inputs = batch.model_inputs()
        sampler = self.sampler if train else self.valid_sampler
        if batch.mlm_positions is not None:
            # One uniform per labelled position, drawn here, outside the (compiled) model, from the
            # checkpointed sampler: the model's sampling then holds no Generator (a graph break).
            import torch._dynamo

            uniforms = torch.rand(batch.mlm_positions.shape[0], generator=sampler, device=sampler.device)
            # Their count changes from batch to batch, as mlm_positions' does (which a compiled run
            # marks dynamic, speedups.mark_dynamic): left static, each new count would compile again.
            torch._dynamo.maybe_mark_dynamic(uniforms, 0)
            inputs["uniforms"] = uniforms
        else:
            inputs["generator"] = sampler
        out = self.model(**inputs, rtd_weight=self.config.rtd_weight)
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



def inspect_replacements(checkpoint_dir: str | Path | None, batch: Any, bundle: Any,
                  seed: int) -> list[dict[str, Any]] | None:
    """Per example, the ELECTRA generator's replacements and the discriminator's verdicts (the
    shape is in trainer.inference.inspection's docstring); None unless `checkpoint_dir` holds a model
    with a generator and a discriminator. The masking inspector shows it beside the batch.

    The checkpoint's generator samples a token at every selected position of this batch (as in
    training; the sampling is seeded by `seed`), and its discriminator scores every token of the
    corrupted sequence."""
    if checkpoint_dir is None:
        return None
    import torch

    from models_lib.checkpoint import load_model, read_model_config

    try:
        read_model_config(checkpoint_dir)
    except ValueError:
        return None  # no readable checkpoint: show the batch without model verdicts
    model = load_model(checkpoint_dir).eval()
    if not hasattr(model, "discriminator"):
        return None
    with torch.no_grad():
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels,
                    generator=torch.Generator().manual_seed(seed))
    p_replaced = torch.sigmoid(out.rtd_logits.float())  # (B, T)
    selected = (batch.mlm_labels != -100).nonzero().tolist()  # (N, 2), row-major like sampled_ids
    sampled = out.sampled_ids.tolist()
    views: list[dict[str, Any]] = [{"generator": [], "discriminator": [], "message": None}
                                   for _ in range(batch.input_ids.shape[0])]
    for (row, position), new_id in zip(selected, sampled):
        original = int(batch.mlm_labels[row, position])
        views[row]["generator"].append({
            "position": position, "original": bundle.id_to_token(original),
            "sampled": bundle.id_to_token(new_id), "replaced": new_id != original,
        })
    lengths = batch.attention_mask.sum(-1).tolist()
    for row, view in enumerate(views):
        view["discriminator"] = [
            {"position": t, "token": bundle.id_to_token(int(out.corrupted_ids[row, t])),
             "replaced": bool(out.rtd_labels[row, t]), "p_replaced": round(float(p_replaced[row, t]), 4)}
            for t in range(int(lengths[row]))]
        n = sum(g["replaced"] for g in view["generator"])
        flagged = sum(d["p_replaced"] > 0.5 for d in view["discriminator"])
        view["message"] = (f"the generator replaced {n} of {len(view['generator'])} selected tokens; "
                           f"the discriminator flags {flagged} tokens as replaced (p > 0.5).")
    return views


RTD = Objective(
    name="rtd",
    label="Replaced token detection (RTD)",
    help="A small generator fills the masked positions with sampled tokens; the discriminator tells "
         "for every token whether it was replaced. Loss = generator MLM + rtd_weight x RTD (ELECTRA).",
    collator=MLMCollator, step=ElectraStep, units=ALL_UNITS, combines=("mlm",),
    packs=True,
    metrics=("rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"),
    settings={"rtd_weight": (0.0, 1000.0)},  # ELECTRA: 50
    collator_label="MLM + RTD (ELECTRA)",
    inspect=inspect_replacements,
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
