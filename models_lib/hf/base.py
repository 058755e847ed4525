"""The machinery every Hugging Face format shares (no transformers import).

A format (models_lib/hf/bert.py, roberta.py, ...) describes one transformers model type: how its
config.json maps to ours, which of its tensors is which of ours (a NameMap), which of our model
classes it reads into and writes from. This module reads and writes folders and moves tensors
along a NameMap. Where transformers keeps separate query/key/value matrices we keep one fused
Q/K/V matrix: a NameMap entry with three HF names is stacked along dim 0 on import and split on
export. Decoder weights are the word embeddings in both libraries, so they are never read or
written.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from models_lib.core.config import EncoderConfig
from models_lib.families.downstream import TaskConfig, head_dropout
from models_lib.heads.tasks import QUESTION_ANSWERING, SEQUENCE_CLASSIFICATION, TASKS, TOKEN_CLASSIFICATION

log = logging.getLogger("models_lib.hf")

# (our name, HF names): one HF name is a rename; several are concatenated along dim 0 (Q/K/V).
NameMap = list[tuple[str, tuple[str, ...]]]

# Our config field <- transformers' field, for the BERT-shaped configs (BERT, RoBERTa, ALBERT, ELECTRA).
BERT_CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "hidden_act": "hidden_act",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
}


def renames(ours: str, theirs: str, pairs: list[tuple[str, str]], params=("weight", "bias")) -> NameMap:
    """NameMap entries for modules renamed one to one: (ours + a, theirs + b) for each (a, b) and
    param; an empty a or b names the prefix's own parameters."""
    def name(prefix: str, module: str, param: str) -> str:
        return f"{prefix}{module}.{param}" if module else f"{prefix}{param}"

    return [(name(ours, a, p), (name(theirs, b, p),)) for a, b in pairs for p in params]


def embedding_names(theirs: str = "embeddings.") -> NameMap:
    """Word, position, token-type tables and LayerNorm, named as BERT names them."""
    names = [("embeddings.word.weight", (f"{theirs}word_embeddings.weight",)),
             ("embeddings.position.weight", (f"{theirs}position_embeddings.weight",)),
             ("embeddings.token_type.weight", (f"{theirs}token_type_embeddings.weight",))]
    return names + renames("embeddings.", theirs, [("norm", "LayerNorm")])


def bert_layer_names(ours: str, theirs: str) -> NameMap:
    """One block in BERT's layout (also RoBERTa's and ELECTRA's): ours/theirs end with '.'."""
    qkv = [(f"{ours}attention.qkv.{p}", tuple(f"{theirs}attention.self.{x}.{p}" for x in ("query", "key", "value")))
           for p in ("weight", "bias")]
    return qkv + renames(ours, theirs, [("attention.out", "attention.output.dense"),
                                        ("attn_norm", "attention.output.LayerNorm"),
                                        ("ffn.up", "intermediate.dense"), ("ffn.down", "output.dense"),
                                        ("ffn_norm", "output.LayerNorm")])


