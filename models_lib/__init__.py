"""Model definitions (torch + safetensors only). See docs/internals.md, section models_lib.

    from models_lib.bert import BertConfig, BertForPreTraining
    from models_lib.checkpoint import save_model, load_model
    from models_lib import hf
"""
from .bert import BERT_PRESETS, BertConfig, BertForPreTraining, BertModel, PreTrainingOutput

__all__ = ["BERT_PRESETS", "BertConfig", "BertForPreTraining", "BertModel", "PreTrainingOutput"]
