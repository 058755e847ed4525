"""Model definitions (torch + safetensors only). See docs/internals.md, section models_lib.

    from models_lib.families import presets
    cfg = presets.get("roberta-tiny", vocab_size=8000)           # any family's preset
    from models_lib.families.bert import BertConfig, BertForPreTraining   # BertConfig is EncoderConfig
    from models_lib.checkpoint import save_model, load_model
    from models_lib import hf                                    # transformers folders

Families: bert, roberta, albert, electra, distilbert, spanbert, unilm (one encoder, configured;
one module per family holding its pre-training model); t5 (encoder-decoder), gpt (decoder-only)
and elmo (biLSTM), each with its own config class and presets table (T5Config.from_preset,
GPTConfig.from_preset, ElmoConfig.from_preset). Generation: models_lib.core.generation.generate.
"""
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BERT_PRESETS, BertConfig, BertForPreTraining, BertModel, PreTrainingOutput
from models_lib.core.config import ElectraConfig, EncoderConfig, SpanBertConfig
from models_lib.families.distilbert import DistilBertForPreTraining, distil_from_teacher
from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator, ElectraPreTrainingOutput
from models_lib.families.elmo import ELMO_PRESETS, ElmoConfig, ElmoLanguageModel, ScalarMix
from models_lib.families.gpt import GPT_PRESETS, GPTConfig, GPTLMHeadModel
from models_lib.families.presets import list_presets
from models_lib.families.roberta import RobertaForPreTraining
from models_lib.families.spanbert import SpanBertForPreTraining
from models_lib.families.t5 import T5_PRESETS, T5Config, T5ForConditionalGeneration
from models_lib.families.unilm import UniLMForPreTraining, generate_seq2seq
from models_lib import checkpoint  # noqa: F401 (registers every family in models_lib.core.registry)

__all__ = ["BERT_PRESETS", "ELMO_PRESETS", "GPT_PRESETS", "T5_PRESETS", "ElmoConfig", "ElmoLanguageModel",
           "GPTConfig", "GPTLMHeadModel", "ScalarMix", "T5Config", "T5ForConditionalGeneration", "AlbertForPreTraining", "BertConfig", "BertForPreTraining", "BertModel",
           "DistilBertForPreTraining", "ElectraConfig", "ElectraDiscriminator", "ElectraForPreTraining",
           "ElectraGenerator", "ElectraPreTrainingOutput", "EncoderConfig", "PreTrainingOutput",
           "RobertaForPreTraining", "SpanBertConfig", "SpanBertForPreTraining", "UniLMForPreTraining",
           "distil_from_teacher", "generate_seq2seq", "list_presets"]
