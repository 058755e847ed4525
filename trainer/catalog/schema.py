"""The launch form's schema: every family (trainer.families) with its presets and their sizes,
objectives, masking units, packings, tokenizer algorithm and settings, plus the objectives and
every RunConfig field's entry of trainer.settings_schema (label, help, default, bounds, choices).
The web app renders the form and the API's /api/registry/ from `as_json()`."""
from __future__ import annotations

from typing import Any

from trainer import families
from trainer import objectives
from trainer import settings_schema
from trainer.catalog.validation import algorithm_label, max_positions, with_objectives
from trainer.families import Family
from trainer.settings_schema import PRETRAIN


def as_json() -> dict[str, Any]:
    """Everything the launch form needs: families (presets with sizes, objectives, masking
    units, packings, tokenizer algorithm, family settings), objectives and every field's entry."""
    from trainer.objectives.examples import PACKINGS
    from trainer.objectives.masking import MASKING_UNITS
    from trainer import config as config_mod

    registered = [with_objectives(family) for family in families.all()]
    return {
        "families": [family_json(family) for family in registered],
        "objectives": {o.name: {"label": o.label, "help": o.help, "metrics": list(o.metrics)}
                       for o in objectives.all()},
        "masking_units": dict(MASKING_UNITS),
        "packings": dict(PACKINGS),
        "tokenizer_algorithms": {a: algorithm_label(a) for family in registered for a in family.tokenizer_algorithms},
        "pair_objectives": [o.name for o in objectives.all() if o.pair_examples],
        "fields": fields_json(),
        "dupe_factor": config_mod.DUPE_FACTOR,
    }


def fields_json() -> dict[str, dict[str, Any]]:
    """Every RunConfig field's schema entry (trainer.settings_schema, `Setting.as_json`): label,
    help, section, type, default and, as RunConfig checks them, bounds (the objectives' own
    settings' too) and choices (the masking units and packings the data layer has)."""
    from trainer import config as config_mod

    defaults, bounds, choices = config_mod.field_defaults(), config_mod.bounds(), config_mod.choices()
    return {s.name: s.as_json(defaults[s.name], bounds.get(s.name), choices.get(s.name))
            for s in settings_schema.settings(PRETRAIN)}


def default_extra_ids(algorithm: str) -> int:
    """How many T5 sentinel tokens a new tokenizer of `algorithm` gets unless told: T5's 100 when a
    family that trains that algorithm first has an objective reading sentinels (Unigram, for T5's
    span corruption), else none."""
    from trainer.prep.tokenization import T5_EXTRA_IDS

    for family in families.all():
        if family.tokenizer_algorithms[:1] == (algorithm,) and any(
                objectives.get(o).needs_sentinels for o in with_objectives(family).objectives):
            return T5_EXTRA_IDS
    return 0


def family_json(family: Family) -> dict[str, Any]:
    """One family as the form shows it."""
    presets = [{"name": name, **preset_size(family.preset_config(name, vocab_size=1024))}
               for name in family.presets]
    default_preset = family.default_preset or (presets[0]["name"] if presets else "")
    default_cfg = family.preset_config(default_preset, vocab_size=1024)
    return {
        "name": family.name,
        "label": family.label,
        "family": family.family,
        "about": family.about,
        "presets": presets,
        "default_preset": default_preset,
        "objectives": list(family.objectives),
        "required_objectives": list(family.required_objectives),
        "default_objectives": list(family.default_objectives),
        "allowed_objective_sets": family.allowed_objective_sets(),
        "refusals": dict(family.refusals),
        "tokenizer_algorithms": list(family.tokenizer_algorithms),
        "default_tokenizer_algorithm": family.tokenizer_algorithms[0],
        "masking_units": list(family.masking_units),
        "default_masking_unit": family.default_masking_unit,
        "packings": list(family.packings),
        "optimizer_defaults": dict(family.optimizer_defaults),
        "config_fields": list(family.config_fields),
        "model_fields": [mf.as_json(getattr(default_cfg, mf.name)) for mf in family.model_fields],
        "needs_teacher": family.needs_teacher,
        "one_objective": family.one_objective,
        "hidden_fields": list(family.hidden_fields),
        "sentinel_objectives": [o for o in family.objectives if objectives.get(o).needs_sentinels],
        "seq_len_help": family.seq_len_help(),
    }


def preset_size(model_cfg: Any) -> dict[str, Any]:
    """A preset's shape as its config describes it (models_lib's `shape()`: layers, hidden size,
    heads, ... and a label), the longest seq_len the form may offer, and its parameter count
    without embeddings (`count_params()`: those depend on the vocabulary)."""
    shape = dict(model_cfg.shape())
    label = shape.pop("label")
    cap = int(settings_schema.get("seq_len", PRETRAIN).bounds.high)
    return {**shape, "max_positions": min(max_positions(model_cfg), cap),
            "params_without_embeddings": model_cfg.count_params(), "label": label}
