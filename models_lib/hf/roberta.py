"""transformers' RoBERTa: BERT's tensor names under "roberta.", an `lm_head`, positions from the padding."""
from __future__ import annotations

import torch

from models_lib.core.config import EncoderConfig
from models_lib.hf.base import HFFormat, NameMap, renames
from models_lib.hf.bert import bert_backbone_names
from models_lib.families.roberta import RobertaForPreTraining


class RobertaFormat(HFFormat):
    model_type = "roberta"
    label = "RoBERTa"
    base_prefix = "roberta."
    backbone_architecture = "RobertaModel"
    pooled_architectures = ("RobertaModel",)
    aliases = {"lm_head.bias": "lm_head.decoder.bias"}
    ignored = HFFormat.ignored + ("lm_head.decoder.weight", "lm_head.decoder.bias")

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        self.check_hf_config(hf)
        fields = {"pad_token_id": 1, **self.config_fields_from_hf(hf)}  # RobertaConfig's default pad is 1
        # RobertaModel folders carry a pooler (RobertaForMaskedLM ones do not): keep it when present.
        return EncoderConfig(family="roberta", positions_from_padding=True,
                             use_pooler="pooler.dense.weight" in state, **fields)

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        return super().unsupported(config, architecture) + [
            (config.embedding_size is not None, "factorised embeddings", "embedding_size"),
            (not config.positions_from_padding, "positions not counted from the padding", "positions_from_padding"),
            (config.type_vocab_size == 0, "no token-type embeddings", "type_vocab_size"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        return {**super().config_to_hf(config, architecture, dtype), "position_embedding_type": "absolute",
                "is_decoder": False}

    # RobertaClassificationHead / ElectraClassificationHead: dense + activation + out_proj on the first token
    sequence_head_pairs = [("dense", "classifier.dense"), ("out_proj", "classifier.out_proj")]

    def backbone_names(self, config: EncoderConfig) -> NameMap:
        return bert_backbone_names(config)

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        return RobertaForPreTraining

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        names = renames("mlm_head.", "lm_head.", [("dense", "dense"), ("norm", "layer_norm")])
        return "RobertaForMaskedLM", names + [("mlm_head.bias", ("lm_head.bias",))]


FORMAT = RobertaFormat()  # what the families written as this model type register (models_lib.checkpoint)
