"""What the launch form and the create API offer: which settings where, tiny CPU-friendly
defaults, and reading a run config from YAML. The settings themselves (labels, help, bounds,
choices, sections) are trainer.settings_schema's, served by trainer.catalog.schema.as_json().
"""
from __future__ import annotations

import functools
from typing import Any

import yaml

from trainer import settings_schema, trackers
from trainer.catalog import schema
from trainer.config import RunConfig, length_from, load_yaml
from trainer.errors import ConfigError
from trainer.settings_schema import PRETRAIN


def _section(name: str, *, advanced: bool | None = None) -> tuple[str, ...]:
    """The pre-training settings of one of the launch form's sections (trainer.settings_schema), in
    its order; `advanced`: only the main ones (False) or those of the fold (True)."""
    return tuple(s.name for s in settings_schema.offered(PRETRAIN)
                 if s.section == name and (advanced is None or s.advanced == advanced))


# Shown on the form: the training settings, main and in the "advanced" fold; the rest of RunConfig
# keeps its defaults unless a YAML sets it.
MAIN_FIELDS = _section("training", advanced=False)
ADVANCED_FIELDS = _section("training", advanced=True)
TRAINING_FIELDS = MAIN_FIELDS + ADVANCED_FIELDS
# Training fields a form may leave out (empty = RunConfig's default: one device, strategy auto,
# data workers auto, the last 3 checkpoints kept; an unticked box is off). The run's length is max_steps or epochs:
# one of them.
OPTIONAL_FIELDS = ("max_steps", "epochs", "devices", "strategy", "data_workers", "compile", "activation_checkpointing",
                   "report_to", "keep_last")
# Shown with the objectives: what a mask covers, how single segments are packed (empty = default).
OBJECTIVE_FIELDS = _section("objective")
# The optimizer (empty = the family's: Adafactor for T5, AdamW otherwise) and AdamW's own
# settings, which the page shows only for AdamW (empty = the family's paper values).
OPTIMIZER_FIELDS = _section("optimizer")
# RunConfig fields of one family (ELECTRA, DistilBERT), shown only for it (the families' config_fields
# say which); the teacher is chosen as one of the user's checkpoints (a checkpoint id, resolved to
# its folder by services).
TEACHER_FIELD = "teacher_checkpoint"
FAMILY_FIELDS = tuple(name for name in _section("family") if name != TEACHER_FIELD)
# Every RunConfig field the form and the API take by name (besides family, preset,
# objectives, model_overrides and the teacher).
CONFIG_FIELDS = TRAINING_FIELDS + OPTIMIZER_FIELDS + OBJECTIVE_FIELDS + FAMILY_FIELDS
# What an optional choice's empty option says (masking unit, packing, optimizer, strategy).
FAMILY_DEFAULT = "Default for the family"

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
