"""What the launch form and the create API offer: fields, labels, tiny CPU-friendly defaults,
and reading a run config from YAML. Everything else comes from trainer.catalog.schema.as_json().
"""
from __future__ import annotations

import functools
from typing import Any

import yaml

from trainer import trackers
from trainer.catalog import schema
from trainer.config import RunConfig, length_from, load_yaml
from trainer.errors import ConfigError

# Shown on the form (in this order); the rest of RunConfig keeps its defaults unless a YAML sets it.
MAIN_FIELDS = ("max_steps", "epochs", "batch_size", "seq_len", "lr", "warmup_steps", "grad_accum",
               "eval_every", "checkpoint_every", "masking", "seed", "device", "devices")
ADVANCED_FIELDS = ("mask_prob", "schedule", "weight_decay", "clip_grad", "eval_batches", "log_every",
                   "precision", "num_threads", "data_workers", "strategy", "compile", "activation_checkpointing",
                   "report_to")
TRAINING_FIELDS = MAIN_FIELDS + ADVANCED_FIELDS
# Training fields a form may leave out (empty = RunConfig's default: one device, strategy auto,
# data workers auto; an unticked box is off). The run's length is max_steps or epochs: one of them.
OPTIONAL_FIELDS = ("max_steps", "epochs", "devices", "strategy", "data_workers", "compile", "activation_checkpointing",
                   "report_to")
# Shown with the objectives: what a mask covers, how single segments are packed (empty = default).
OBJECTIVE_FIELDS = ("masking_unit", "packing")
# The optimizer (empty = the family's: Adafactor for T5, AdamW otherwise) and AdamW's own
# settings, which the page shows only for AdamW (empty = the family's paper values).
OPTIMIZER_FIELDS = ("optimizer", "betas", "eps")
# RunConfig fields of one family (ELECTRA, DistilBERT), shown only for it; the teacher is chosen
# as one of the user's checkpoints (a checkpoint id, resolved to its folder by services).
FAMILY_FIELDS = ("rtd_weight", "distill_temperature", "distill_soft_weight", "distill_mlm_weight",
                 "distill_cos_weight", "plm_k", "tinybert_temperature", "tinybert_prediction_share")
TEACHER_FIELD = "teacher_checkpoint"
# Every RunConfig field the form and the API take by name (besides family, preset,
# objectives, model_overrides and the teacher).
CONFIG_FIELDS = TRAINING_FIELDS + OPTIMIZER_FIELDS + OBJECTIVE_FIELDS + FAMILY_FIELDS

LABELS = {
    "max_steps": "Steps", "epochs": "Epochs (instead of steps)", "batch_size": "Batch size", "seq_len": "Sequence length (tokens)",
    "lr": "Peak learning rate", "warmup_steps": "Warm-up steps", "grad_accum": "Gradient accumulation",
    "eval_every": "Validate every (steps)", "checkpoint_every": "Checkpoint every (steps)",
    "masking": "Masking", "seed": "Seed", "device": "Device", "mask_prob": "Mask probability",
    "schedule": "Learning-rate schedule", "weight_decay": "Weight decay", "clip_grad": "Gradient clipping",
    "eval_batches": "Validation batches", "log_every": "Log every (steps)", "precision": "Precision",
    "num_threads": "CPU threads", "data_workers": "Data worker processes", "devices": "Devices",
    "strategy": "Multi-device strategy",
    "compile": "Compile the model (torch.compile)", "activation_checkpointing": "Activation checkpointing",
    "masking_unit": "Masking unit", "packing": "Packing", "rtd_weight": "RTD loss weight",
    "distill_temperature": "Temperature", "distill_soft_weight": "Soft-target loss weight",
    "distill_mlm_weight": "MLM loss weight", "distill_cos_weight": "Cosine loss weight",
    "teacher_checkpoint": "Teacher checkpoint", "plm_k": "Partial prediction K (1/K predicted)",
    "tinybert_temperature": "Prediction-layer temperature",
    "tinybert_prediction_share": "Share of steps on prediction-layer distillation",
    "optimizer": "Optimizer", "betas": "AdamW betas", "eps": "AdamW epsilon",
    "report_to": "Mirror the metrics to",
}
CHOICE_LABELS = {
    "device": {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA GPU"},
    "masking": {"dynamic": "Dynamic", "static": "Static"},
    "precision": {"auto": "Auto", "fp32": "fp32", "bf16": "bf16 (GPU only)"},
    "strategy": {"auto": "Auto (FSDP2 when the model does not fit one device)", "ddp": "DDP (replicated)",
                 "fsdp": "FSDP2 (sharded)"},
    "schedule": {"linear": "Linear decay", "cosine": "Cosine decay", "constant": "Constant",
                 "inverse_sqrt": "Inverse square root (T5)"},
    "optimizer": {"adamw": "AdamW", "adafactor": "Adafactor (T5)"},
    "masking_unit": {"token": "Tokens (BERT)", "word": "Whole words (BERT-wwm)", "phrase": "Phrases (ERNIE)",
                     "ngram": "N-grams of words (ALBERT)", "span": "Spans (SpanBERT)"},
    "packing": {"full-sentences": "Full sentences, across documents", "doc-sentences": "Sentences of one document"},
    "compile": {"auto": "Auto (on a GPU)", "on": "On", "off": "Off"},
    "report_to": trackers.LABELS,
}

# setting -> a function giving {choice: why it cannot be chosen here}: its box is shown disabled with that.
UNAVAILABLE_CHOICES = {
    "report_to": lambda: {name: f"not installed here: {command}" for name, command in trackers.unavailable().items()},
}

# A first run should finish in minutes on a laptop CPU.
LAUNCH_DEFAULTS: dict[str, Any] = {
    "family": "bert", "preset": "bert-tiny",
    "max_steps": 500, "batch_size": 16, "seq_len": 128, "warmup_steps": 50,
    "eval_every": 100, "checkpoint_every": 250,
}

# Keys of the stand-alone CLI YAML (python -m trainer run) that are not RunConfig fields.
CLI_ONLY_KEYS = ("corpus", "tokenizer", "output_dir")


@functools.lru_cache(maxsize=1)
def registry_json() -> dict[str, Any]:
    return schema.as_json()


@functools.lru_cache(maxsize=1)
def finetune_json() -> dict[str, Any]:
    """The fine-tuning form's schema (trainer.catalog.finetune): tasks, techniques, settings, families."""
    from trainer.catalog import finetune as catalog_finetune

    return catalog_finetune.as_json()


def family_json(name: str) -> dict[str, Any] | None:
    return next((a for a in registry_json()["families"] if a["name"] == name), None)


def field_default(name: str) -> Any:
    if name in LAUNCH_DEFAULTS:
        return LAUNCH_DEFAULTS[name]
    return registry_json()["fields"][name]["default"]


def launch_defaults() -> dict[str, Any]:
    """Every training field's default as the form and API start from it."""
    arch = family_json(LAUNCH_DEFAULTS["family"]) or registry_json()["families"][0]
    return {
        "family": arch["name"], "preset": LAUNCH_DEFAULTS.get("preset") or arch["default_preset"],
        "objectives": list(arch["default_objectives"]),
        **{name: field_default(name) for name in CONFIG_FIELDS},
    }


def model_field_names() -> list[str]:
    """models_lib fields some family shows on the form (ALBERT's share_layers, ELECTRA's generator_size)."""
    names: list[str] = []
    for arch in registry_json()["families"]:
        names += [f["name"] for f in arch["model_fields"] if f["name"] not in names]
    return names


def model_field(name: str) -> dict[str, Any]:
    """The schema's description of a model field, with the families that show it."""
    found: dict[str, Any] = {}
    for arch in registry_json()["families"]:
        for f in arch["model_fields"]:
            if f["name"] == name:
                found = {**f, "families": [*found.get("families", []), arch["name"]]}
    return found


def family_of_field(name: str) -> list[str]:
    """The families whose form shows a family field."""
    return [a["name"] for a in registry_json()["families"] if name in a["config_fields"]]


def format_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.0f}K"