class HFFormat:
    """One transformers model type. Subclasses fill in the class attributes and the hooks."""

    model_type = ""
    label = ""  # transformers' name for messages ("BERT")
    base_prefix = ""  # the base model's prefix in head models' files ("bert.")
    backbone_architecture = ""  # the bare backbone class ("BertModel")
    pooled_architectures: tuple[str, ...] = ()  # architectures whose base model has a pooler
    config_fields = BERT_CONFIG_FIELDS
    aliases: dict[str, str] = {}  # HF key -> an older name of the same tensor (read when the key is absent)
    ignored: tuple[str, ...] = ("embeddings.position_ids", "embeddings.token_type_ids")  # key suffixes never read

    # --- config ---------------------------------------------------------------------------
    def check_hf_config(self, hf: dict) -> None:
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"Only absolute position embeddings are supported, not {hf['position_embedding_type']!r}.")
        if hf.get("is_decoder") or hf.get("add_cross_attention"):
            raise ValueError(f"{self.label} checkpoints configured as a decoder (is_decoder / cross-attention) "
                             f"are not supported.")

    def config_fields_from_hf(self, hf: dict) -> dict:
        return {ours: hf[theirs] for ours, theirs in self.config_fields.items() if theirs in hf}

    def config_from_hf(self, hf: dict, state: dict[str, torch.Tensor]) -> EncoderConfig:
        raise NotImplementedError

    def unsupported(self, config: EncoderConfig, architecture: str) -> list[tuple[bool, str, str]]:
        """(is it so, what transformers cannot represent, the field) for this config."""
        return [
            (config.share_layers != "none", "shared layers", "share_layers"),
            (config.norm_placement != "post", "pre-LayerNorm blocks", "norm_placement"),
        ]

    def config_to_hf(self, config: EncoderConfig, architecture: str, dtype: torch.dtype = torch.float32) -> dict:
        """transformers' config.json; ValueError for what that model type cannot represent."""
        for bad, what, field in self.unsupported(config, architecture):
            if bad:
                raise ValueError(f"transformers' {self.label} cannot represent {what} "
                                 f"({field}={getattr(config, field)!r}).")
        hf = {theirs: getattr(config, ours) for ours, theirs in self.config_fields.items()}
        hf.update(architectures=[architecture], model_type=self.model_type, tie_word_embeddings=True,
                  dtype=str(dtype).removeprefix("torch."))
        hf["torch_dtype"] = hf["dtype"]  # the name transformers 4.x reads
        return hf

    # --- weights --------------------------------------------------------------------------
    def backbone_names(self, config: EncoderConfig) -> NameMap:
        """Our names relative to the backbone; HF names relative to the base model."""
        raise NotImplementedError

    def import_target(self, hf: dict, state: dict[str, torch.Tensor]) -> type:
        """The model class a folder is read into (heads it lacks stay freshly initialised)."""
        raise NotImplementedError

    def head_names(self, model_cls: type, config: EncoderConfig) -> tuple[str, NameMap]:
        """(HF architecture, NameMap of the heads) for one of our model classes; names relative to it."""
        raise NotImplementedError

    def export_target(self, model: nn.Module, part: str | None) -> nn.Module:
        """The module to write for `model` (ELECTRA picks its discriminator or generator)."""
        if part is not None:
            raise ValueError(f"part={part!r} only applies to ELECTRA, which has a generator and a discriminator.")
        return model

    # --- fine-tuning heads (models_lib.families.downstream) ----------------------------------
    # Our head is `head.` with `out_proj` (and `dense`); these are transformers' names for them.
    sequence_head_pairs: list[tuple[str, str]] = [("out_proj", "classifier")]  # BERT, ALBERT: on the pooler
    task_head_pairs = {TOKEN_CLASSIFICATION: [("out_proj", "classifier")], QUESTION_ANSWERING: [("out_proj", "qa_outputs")]}

    def task_architecture(self, task: str) -> str:
        """transformers' class for a task: BertForSequenceClassification, RobertaForQuestionAnswering, ..."""
        suffix = {SEQUENCE_CLASSIFICATION: "ForSequenceClassification", TOKEN_CLASSIFICATION: "ForTokenClassification",
                  QUESTION_ANSWERING: "ForQuestionAnswering"}[task]
        return self.backbone_architecture.removesuffix("Model") + suffix

    def task_of(self, hf: dict) -> str | None:
        """The task whose class config.json's architectures names; None for other folders."""
        architectures = hf.get("architectures") or []
        return next((task for task in TASKS if self.task_architecture(task) in architectures), None)

    def task_head_names(self, task: str) -> NameMap:
        pairs = self.sequence_head_pairs if task == SEQUENCE_CLASSIFICATION else self.task_head_pairs[task]
        return renames("head.", "", pairs)

    def task_dropout_fields(self, task: str) -> tuple[str, ...]:
        """transformers' config fields that set the head's dropout (none: the head has no dropout
        of its own). BERT, RoBERTa, ELECTRA: classifier_dropout (None: hidden_dropout_prob)."""
        return () if task == QUESTION_ANSWERING else ("classifier_dropout",)

    def task_config_to_hf(self, task: TaskConfig, config: EncoderConfig) -> dict:
        """config.json's fields for a task model: id2label, label2id, problem_type, head dropout."""
        hf: dict = {}
        if task.task != QUESTION_ANSWERING:  # QA models read num_labels = 2, transformers' default
            hf.update(id2label={str(i): label for i, label in task.id2label.items()}, label2id=task.label2id)
        if task.task == SEQUENCE_CLASSIFICATION:
            hf["problem_type"] = task.problem_type
        dropout = head_dropout(config, task)
        fields = self.task_dropout_fields(task.task)
        hf.update({field: dropout for field in fields})
        if not fields and dropout != head_dropout(config, dataclasses.replace(task, classifier_dropout=None)):
            log.warning("transformers' %s has no setting for its head's dropout (%s); it is not written.",
                        self.task_architecture(task.task), dropout)
        return hf

    def task_from_hf(self, hf: dict, task: str) -> TaskConfig:
        """Our TaskConfig for a transformers task folder's config.json."""
        id2label = hf.get("id2label") or {}
        labels = [id2label[k] for k in sorted(id2label, key=int)] or None
        num_labels = len(labels) if labels else hf.get("num_labels", 2)
        if labels == [f"LABEL_{i}" for i in range(num_labels)]:
            labels = None  # transformers' names for unnamed classes
        if task == QUESTION_ANSWERING:
            num_labels, labels = 2, None
        dropout = next((hf[f] for f in self.task_dropout_fields(task) if hf.get(f) is not None), None)
        return TaskConfig(task, num_labels, labels, hf.get("problem_type") if task == SEQUENCE_CLASSIFICATION else None,
                          dropout)


