"""ELECTRA: a small generator fills masked positions, a discriminator spots the replaced tokens.

Both are the one encoder. They share a single Embeddings module (word, position and token-type
tables + LayerNorm, of width E); each has its own E -> H projection when its width differs.
The generator's MLM decoder is that shared word table. Only the discriminator is kept for
fine-tuning: `ElectraForPreTraining.discriminator` is what is exported and explored.

    model = ElectraForPreTraining(presets.get("electra-small", vocab_size=V))
    out = model(input_ids, attention_mask, token_type_ids, mlm_labels)   # input_ids already masked
    out.loss.backward()       # mlm_loss + 50 * rtd_loss
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.config import ElectraConfig
from models_lib.core.packing import Packed
from models_lib.heads.pretraining import RTDHead
from models_lib.families.pretraining import IGNORE_INDEX, EncoderForPreTraining, EncoderWithHeads


class ElectraDiscriminator(EncoderWithHeads):
    """Encoder + replaced-token-detection head. forward -> logits (B, T), > 0 means "replaced"."""

    backbone_name = "electra"
    families = ("electra",)

    def build_heads(self, config: ElectraConfig) -> dict[str, nn.Module | None]:
        return {"rtd_head": RTDHead(config)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, packed: Packed | None = None) -> torch.Tensor:
        return self.rtd_head(self.encode(input_ids, attention_mask, token_type_ids, packed=packed))  # (B, T)


class ElectraGenerator(EncoderForPreTraining):
    """The generator: a (narrower) encoder with an MLM head, built from its own config
    (ElectraConfig.generator_config()); forward is the masked-LM forward (PreTrainingOutput)."""

    backbone_name = "electra"
    families = ("electra",)
    mlm_activation = "gelu"  # transformers' ElectraGeneratorPredictions fixes exact GELU


@dataclass
class ElectraPreTrainingOutput:
    loss: torch.Tensor  # mlm_loss + rtd_weight * rtd_loss
    mlm_loss: torch.Tensor  # the generator's
    rtd_loss: torch.Tensor  # binary cross-entropy over the non-pad tokens
    mlm_logits: torch.Tensor  # (N, V) at the masked positions
    mlm_targets: torch.Tensor  # (N,) original tokens there
    sampled_ids: torch.Tensor  # (N,) the generator's samples at those positions
    corrupted_ids: torch.Tensor  # (B, T) the discriminator's input
    rtd_logits: torch.Tensor  # (B, T)
    rtd_labels: torch.Tensor  # (B, T) long: 1 where corrupted differs from the original (0 on padding)
    # Counts over non-pad tokens (0-dim long tensors; sum over batches, then divide):
    rtd_true_positives: torch.Tensor  # predicted replaced and replaced
    rtd_predicted_positives: torch.Tensor  # precision = tp / predicted
    rtd_positives: torch.Tensor  # recall = tp / positives
    rtd_correct: torch.Tensor  # accuracy = correct / tokens
    rtd_tokens: torch.Tensor


class ElectraForPreTraining(nn.Module):
    """Generator + discriminator with shared embeddings, trained jointly (replaced token detection)."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        if config.family != "electra":
            raise ValueError(f"ElectraForPreTraining needs an ELECTRA config, not one for {config.label}.")
        self.config = config
        self.discriminator = ElectraDiscriminator(config)
        self.generator = ElectraGenerator(config.generator_config(),
                                          embeddings=self.discriminator.backbone.embeddings)

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None,
               output_hidden_states: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The discriminator's hidden states (B, T, H): the representation ELECTRA keeps."""
        return self.discriminator.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                *, generator_sampling: bool = True, rtd_weight: float = 50.0,
                generator: torch.Generator | None = None, uniforms: torch.Tensor | None = None,
                packed: Packed | None = None, mlm_positions: torch.Tensor | None = None) -> ElectraPreTrainingOutput:
        """input_ids (B, T): the masked input from an MLM collator; mlm_labels (B, T): the original
        tokens where masked, -100 elsewhere. generator_sampling=False takes the generator's argmax
        instead of a sample. The sample is drawn from `uniforms` (N,) in [0, 1), one per labelled
        position in row-major order, when given (see sample_tokens), else from `generator` (on the
        input's device; seeded, it makes the sampling reproducible). packed: several examples per
        row (models_lib.core.packing), for both encoders; mlm_positions: the labelled positions'
        flat indices (models_lib.families.pretraining.labelled_rows)."""
        if mlm_labels is None:
            raise ValueError("ELECTRA pre-training needs mlm_labels: the generator learns from them and "
                             "the discriminator's labels come from them.")
        gen = self.generator(input_ids, attention_mask, token_type_ids, mlm_labels, packed=packed,
                             mlm_positions=mlm_positions)
        selected = mlm_labels != IGNORE_INDEX  # (B, T)
        if attention_mask is not None and attention_mask.dim() == 2:
            real = attention_mask.bool()  # (B, T)
        else:
            real = torch.ones_like(input_ids, dtype=torch.bool)

        with torch.no_grad():  # sampling is not differentiable; no RTD gradient reaches the generator
            sampled = sample_tokens(gen.mlm_logits, generator_sampling, generator, uniforms)  # (N,)
            original = torch.where(selected, mlm_labels, input_ids)  # (B, T)
            if mlm_positions is not None:  # written at known places: no boolean mask to size on the device
                corrupted = input_ids.flatten().index_copy(0, mlm_positions, sampled).view_as(input_ids)
            else:
                corrupted = input_ids.masked_scatter(selected, sampled)  # (B, T)
            # A sample equal to the original token counts as original.
            rtd_labels = (corrupted != original) & real  # (B, T)

        rtd_logits = self.discriminator(corrupted, attention_mask, token_type_ids, packed=packed)  # (B, T)
        # The mean over the real tokens, as a masked sum over all of them: rtd_logits[real] would be
        # a boolean index, sized on the device.
        per_token = F.binary_cross_entropy_with_logits(rtd_logits.float(), rtd_labels.float(), reduction="none")
        rtd_tokens = real.sum()
        rtd_loss = per_token.masked_fill(~real, 0.0).sum() / rtd_tokens
        predicted = (rtd_logits > 0) & real
        return ElectraPreTrainingOutput(
            loss=gen.mlm_loss + rtd_weight * rtd_loss, mlm_loss=gen.mlm_loss, rtd_loss=rtd_loss,
            mlm_logits=gen.mlm_logits, mlm_targets=gen.mlm_targets, sampled_ids=sampled,
            corrupted_ids=corrupted, rtd_logits=rtd_logits, rtd_labels=rtd_labels.long(),
            rtd_true_positives=(predicted & rtd_labels).sum(), rtd_predicted_positives=predicted.sum(),
            rtd_positives=rtd_labels.sum(), rtd_correct=((predicted == rtd_labels) & real).sum(),
            rtd_tokens=rtd_tokens)


def sample_tokens(logits: torch.Tensor, sampling: bool = True, generator: torch.Generator | None = None,
                  uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """(N, V) logits -> (N,) token ids: a sample from softmax(logits), or the argmax.

    The sample is the inverse CDF at one uniform draw per row: the first token whose cumulative
    probability passes u. `uniforms` (N,) in [0, 1) are those draws; without them they come from
    `generator`. Drawn by the caller, outside a compiled forward, they leave no Generator object
    in it (dynamo cannot trace one: a graph break), and the (N, V) work (softmax, cumsum,
    search) compiles as ordinary tensor ops."""
    if not sampling:
        return logits.argmax(dim=-1)
    if uniforms is None:
        uniforms = torch.rand(logits.shape[0], generator=generator, device=logits.device)
    cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum(dim=-1)  # (N, V)
    # u scaled by each row's total, which rounding leaves a hair off 1, so that u < the last entry
    target = (uniforms.float() * cdf[:, -1]).unsqueeze(-1)  # (N, 1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(logits.shape[-1] - 1)
