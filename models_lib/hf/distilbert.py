"""transformers' DistilBERT: its own names (q_lin, sa_layer_norm, vocab_transform, ...), no token
types, no pooler, LayerNorm eps fixed at 1e-12."""
from __future__ import annotations

import logging

import torch

from models_lib.core.config import EncoderConfig
from models_lib.families.distilbert import DistilBertForPreTraining
from models_lib.heads.tasks import QUESTION_ANSWERING, SEQUENCE_CLASSIFICATION
from models_lib.hf.base import HFFormat, NameMap, embedding_names, renames

log = logging.getLogger("models_lib.hf")


class DistilBertFormat(HFFormat):
    model_type = "distilbert"
    label = "DistilBERT"
    base_prefix = "distilbert."
    backbone_architecture = "DistilBertModel"
    pooled_architectures = ()
    ignored = HFFormat.ignored + ("vocab_projector.weight",)
    config_fields = {
        "vocab_size": "vocab_size", "hidden_size": "dim", "num_layers": "n_layers", "num_heads": "n_heads",
        "intermediate_size": "hidden_dim", "max_position_embeddings": "max_position_embeddings",
        "hidden_dropout": "dropout", "attention_dropout": "attention_dropout", "hidden_act": "activation",
        "initializer_range": "initializer_range", "pad_token_id": "pad_token_id",
    }

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        if hf.get("sinusoidal_pos_embds"):
            log.warning("This DistilBERT uses fixed sinusoidal positions; they are read as a learned table.")
        return EncoderConfig(family="distilbert", type_vocab_size=0, use_pooler=False, layer_norm_eps=1e-12,
                             **self.config_fields_from_hf(hf))

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        return super().unsupported(config, architecture) + [
            (config.embedding_size is not None, "factorised embeddings", "embedding_size"),
            (config.positions_from_padding or config.position_offset != 0, "offset position ids", "position_offset"),
            (config.type_vocab_size != 0, "token-type embeddings", "type_vocab_size"),
            (config.layer_norm_eps != 1e-12, "a LayerNorm eps other than 1e-12", "layer_norm_eps"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        return {**super().config_to_hf(config, architecture, dtype), "sinusoidal_pos_embds": False}

    sequence_head_pairs = [("dense", "pre_classifier"), ("out_proj", "classifier")]  # + ReLU between

    def task_dropout_fields(self, task: str) -> tuple[str, ...]:
        # The token classifier's dropout is `dropout`, the encoder's own (our hidden_dropout).
        return {SEQUENCE_CLASSIFICATION: ("seq_classif_dropout",), QUESTION_ANSWERING: ("qa_dropout",)}.get(task, ())

    def backbone_names(self, config: EncoderConfig) -> NameMap:
        names = embedding_names()
        for i in range(config.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"transformer.layer.{i}."
            names += [(f"{ours}attention.qkv.{p}", tuple(f"{theirs}attention.{x}.{p}" for x in ("q_lin", "k_lin", "v_lin")))
                      for p in ("weight", "bias")]
            names += renames(ours, theirs, [("attention.out", "attention.out_lin"), ("attn_norm", "sa_layer_norm"),
                                            ("ffn.up", "ffn.lin1"), ("ffn.down", "ffn.lin2"),
                                            ("ffn_norm", "output_layer_norm")])
        return names

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        return DistilBertForPreTraining

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        names = renames("mlm_head.", "", [("dense", "vocab_transform"), ("norm", "vocab_layer_norm")])
        return "DistilBertForMaskedLM", names + [("mlm_head.bias", ("vocab_projector.bias",))]


FORMAT = DistilBertFormat()  # what the families written as this model type register (models_lib.checkpoint)
