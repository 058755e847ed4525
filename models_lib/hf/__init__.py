"""Hugging Face `transformers` on-disk format: import and export for the encoder family
(no transformers import).

    model = hf.from_pretrained(path)           # BERT, RoBERTa, ALBERT, ELECTRA or DistilBERT folder
    hf.to_pretrained(model, path)              # config.json + model.safetensors
    hf.to_pretrained(electra, path, part="generator")

A folder holds config.json and weights (model.safetensors, or the older pytorch_model.bin,
possibly sharded with an *.index.json). config.json's model_type picks the format (hf/bert.py,
roberta.py, albert.py, electra.py, distilbert.py, t5.py, gpt2.py, xlnet.py), which maps the tensor
names: each family declares the model_types it imports and the format it is written in when it
registers (models_lib.checkpoint.register_family: hf_model_types, hf_format).

What each folder reads into, and what each model writes:
  bert        BertForPreTraining        <-> BertForPreTraining (BertModel for a bare backbone)
  spanbert, unilm                        -> BertForMaskedLM (the SBO head has no transformers home)
  roberta     RobertaForPreTraining     <-> RobertaForMaskedLM (RobertaModel)
  albert      AlbertForPreTraining      <-> AlbertForPreTraining (AlbertForMaskedLM without a pooler; AlbertModel)
  electra     ElectraDiscriminator      <-> ElectraForPreTraining
              ElectraGenerator          <-> ElectraForMaskedLM
              ElectraForPreTraining      -> either, by part= ("discriminator", the default, or "generator")
  distilbert  DistilBertForPreTraining  <-> DistilBertForMaskedLM (DistilBertModel)
  xlnet       XLNetLMHeadModel          <-> XLNetLMHeadModel (XLNetModel: the output bias stays zero)
A folder with fewer heads (e.g. RobertaModel) still loads: the missing heads keep their fresh
initialisation and are listed in `model.missing_keys`; tensors we have no place for are listed
in `model.unexpected_keys`.

Fine-tuned models (models_lib.families.downstream), for bert, roberta, albert, electra and
distilbert folders (SpanBERT and UniLM write BERT's):
  EncoderForSequenceClassification  <-> {Bert,Roberta,Albert,Electra,DistilBert}ForSequenceClassification
  EncoderForTokenClassification     <-> ...ForTokenClassification
  EncoderForQuestionAnswering       <-> ...ForQuestionAnswering
with id2label / label2id, problem_type and the head's dropout in config.json. A task folder
reads into its task model only when asked: from_pretrained(path, task="auto") (or the task's
name); without task= it reads into the pre-training model as before, its head left out.
"""
from __future__ import annotations

import importlib
from typing import Any
from pathlib import Path

import torch
from torch import nn

from models_lib.checkpoint import FAMILIES
from models_lib.core import adapters, vocab
from models_lib.core.config import EncoderConfig
from models_lib.core.encoder import TransformerEncoder
from models_lib.hf.base import HFFormat, gather, log, normalise_names, read_config, read_weights, scatter, write_folder
from models_lib.families.downstream import TASK_CLASSES, EncoderForDownstream
from models_lib.families.pretraining import EncoderWithHeads

# Which family a config.json's model_type imports as, and how each family is written, is what the
# families declare when they register (models_lib.checkpoint: hf_model_types, hf_format). A format
# is an encoder HFFormat, which this module drives, or a module of its own (t5.py, gpt2.py,
# xlnet.py) with config_from_hf(hf), from_pretrained(folder, map_location) and to_pretrained(model, folder).


def supported_model_types() -> tuple[str, ...]:
    """The config.json model_types that import, in the family registry's order."""
    return tuple(t for family in FAMILIES.values() for t in family.hf_model_types)


def _load(ref: str) -> Any:
    """The format an hf_format import string names: "module:NAME" an object, "module" the module."""
    module, _, name = ref.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, name) if name else loaded


def _importer(hf: dict) -> Any:
    """The format that reads a config.json of this model_type (BERT's when it names none)."""
    model_type = hf.get("model_type", "bert")
    family = next((f for f in FAMILIES.values() if model_type in f.hf_model_types and f.hf_format), None)
    if family is None:
        raise ValueError(f"This is a {model_type!r} checkpoint; supported model types are "
                         f"{', '.join(supported_model_types())}.")
    return _load(family.hf_format)