# --- folders ---------------------------------------------------------------------------------

def read_config(folder: Path) -> dict:
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a Hugging Face model folder: config.json is missing.")
    try:
        return json.loads((folder / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{folder / 'config.json'} is not valid JSON ({exc}).") from exc


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers folder, whichever of the four layouts it uses."""
    def load(file: Path) -> dict[str, torch.Tensor]:
        if file.suffix == ".safetensors":
            return safetensors.torch.load_file(str(file), device="cpu")
        return torch.load(file, map_location="cpu", weights_only=True)

    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (folder / single).is_file():
            return load(folder / single)
        if (folder / index).is_file():
            shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(load(folder / shard))
            return state
    raise ValueError(f"{folder} holds no weights (model.safetensors or pytorch_model.bin).")


def normalise_names(state: dict[str, torch.Tensor], base_prefix: str) -> dict[str, torch.Tensor]:
    """Strip the base model's prefix (bare-model folders have none) and the TF-era gamma/beta names."""
    out = {}
    for key, tensor in state.items():
        key = key.removeprefix(base_prefix)
        if key.endswith(".gamma") or key.endswith(".beta"):
            key = key.rsplit(".", 1)[0] + (".weight" if key.endswith(".gamma") else ".bias")
        out[key] = tensor
    return out


def gather(ours: dict[str, torch.Tensor], hf_state: dict[str, torch.Tensor],
           names: NameMap) -> tuple[dict[str, torch.Tensor], set[str]]:
    """Our tensors from HF ones along `names` (entries we have no tensor for are skipped)."""
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for our_key, hf_keys in names:
        if our_key in ours and all(k in hf_state for k in hf_keys):
            tensors = [hf_state[k] for k in hf_keys]
            state[our_key] = tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)
            used.update(hf_keys)
    return state, used


def scatter(ours: dict[str, torch.Tensor], names: NameMap, prefix: str = "") -> dict[str, torch.Tensor]:
    """HF tensors from ours along `names`; a fused tensor is split into its parts."""
    out = {}
    for our_key, hf_keys in names:
        if our_key in ours:
            for hf_key, part in zip(hf_keys, ours[our_key].chunk(len(hf_keys), dim=0)):
                out[prefix + hf_key] = part
    return out


def write_folder(folder: Path, tensors: dict[str, torch.Tensor], hf_config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    # Fresh contiguous copies: safetensors refuses tensors that share memory (the Q/K/V slices).
    tensors = {k: v.detach().to("cpu").clone().contiguous() for k, v in tensors.items()}
    safetensors.torch.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    return folder
