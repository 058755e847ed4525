"""Every model family, registered once.

A family lives in one module of this package that defines `FAMILY`, a `base.Family` (its
config class and presets, its model classes, its Hugging Face formats, its training rules and
what the explorer can ask it). `REGISTRY` below is the one table of them: name -> the import
string of that object, in the order the launch form lists them. Modules are imported on first
use, so importing this package imports no torch (the web app reads it).

    from trainer import families
    families.get("bert").label          # "BERT"; ConfigError for an unknown name
    [f.name for f in families.all()]    # in REGISTRY's order

Adding a family: its module here, its models in models_lib with their one register_family line
(models_lib/checkpoint.py), its test, and one line in REGISTRY (docs/internals.md §8).
"""
from __future__ import annotations

from trainer.errors import ConfigError
from trainer.families.base import Family, GenerationPrompt, ModelField, load

__all__ = ["REGISTRY", "Family", "GenerationPrompt", "ModelField", "all", "find", "get", "names"]

REGISTRY: dict[str, str] = {
    "bert": "trainer.families.bert:FAMILY",
    "roberta": "trainer.families.roberta:FAMILY",
    "albert": "trainer.families.albert:FAMILY",
    "spanbert": "trainer.families.spanbert:FAMILY",
    "electra": "trainer.families.electra:FAMILY",
    "distilbert": "trainer.families.distilbert:FAMILY",
    "unilm": "trainer.families.unilm:FAMILY",
    "t5": "trainer.families.t5:FAMILY",
    "gpt": "trainer.families.gpt:FAMILY",
    "elmo": "trainer.families.elmo:FAMILY",
    "transfo_xl": "trainer.families.transfo_xl:FAMILY",
    "xlnet": "trainer.families.xlnet:FAMILY",
    "tinybert": "trainer.families.tinybert:FAMILY",
}

_loaded: dict[str, Family] = {}  # import string -> its Family


def names() -> list[str]:
    """The registered family names, in order."""
    return list(REGISTRY)


def get(name: str) -> Family:
    """The Family registered as `name`; ConfigError naming the known ones otherwise."""
    ref = REGISTRY.get(name) if isinstance(name, str) else None
    if ref is None:
        known = ", ".join(repr(a) for a in REGISTRY)
        raise ConfigError(f"Unknown family {name!r}; choose one of {known}.")
    family = _loaded.get(ref)
    if family is None:
        family = load(ref)
        if not isinstance(family, Family) or family.name != name:
            raise TypeError(f"{ref} must be a Family named {name!r}.")
        _loaded[ref] = family
    return family


def all() -> list[Family]:  # noqa: A001 (the registry's own namespace)
    """Every registered Family, in order."""
    return [get(name) for name in REGISTRY]


def find(name: str | None) -> Family | None:
    """The family a name refers to: a registered name, or a Hugging Face model_type one of them
    imports ("gpt2" -> GPT); None when none does."""
    key = (name or "").lower()
    if key in REGISTRY:
        return get(key)
    return next((f for f in all() if key in f.hf_model_types), None)
