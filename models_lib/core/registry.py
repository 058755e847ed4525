"""models_lib's one table of model families: `FAMILIES`, filled by the `register_family(...)` calls
at the bottom of models_lib.checkpoint (which imports every family's models; the models_lib
package imports it, so the table is full before any model or config is built).

It lives here, with no imports of its own, so that the configs (core.config), the presets
(families.presets), the task heads (families.downstream) and the Hugging Face formats (hf) read
what each family declared without an import cycle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Family:
    """Everything models_lib knows about one family, declared once by `register_family`."""

    name: str
    config_cls: type  # has to_dict() / from_dict(d)
    model_classes: tuple[type, ...]  # the first is built when model_config.json names no class
    label: str = ""  # for messages ("BERT"); the name when empty
    # Its presets, name -> fields (an encoder family's table in models_lib.families.presets); a
    # PresetConfig family's are its config class's own `presets` when not given.
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Its Hugging Face format: "module:NAME" of an encoder HFFormat (models_lib.hf drives it), or
    # a module with config_from_hf, from_pretrained and to_pretrained of its own ("" = none).
    hf_format: str = ""
    hf_model_types: tuple[str, ...] = ()  # config.json model_types that import as this family
    pair_head: bool = False  # an encoder whose pre-training model classifies the pooled [CLS] (NSP, SOP)
    task_heads: Any = None  # an encoder's fine-tuning heads (models_lib.families.downstream.TaskHeads), or None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if not self.presets:
            object.__setattr__(self, "presets", dict(getattr(self.config_cls, "presets", {}) or {}))


FAMILIES: dict[str, Family] = {}


def register_family(name: str, config_cls: type, *model_classes: type, **declared: Any) -> Family:
    """Register a family under `name`: its config class, its model classes and what else it
    declares (Family's fields: label, presets, hf_format, hf_model_types, pair_head, task_heads)."""
    family = Family(name, config_cls, tuple(model_classes), **declared)
    FAMILIES[name] = family
    return family
