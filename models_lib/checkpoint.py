"""Native checkpoints: folder/model.safetensors + folder/model_config.json.

model_config.json is {"family": "bert", "class": "BertForPreTraining", "config": {...}}; the
family registry below maps it back to the config and model classes. It is models_lib's one
table of families: each `register_family(...)` call declares a family's config class, model
classes, label, presets, Hugging Face format and (for an encoder) its pre-training pair head and
fine-tuning heads, and the rest of models_lib (core.config, families.presets, families.downstream,
hf) reads them from FAMILIES. A bare backbone (TransformerEncoder) belongs to the family its
config names.

A fine-tuned model (models_lib.families.downstream) adds "task": its TaskConfig (task,
num_labels, labels, problem_type, classifier_dropout, threshold), and "config" is its encoder's.
Its classes are registered with every encoder family (and GPT-1's classifier and multiple-choice
model with GPT, models_lib.families.gpt_tasks; ELMo's feature-based task model with ELMo,
models_lib.families.elmo_tasks); files without "task" load as before.

A model with bottleneck adapters (models_lib.core.adapters) adds "adapters": {"size": d}; its
weights file holds them, and load_model attaches adapters of that size before loading it.

The vocabulary's tables are written with config.vocab_size rows, as before the models padded
them to a multiple of 64 in memory (models_lib.core.vocab): the files do not depend on the
padding, and load_model pads them again (any checkpoint, older ones included).
"""
from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from models_lib.core import adapters, vocab
from models_lib.core.registry import FAMILIES, Family, register_family
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertForPreTraining, BertModel
from models_lib.core.config import ElectraConfig, EncoderConfig, SpanBertConfig, TinyBertConfig
from models_lib.families.distilbert import DistilBertForPreTraining
from models_lib.families.downstream import DOWNSTREAM_CLASSES, EncoderForDownstream, SentenceHead, TaskConfig, TaskHeads
from models_lib.families.presets import (
    ALBERT_PRESETS, BERT_PRESETS, DISTILBERT_PRESETS, ELECTRA_PRESETS, ROBERTA_PRESETS, SPANBERT_PRESETS,
    TINYBERT_PRESETS, UNILM_PRESETS,
)
from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator
from models_lib.families.elmo import ElmoConfig, ElmoLanguageModel
from models_lib.families.elmo_tasks import ElmoForTask
from models_lib.core.encoder import TransformerEncoder
from models_lib.heads.tasks import QUESTION_ANSWERING, SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.gpt_tasks import GPTForMultipleChoice, GPTForSequenceClassification
from models_lib.families.roberta import RobertaForPreTraining
from models_lib.families.spanbert import SpanBertForPreTraining
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration
from models_lib.families.tinybert import TinyBertForPreTraining
from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
from models_lib.families.unilm import UniLMForPreTraining
from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "model_config.json"


_ENCODER_TASKS = (TransformerEncoder, *DOWNSTREAM_CLASSES)
_BERT_HEADS = TaskHeads("bert", SentenceHead(pooled=True))  # BertForSequenceClassification on the pooler
register_family("bert", EncoderConfig, BertForPreTraining, BertModel, *_ENCODER_TASKS, label="BERT",
                presets=BERT_PRESETS, hf_format="models_lib.hf.bert:FORMAT", hf_model_types=("bert",), pair_head=True,
                task_heads=_BERT_HEADS)
register_family("roberta", EncoderConfig, RobertaForPreTraining, *_ENCODER_TASKS, label="RoBERTa",
                presets=ROBERTA_PRESETS, hf_format="models_lib.hf.roberta:FORMAT", hf_model_types=("roberta",),
                task_heads=TaskHeads("roberta", SentenceHead(pooled=False, activation="tanh")))  # RobertaClassificationHead