def preset_label(preset: dict[str, Any]) -> str:
    return f"{preset['name']} — {preset['label']}, {format_params(preset['params_without_embeddings'])} params"


def parse_config_yaml(text: str) -> tuple[RunConfig, str]:
    """A RunConfig from YAML text (an exported run config or a CLI config), plus a run name if it has one."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"The file is not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        raise ConfigError("The YAML file is empty.")
    if not isinstance(data, dict):
        raise ConfigError("The YAML file must hold a mapping of settings (like max_steps: 500), not a list or a value.")
    data = dict(data)
    name = data.pop("name", "") or ""
    for key in CLI_ONLY_KEYS:
        data.pop(key, None)
    return RunConfig.from_dict(data), str(name)


def split_config(config: RunConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values of the form's fields, the other config fields that differ from their defaults)."""
    data = config.to_dict()
    defaults = registry_json()["fields"]
    shown = {"family", "preset", "objectives", *CONFIG_FIELDS}
    form_values = {k: v for k, v in data.items() if k in shown}
    overrides = dict(data.get("model_overrides") or {})
    arch = family_json(config.family) or {}
    for f in arch.get("model_fields", []):
        if f["name"] in overrides:
            form_values[f["name"]] = overrides.pop(f["name"])
    data["model_overrides"] = overrides
    extra = {k: v for k, v in data.items()
             if k not in shown and k != TEACHER_FIELD and v != defaults.get(k, {}).get("default")}
    return form_values, extra


def launch_values(data: dict[str, Any], *, config_yaml: str = "") -> tuple[dict[str, Any], str]:
    """The full set of launch choices for an API request: defaults, then the YAML, then explicit fields.

    Returns (values with family/preset/objectives and training settings, run name from the YAML).
    """
    values = launch_defaults()
    yaml_name = ""
    if config_yaml.strip():
        config, yaml_name = parse_config_yaml(config_yaml)
        values = config.to_dict()
    if "family" in data and data["family"] != values["family"]:
        arch = family_json(data["family"])
        if arch is not None:
            # A new family starts from its own default preset, objectives, masking unit and the
            # optimizer settings of its paper.
            values["preset"] = arch["default_preset"]
            values["objectives"] = list(arch["default_objectives"])
            values["masking_unit"] = ""
            values["optimizer"] = ""  # the new family's own (T5: Adafactor), unless its defaults say
            values.update(arch["optimizer_defaults"])
    for key in ("family", "preset", "objectives", "model_overrides", TEACHER_FIELD, *CONFIG_FIELDS):
        if key in data:
            values[key] = data[key]
    values = length_from(values, data)  # the length given replaces the other one of the defaults or the YAML
    for name in model_field_names():  # generator_size, share_layers: top-level shortcuts
        if data.get(name) not in (None, ""):
            values["model_overrides"] = {**(values.get("model_overrides") or {}), name: data[name]}
    return values, yaml_name
