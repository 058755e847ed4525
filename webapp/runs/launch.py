"""What the launch form and the create API offer: fields, labels, tiny CPU-friendly defaults,
and reading a run config from YAML. Everything else comes from trainer.registry.as_json().
"""
from __future__ import annotations

import functools
from typing import Any

import yaml

from trainer import registry
from trainer.config import RunConfig
from trainer.errors import ConfigError

# Shown on the form (in this order); the rest of RunConfig keeps its defaults unless a YAML sets it.
MAIN_FIELDS = ("max_steps", "batch_size", "seq_len", "lr", "warmup_steps", "grad_accum",
               "eval_every", "checkpoint_every", "masking", "seed", "device")
ADVANCED_FIELDS = ("mask_prob", "schedule", "weight_decay", "clip_grad", "eval_batches", "log_every",
                   "precision", "num_threads")
TRAINING_FIELDS = MAIN_FIELDS + ADVANCED_FIELDS

LABELS = {
    "max_steps": "Steps", "batch_size": "Batch size", "seq_len": "Sequence length (tokens)",
    "lr": "Peak learning rate", "warmup_steps": "Warm-up steps", "grad_accum": "Gradient accumulation",
    "eval_every": "Validate every (steps)", "checkpoint_every": "Checkpoint every (steps)",
    "masking": "Masking", "seed": "Seed", "device": "Device", "mask_prob": "Mask probability",
    "schedule": "Learning-rate schedule", "weight_decay": "Weight decay", "clip_grad": "Gradient clipping",
    "eval_batches": "Validation batches", "log_every": "Log every (steps)", "precision": "Precision",
    "num_threads": "CPU threads",
}
CHOICE_LABELS = {
    "device": {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA GPU"},
    "masking": {"dynamic": "Dynamic", "static": "Static"},
    "precision": {"auto": "Auto", "fp32": "fp32", "bf16": "bf16 (GPU only)"},
    "schedule": {"linear": "Linear decay", "cosine": "Cosine decay", "constant": "Constant"},
}

# A first run should finish in minutes on a laptop CPU.
LAUNCH_DEFAULTS: dict[str, Any] = {
    "architecture": "bert", "preset": "bert-tiny",
    "max_steps": 500, "batch_size": 16, "seq_len": 128, "warmup_steps": 50,
    "eval_every": 100, "checkpoint_every": 250,
}

# Keys of the stand-alone CLI YAML (python -m trainer run) that are not RunConfig fields.
CLI_ONLY_KEYS = ("corpus", "tokenizer", "output_dir")


@functools.lru_cache(maxsize=1)
def registry_json() -> dict[str, Any]:
    return registry.as_json()


def architecture_json(name: str) -> dict[str, Any] | None:
    return next((a for a in registry_json()["architectures"] if a["name"] == name), None)


def field_default(name: str) -> Any:
    if name in LAUNCH_DEFAULTS:
        return LAUNCH_DEFAULTS[name]
    return registry_json()["fields"][name]["default"]


def launch_defaults() -> dict[str, Any]:
    """Every training field's default as the form and API start from it."""
    arch = architecture_json(LAUNCH_DEFAULTS["architecture"]) or registry_json()["architectures"][0]
    return {
        "architecture": arch["name"], "preset": LAUNCH_DEFAULTS.get("preset") or arch["default_preset"],
        "objectives": list(arch["default_objectives"]),
        **{name: field_default(name) for name in TRAINING_FIELDS},
    }


def format_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.0f}K"


def preset_label(preset: dict[str, Any]) -> str:
    return f"{preset['name']} — {preset['label']}, {format_params(preset['params_without_embeddings'])} params"


def parse_config_yaml(text: str) -> tuple[RunConfig, str]:
    """A RunConfig from YAML text (an exported run config or a CLI config), plus a run name if it has one."""
    try:
        data = yaml.safe_load(text)
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
    shown = {"architecture", "preset", "objectives", *TRAINING_FIELDS}
    form_values = {k: v for k, v in data.items() if k in shown}
    extra = {k: v for k, v in data.items() if k not in shown and v != defaults.get(k, {}).get("default")}
    return form_values, extra


def launch_values(data: dict[str, Any], *, config_yaml: str = "") -> tuple[dict[str, Any], str]:
    """The full set of launch choices for an API request: defaults, then the YAML, then explicit fields.

    Returns (values with architecture/preset/objectives and training settings, run name from the YAML).
    """
    values = launch_defaults()
    yaml_name = ""
    if config_yaml.strip():
        config, yaml_name = parse_config_yaml(config_yaml)
        values = config.to_dict()
    if "architecture" in data and data["architecture"] != values["architecture"]:
        arch = architecture_json(data["architecture"])
        if arch is not None:  # a new family starts from its own default preset and objectives
            values["preset"] = arch["default_preset"]
            values["objectives"] = list(arch["default_objectives"])
    for key in ("architecture", "preset", "objectives", "model_overrides", *TRAINING_FIELDS):
        if key in data:
            values[key] = data[key]
    return values, yaml_name