register_family("albert", EncoderConfig, AlbertForPreTraining, *_ENCODER_TASKS, label="ALBERT",
                presets=ALBERT_PRESETS, hf_format="models_lib.hf.albert:FORMAT", hf_model_types=("albert",),
                pair_head=True,  # SOP; AlbertConfig.classifier_dropout_prob 0.1:
                task_heads=TaskHeads("albert", SentenceHead(pooled=True),
                                     {SEQUENCE_CLASSIFICATION: 0.1, TOKEN_CLASSIFICATION: 0.1}))
register_family("electra", ElectraConfig, ElectraForPreTraining, ElectraDiscriminator, ElectraGenerator,
                *_ENCODER_TASKS, label="ELECTRA", presets=ELECTRA_PRESETS, hf_format="models_lib.hf.electra:FORMAT",
                hf_model_types=("electra",),  # ElectraClassificationHead (exact GELU):
                task_heads=TaskHeads("electra", SentenceHead(pooled=False, activation="gelu")))
register_family("distilbert", EncoderConfig, DistilBertForPreTraining, *_ENCODER_TASKS, label="DistilBERT",
                presets=DISTILBERT_PRESETS, hf_format="models_lib.hf.distilbert:FORMAT",
                hf_model_types=("distilbert",),  # pre_classifier; seq_classif_dropout 0.2, qa_dropout 0.1:
                task_heads=TaskHeads("distilbert", SentenceHead(pooled=False, activation="relu", dropout_first=False),
                                     {SEQUENCE_CLASSIFICATION: 0.2, QUESTION_ANSWERING: 0.1}))
# SpanBERT, TinyBERT and UniLM are written as BERT (their pooler starts fresh: no NSP).
register_family("spanbert", SpanBertConfig, SpanBertForPreTraining, *_ENCODER_TASKS, label="SpanBERT",
                presets=SPANBERT_PRESETS, hf_format="models_lib.hf.bert:FORMAT", task_heads=_BERT_HEADS)
register_family("tinybert", TinyBertConfig, TinyBertForPreTraining, *_ENCODER_TASKS, label="TinyBERT",
                presets=TINYBERT_PRESETS, task_heads=_BERT_HEADS)
register_family("unilm", EncoderConfig, UniLMForPreTraining, *_ENCODER_TASKS, label="UniLM", presets=UNILM_PRESETS,
                hf_format="models_lib.hf.bert:FORMAT", task_heads=_BERT_HEADS)
register_family("elmo", ElmoConfig, ElmoLanguageModel, ElmoForTask, label="ELMo")
register_family("t5", T5Config, T5ForConditionalGeneration, label="T5", hf_format="models_lib.hf.t5",
                hf_model_types=("t5",))
register_family("gpt", GPTConfig, GPTLMHeadModel, GPTForSequenceClassification, GPTForMultipleChoice, label="GPT",
                hf_format="models_lib.hf.gpt2", hf_model_types=("gpt2",))
register_family("xlnet", XLNetConfig, XLNetLMHeadModel, label="XLNet", hf_format="models_lib.hf.xlnet",
                hf_model_types=("xlnet",))
register_family("transfo_xl", TransfoXLConfig, TransfoXLLMHeadModel, label="Transformer-XL")
# Model classes built from (config, TaskConfig): their model_config.json records the task.
TASK_CLASSES = (EncoderForDownstream, GPTForSequenceClassification, ElmoForTask)  # GPTForMultipleChoice too


def model_class(model: nn.Module) -> type:
    """The model's own class: type(model), or the class a wrapper that subclasses it on the fly
    (FSDP2's fully_shard makes FSDP<Class>) was made from."""
    registered = {cls for family in FAMILIES.values() for cls in family.model_classes}
    return next((cls for cls in type(model).__mro__ if cls in registered), type(model))


def _family_of(model: nn.Module) -> Family:
    cls = model_class(model)
    named = FAMILIES.get(getattr(getattr(model, "config", None), "family", None))
    if named is not None and cls in named.model_classes:
        return named  # the config's own family first: a bare backbone fits several
    for family in FAMILIES.values():
        if cls in family.model_classes:
            return family
    raise ValueError(f"{cls.__name__} is not a model class of any registered family "
                     f"({', '.join(FAMILIES)}).")


