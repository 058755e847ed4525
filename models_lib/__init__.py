"""Model definitions (torch + safetensors only). See docs/internals.md, section models_lib.

    from models_lib import presets
    cfg = presets.get("roberta-tiny", vocab_size=8000)           # any family's preset
    from models_lib.bert import BertConfig, BertForPreTraining   # BertConfig is EncoderConfig
    from models_lib.checkpoint import save_model, load_model
    from models_lib import hf                                    # transformers folders

Families: bert, roberta, albert, electra, distilbert, spanbert, unilm (one encoder, configured;
one module per family holding its pre-training model).
"""
from .albert import AlbertForPreTraining
from .bert import BERT_PRESETS, BertConfig, BertForPreTraining, BertModel, PreTrainingOutput
from .config import ElectraConfig, EncoderConfig, SpanBertConfig
from .distilbert import DistilBertForPreTraining, distil_from_teacher
from .electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator, ElectraPreTrainingOutput
from .presets import PRESETS, list_presets
from .roberta import RobertaForPreTraining
from .spanbert import SpanBertForPreTraining
from .unilm import UniLMForPreTraining, generate_seq2seq

__all__ = ["BERT_PRESETS", "PRESETS", "AlbertForPreTraining", "BertConfig", "BertForPreTraining", "BertModel",
           "DistilBertForPreTraining", "ElectraConfig", "ElectraDiscriminator", "ElectraForPreTraining",
           "ElectraGenerator", "ElectraPreTrainingOutput", "EncoderConfig", "PreTrainingOutput",
           "RobertaForPreTraining", "SpanBertConfig", "SpanBertForPreTraining", "UniLMForPreTraining",
           "distil_from_teacher", "generate_seq2seq", "list_presets"]
