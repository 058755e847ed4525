"""transformers' BERT (also what SpanBERT and UniLM export as: their encoder and MLM head are BERT's)."""
from __future__ import annotations

import torch

from models_lib.families.bert import BertForPreTraining
from models_lib.core.config import EncoderConfig
from models_lib.hf.base import HFFormat, NameMap, bert_layer_names, embedding_names, renames


def bert_backbone_names(config: EncoderConfig) -> NameMap:
    """BERT's layout, shared by RoBERTa and ELECTRA (the projection only exists in ELECTRA's)."""
    names = embedding_names() + renames("embeddings_project.", "embeddings_project.", [("", "")])
    for i in range(config.num_layers):
        names += bert_layer_names(f"encoder.layers.{i}.", f"encoder.layer.{i}.")
    return names + renames("pooler.", "pooler.", [("dense", "dense")])


class BertFormat(HFFormat):
    model_type = "bert"
    label = "BERT"
    base_prefix = "bert."
    backbone_architecture = "BertModel"
    pooled_architectures = ("BertForPreTraining", "BertModel", "BertForSequenceClassification")
    aliases = {"cls.predictions.bias": "cls.predictions.decoder.bias"}
    ignored = HFFormat.ignored + ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        self.check_hf_config(hf)
        return EncoderConfig(family="bert", **self.config_fields_from_hf(hf))

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        return super().unsupported(config, architecture) + [
            (config.embedding_size is not None, "factorised embeddings", "embedding_size"),
            (config.positions_from_padding, "positions counted from the padding", "positions_from_padding"),
            (config.position_offset != 0, "offset position ids", "position_offset"),
            (config.type_vocab_size == 0, "no token-type embeddings", "type_vocab_size"),
            (not config.use_pooler and architecture == "BertForPreTraining", "no pooler", "use_pooler"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        return {**super().config_to_hf(config, architecture, dtype), "position_embedding_type": "absolute",
                "is_decoder": False}

    def backbone_names(self, config: EncoderConfig) -> NameMap:
        return bert_backbone_names(config)

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        return BertForPreTraining

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        mlm = renames("mlm_head.", "cls.predictions.", [("dense", "transform.dense"), ("norm", "transform.LayerNorm")])
        mlm += [("mlm_head.bias", ("cls.predictions.bias",))]
        if model_cls is BertForPreTraining:
            return "BertForPreTraining", mlm + renames("nsp_head.", "cls.", [("classifier", "seq_relationship")])
        return "BertForMaskedLM", mlm  # SpanBERT, UniLM: their other heads have no transformers home


FORMAT = BertFormat()  # what the families written as this model type register (models_lib.checkpoint)