def save_model(model: nn.Module, folder: str | Path, *, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the weights and the config; returns the folder. Tied or shared weights are stored once.

    state_dict: the weights to write instead of the model's own, by the names model.state_dict()
    uses (a sharded model's gathered full state). Names of one tensor that the model shares
    (tied embeddings, ALBERT's layers) are written once, as for the model itself."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    family = _family_of(model)
    meta = {"family": family.name, "class": model_class(model).__name__, "config": model.config.to_dict()}
    if isinstance(model, TASK_CLASSES):
        meta["task"] = model.task_config.to_dict()
    if adapters.has_adapters(model):
        meta["adapters"] = adapters.settings(model)
    if state_dict is None and not vocab.padded_names(model):
        # save_model (not save_file) de-duplicates parameters that several modules share (ALBERT).
        safetensors.torch.save_model(model, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    else:
        # The padded tables cut to vocab_size rows; names of one shared tensor kept once, as above.
        tensors, metadata = _shared_once(model, vocab.unpadded_state_dict(model, state_dict))
        safetensors.torch.save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt", **metadata})
    (folder / CONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def _shared_once(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """state_dict with each tensor the model shares under several names kept under one of them
    (the first in sorted order, as safetensors.torch.save_model keeps), and the metadata that
    maps each name left out to the one kept (as that function writes it)."""
    names_of: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_of.setdefault(id(tensor), []).append(name)
    tensors = {name: t.contiguous() for name, t in state_dict.items()}
    metadata: dict[str, str] = {}
    for names in names_of.values():
        if len(names) > 1:
            kept, *dropped = sorted(names)
            for name in dropped:
                tensors.pop(name, None)
                metadata[name] = kept
    return tensors, metadata


def read_model_config(folder: str | Path) -> dict:
    """The parsed model_config.json, with a clear error when the folder is not a checkpoint."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder, so it holds no model checkpoint.")
    missing = [n for n in (CONFIG_NAME, WEIGHTS_NAME) if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"{folder} is not a model checkpoint: {' and '.join(missing)} missing.")
    try:
        meta = json.loads((folder / CONFIG_NAME).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{folder / CONFIG_NAME} is not valid JSON ({exc}).") from exc
    if not isinstance(meta, dict) or meta.get("family") not in FAMILIES or not isinstance(meta.get("config"), dict):
        raise ValueError(f"{folder / CONFIG_NAME} does not name a known model family "
                         f"({', '.join(FAMILIES)}) with a config.")
    return meta


def load_model(folder: str | Path, map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild the model class named in model_config.json and load its weights (in eval mode)."""
    folder = Path(folder)
    meta = read_model_config(folder)
    family = FAMILIES[meta["family"]]
    classes = {cls.__name__: cls for cls in family.model_classes}
    name = meta.get("class", family.model_classes[0].__name__)
    if name not in classes:
        raise ValueError(f"{folder / CONFIG_NAME} names the class {name!r}, which the {family.name} family "
                         f"does not have ({', '.join(classes)}).")
    # Checkpoints written before there were families have no "family" in their config: BERT.
    config = family.config_cls.from_dict({"family": family.name, **meta["config"]})
    if issubclass(classes[name], TASK_CLASSES):
        if not isinstance(meta.get("task"), dict):
            raise ValueError(f"{folder / CONFIG_NAME} names the fine-tuned class {name} but records no task.")
        model = classes[name](config, TaskConfig.from_dict(meta["task"]))
    else:
        model = classes[name](config)
    if "adapters" in meta:
        size = meta["adapters"].get("size") if isinstance(meta["adapters"], dict) else None
        try:
            adapters.attach(model, size=size)
        except ValueError as exc:
            raise ValueError(f"{folder / CONFIG_NAME} records adapters that cannot be attached: {exc}") from exc
    try:
        safetensors.torch.load_model(model, str(folder / WEIGHTS_NAME), strict=True)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped tensors
        raise ValueError(f"The weights in {folder / WEIGHTS_NAME} do not fit its model_config.json: {exc}") from exc
    return model.to(map_location).eval()
