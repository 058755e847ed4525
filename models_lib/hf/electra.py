"""transformers' ELECTRA: one folder per model. A discriminator folder (ElectraForPreTraining)
reads into our ElectraDiscriminator, a generator folder (ElectraForMaskedLM) into ElectraGenerator.
An ElectraForPreTraining of ours exports one of the two, chosen by part=.
"""
from __future__ import annotations

import torch
from torch import nn

from models_lib.core.config import ElectraConfig, EncoderConfig
from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator
from models_lib.hf.base import HFFormat, NameMap, renames
from models_lib.hf.bert import bert_backbone_names


class ElectraFormat(HFFormat):
    model_type = "electra"
    label = "ELECTRA"
    base_prefix = "electra."
    backbone_architecture = "ElectraModel"
    pooled_architectures = ()
    ignored = HFFormat.ignored + ("generator_lm_head.weight",)

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        self.check_hf_config(hf)
        fields = self.config_fields_from_hf(hf)
        hidden = fields.get("hidden_size", 256)
        embedding = hf.get("embedding_size", 128)
        # A generator folder describes the generator itself; a discriminator folder keeps our
        # default generator width for continuing pre-training.
        extra = {"generator_size": 1.0} if self.import_target(hf, state) is ElectraGenerator else {}
        return ElectraConfig(embedding_size=None if embedding == hidden else embedding, use_pooler=False,
                             **extra, **fields)

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        return super().unsupported(config, architecture) + [
            (config.embedding_size == config.hidden_size, "a projection between embeddings and hidden states of "
             "the same width", "embedding_size"),
            (config.positions_from_padding or config.position_offset != 0, "offset position ids", "position_offset"),
            (config.type_vocab_size == 0, "no token-type embeddings", "type_vocab_size"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        return {**super().config_to_hf(config, architecture, dtype), "position_embedding_type": "absolute",
                "embedding_size": config.embedding_size or config.hidden_size, "is_decoder": False}

    # RobertaClassificationHead / ElectraClassificationHead: dense + activation + out_proj on the first token
    sequence_head_pairs = [("dense", "classifier.dense"), ("out_proj", "classifier.out_proj")]

    def backbone_names(self, config: EncoderConfig) -> NameMap:
        return bert_backbone_names(config)

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        generator = any(k.startswith(("generator_predictions.", "generator_lm_head.")) for k in state)
        generator = generator or "ElectraForMaskedLM" in (hf.get("architectures") or [])
        return ElectraGenerator if generator else ElectraDiscriminator

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        if model_cls is ElectraGenerator:
            names = renames("mlm_head.", "generator_predictions.", [("dense", "dense"), ("norm", "LayerNorm")])
            return "ElectraForMaskedLM", names + [("mlm_head.bias", ("generator_lm_head.bias",))]
        if model_cls is ElectraDiscriminator:
            pairs = [("dense", "dense"), ("dense_prediction", "dense_prediction")]
            return "ElectraForPreTraining", renames("rtd_head.", "discriminator_predictions.", pairs)
        raise TypeError(f"{model_cls.__name__} has no transformers ELECTRA counterpart.")

    def export_target(self, model: nn.Module, part: str | None) -> nn.Module:
        if isinstance(model, ElectraForPreTraining):
            if part in (None, "discriminator"):
                return model.discriminator  # what ELECTRA keeps for fine-tuning
            if part == "generator":
                return model.generator
            raise ValueError(f"part must be 'discriminator' or 'generator', not {part!r}.")
        own = {ElectraDiscriminator: "discriminator", ElectraGenerator: "generator"}.get(type(model))
        if part is not None and part != own:
            raise ValueError(f"part={part!r} does not fit a {type(model).__name__}; leave it out.")
        return model


FORMAT = ElectraFormat()  # what the families written as this model type register (models_lib.checkpoint)
