"""transformers' ALBERT: layer groups, an always-present embedding projection, `predictions` + SOP.

transformers shares layers in groups (num_hidden_groups groups of inner_group_num layers);
ALBERT's own default, one group of one layer, is our share_layers="all", and L groups of one
layer is "none". Sharing only the attention or only the FFN has no transformers equivalent.
"""
from __future__ import annotations

import torch

from models_lib.families.albert import AlbertForPreTraining
from models_lib.core.config import EncoderConfig
from models_lib.families.downstream import TaskConfig
from models_lib.heads.tasks import QUESTION_ANSWERING, TOKEN_CLASSIFICATION
from models_lib.hf.base import HFFormat, NameMap, embedding_names, renames


class AlbertFormat(HFFormat):
    model_type = "albert"
    label = "ALBERT"
    base_prefix = "albert."
    backbone_architecture = "AlbertModel"
    pooled_architectures = ("AlbertForPreTraining", "AlbertModel", "AlbertForSequenceClassification")
    aliases = {"predictions.bias": "predictions.decoder.bias"}
    ignored = HFFormat.ignored + ("predictions.decoder.weight", "predictions.decoder.bias")

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        self.check_hf_config(hf)
        layers, groups, inner = hf.get("num_hidden_layers", 12), hf.get("num_hidden_groups", 1), hf.get("inner_group_num", 1)
        if inner != 1 or groups not in (1, layers):
            raise ValueError(f"This ALBERT checkpoint groups its {layers} layers as num_hidden_groups={groups}, "
                             f"inner_group_num={inner}; only one shared layer (1, 1) or unshared layers "
                             f"({layers}, 1) are supported.")
        # AlbertForMaskedLM folders have no pooler (so no SOP head either): build the model without.
        return EncoderConfig(family="albert", share_layers="all" if groups == 1 else "none",
                             embedding_size=hf.get("embedding_size", 128), use_pooler="pooler.weight" in state,
                             **self.config_fields_from_hf(hf))

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        return [
            (config.share_layers in ("attention", "ffn"), f"sharing only the {config.share_layers} sublayers "
             "across layers (its groups share whole layers: use share_layers 'all' or 'none')", "share_layers"),
            (config.norm_placement != "post", "pre-LayerNorm blocks", "norm_placement"),
            (config.embedding_size is None, "embeddings without the E -> H projection", "embedding_size"),
            (config.positions_from_padding or config.position_offset != 0, "offset position ids", "position_offset"),
            (config.type_vocab_size == 0, "no token-type embeddings", "type_vocab_size"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        hf = super().config_to_hf(config, architecture, dtype)
        hf.update(embedding_size=config.embedding_size, inner_group_num=1, position_embedding_type="absolute",
                  num_hidden_groups=1 if config.share_layers == "all" else config.num_layers)
        return hf

    def backbone_names(self, config: EncoderConfig) -> NameMap:
        names = embedding_names() + renames("embeddings_project.", "encoder.embedding_hidden_mapping_in.", [("", "")])
        for g in range(1 if config.share_layers == "all" else config.num_layers):
            ours, theirs = f"encoder.layers.{g}.", f"encoder.albert_layer_groups.{g}.albert_layers.0."
            names += [(f"{ours}attention.qkv.{p}", tuple(f"{theirs}attention.{x}.{p}" for x in ("query", "key", "value")))
                      for p in ("weight", "bias")]
            names += renames(ours, theirs, [("attention.out", "attention.dense"), ("attn_norm", "attention.LayerNorm"),
                                            ("ffn.up", "ffn"), ("ffn.down", "ffn_output"),
                                            ("ffn_norm", "full_layer_layer_norm")])
        return names + renames("pooler.", "", [("dense", "pooler")])

    def task_dropout_fields(self, task: str) -> tuple[str, ...]:
        return () if task == QUESTION_ANSWERING else ("classifier_dropout_prob",)  # AlbertConfig: 0.1

    def task_from_hf(self, hf: dict, task: str) -> TaskConfig:
        spec = super().task_from_hf(hf, task)
        if task == TOKEN_CLASSIFICATION and "classifier_dropout_prob" in hf and hf["classifier_dropout_prob"] is None:
            spec.classifier_dropout = hf.get("hidden_dropout_prob", 0.0)  # AlbertForTokenClassification's fallback
        return spec

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        return AlbertForPreTraining

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        names = renames("mlm_head.", "predictions.", [("dense", "dense"), ("norm", "LayerNorm")])
        names += [("mlm_head.bias", ("predictions.bias",))]
        if not config.use_pooler:
            return "AlbertForMaskedLM", names
        return "AlbertForPreTraining", names + renames("sop_head.", "sop_classifier.", [("classifier", "classifier")])


FORMAT = AlbertFormat()  # what the families written as this model type register (models_lib.checkpoint)