def _exporter(family: Any) -> Any:
    """The format a model of `family` is written in; ValueError when it has none."""
    registered = FAMILIES.get(family)
    if registered is None or not registered.hf_format:
        label = registered.label if registered is not None else repr(family)
        raise ValueError(f"{label} models have no Hugging Face transformers format to be written in.")
    return _load(registered.hf_format)


def encoder_format(family: Any) -> HFFormat:
    """The HFFormat an encoder family is written as; ValueError for a family without one."""
    fmt = _exporter(family)
    if not isinstance(fmt, HFFormat):
        raise ValueError(f"The {family} family is not written as a transformers encoder.")
    return fmt


def config_from_hf(hf: dict) -> Any:
    """Our config for a transformers config.json (as a dict) of any supported model type (read
    without any weights: what a model built from it would allocate can be checked first)."""
    fmt = _importer(hf)
    return fmt.config_from_hf(hf, {}) if isinstance(fmt, HFFormat) else fmt.config_from_hf(hf)


def config_to_hf(config: EncoderConfig, architecture: str | None = None, dtype: torch.dtype = torch.float32) -> dict:
    """transformers' config.json for one of our configs; ValueError for what it cannot represent."""
    fmt = encoder_format(config.family)
    return fmt.config_to_hf(config, architecture or fmt.backbone_architecture, dtype)


# --- import ----------------------------------------------------------------------------------

def from_pretrained(path: str | Path, map_location: str | torch.device = "cpu", *,
                    task: str | None = None) -> EncoderWithHeads:
    """Load a transformers folder into the matching model of ours (see the table above), in eval mode.

    task="auto" reads a task folder (BertForSequenceClassification, ...) into its downstream
    model, head included; a task's name does the same and checks that the folder is one. A
    folder of another class has no head to read: build its model without task=, then
    models_lib.families.downstream.from_pretraining puts a fresh head on it.
    """
    folder = Path(path)
    hf = read_config(folder)
    fmt = _importer(hf)
    if not isinstance(fmt, HFFormat):
        if task is not None:
            raise ValueError(f"Task heads sit on the encoder families; this is a {hf['model_type']} folder.")
        return fmt.from_pretrained(folder, map_location)
    if task is not None:
        task = _folder_task(fmt, hf, task, folder)
    hf_state = normalise_names(read_weights(folder), fmt.base_prefix)
    for key, older in fmt.aliases.items():
        if key not in hf_state and older in hf_state:
            hf_state[key] = hf_state[older]

    config = fmt.config_from_hf(hf, hf_state)
    if task is not None:
        model = TASK_CLASSES[task](config, fmt.task_from_hf(hf, task))
        head_names = fmt.task_head_names(task)
    else:
        model_cls = fmt.import_target(hf, hf_state)
        model = model_cls(config)
        head_names = fmt.head_names(model_cls, config)[1]
    prefix = model.backbone_name + "."
    names = [(prefix + ours, theirs) for ours, theirs in fmt.backbone_names(model.config)] + head_names
    ours = model.state_dict()
    state, used = gather(ours, hf_state, names)

    missing = [k for k in ours if k not in state]
    essential = [k for k in missing if k.startswith(prefix) and not k.startswith(prefix + "pooler.")]
    if task is not None:
        essential = missing  # a task folder holds its whole model, head and (where read) pooler
    if essential:
        raise ValueError(f"{folder} is not a complete {fmt.label} checkpoint; missing for example "
                         f"{', '.join(essential[:3])} ({len(essential)} tensors in all).")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that disagree with config.json
        raise ValueError(f"The weights in {folder} do not match its config.json: {exc}") from exc

    model.missing_keys = missing
    model.unexpected_keys = sorted(k for k in hf_state if k not in used and not k.endswith(fmt.ignored))
    if missing:
        log.warning("%s has no weights for %s; they keep their random initialisation.", folder, ", ".join(missing))
    if model.unexpected_keys:
        log.warning("%s: ignored tensors %s.", folder, ", ".join(model.unexpected_keys))
    return model.to(map_location).eval()


def _folder_task(fmt: HFFormat, hf: dict, task: str, folder: Path) -> str:
    """The task to read `folder` as: its own (task="auto"), which must be the one asked for."""
    found = fmt.task_of(hf)
    if task != "auto" and task not in TASK_CLASSES:
        raise ValueError(f"Unknown task {task!r}; choose 'auto' or one of {', '.join(TASK_CLASSES)}.")
    if found is None:
        raise ValueError(f"{folder} holds a {', '.join(hf.get('architectures') or [fmt.backbone_architecture])}, "
                         f"not a task model; load it without task= and put a head on it with "
                         f"downstream.from_pretraining.")
    if task not in ("auto", found):
        raise ValueError(f"{folder} holds a {fmt.task_architecture(found)} ({found}), not a {task} model.")
    return found


# --- export ----------------------------------------------------------------------------------

def to_pretrained(model: nn.Module, path: str | Path, *, part: str | None = None) -> Path:
    """Write config.json + model.safetensors that transformers loads as the class the table above
    names (a bare backbone as BertModel, RobertaModel, ...). `part` picks the ELECTRA model to
    write from an ElectraForPreTraining. Returns the folder. ValueError for a model with bottleneck
    adapters (models_lib.core.adapters), which transformers' classes have no layers for."""
    size = adapters.adapter_size(model)
    if size:
        raise ValueError(f"it carries bottleneck adapters (size {size}) after its attention and feed-forward "
                         f"layers, which transformers' classes do not have, and writing it without them would "
                         f"change what it computes. Its native checkpoint keeps them: it loads in the explorer and "
                         f"can be fine-tuned again.")
    config = getattr(model, "config", None)
    family = getattr(config, "family", None)
    if family in FAMILIES and FAMILIES[family].hf_format and not isinstance(_exporter(family), HFFormat):
        return _exporter(family).to_pretrained(model, Path(path))
    if not isinstance(config, EncoderConfig):
        raise TypeError(f"to_pretrained takes an encoder model of models_lib, not {type(model).__name__}.")
    fmt = encoder_format(config.family)
    target = fmt.export_target(model, part)
    task_fields: dict = {}
    if isinstance(target, TransformerEncoder):
        backbone, heads, prefix = target, None, ""
        architecture, head_map = fmt.backbone_architecture, []
    elif isinstance(target, EncoderForDownstream):
        backbone, heads, prefix = target.backbone, target, fmt.base_prefix
        task = target.task_config
        architecture, head_map = fmt.task_architecture(task.task), fmt.task_head_names(task.task)
        task_fields = fmt.task_config_to_hf(task, target.config)
    elif isinstance(target, EncoderWithHeads):
        backbone, heads, prefix = target.backbone, target, fmt.base_prefix
        architecture, head_map = fmt.head_names(type(target), target.config)
    else:
        raise TypeError(f"{type(target).__name__} has no transformers {fmt.label} counterpart.")
    config = backbone.config
    hf_config = {**fmt.config_to_hf(config, architecture, backbone.embeddings.word.weight.dtype), **task_fields}

    names = fmt.backbone_names(config)
    if architecture not in fmt.pooled_architectures:
        if backbone.pooler is not None:
            log.warning("transformers' %s has no pooler; the model's pooler is not written.", architecture)
        names = [(o, t) for o, t in names if not o.startswith("pooler.")]
    # transformers' tables have vocab_size rows: the padding (models_lib.core.vocab) stays here.
    tensors = scatter(vocab.unpadded_state_dict(backbone), names, prefix)
    if heads is not None:
        head_state = {k: v for k, v in vocab.unpadded_state_dict(heads).items()
                      if not k.startswith(heads.backbone_name + ".")}
        tensors.update(scatter(head_state, head_map))
        written = {o for o, _ in head_map}
        left = sorted(k for k in head_state if k not in written)
        if left:
            log.warning("transformers' %s has no place for %s; not written.", architecture, ", ".join(left))
    return write_folder(Path(path), tensors, hf_config)
