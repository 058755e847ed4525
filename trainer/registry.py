"""The one table of what can be trained: architectures, their presets and objectives.

Adding a family (RoBERTa, ALBERT, ELECTRA, T5, GPT) means adding an `ArchitectureSpec` row
(and its objectives to `OBJECTIVES`); `validate()` and the launch form (`as_json()`) read
everything from the table. Presets come from models_lib's own preset registry, loaded
lazily so that importing this module does not import torch.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from trainer.config import RunConfig


@dataclass(frozen=True)
class ObjectiveSpec:
    """A pre-training objective as the form shows it; its collator lives in trainer.collators."""

    name: str
    label: str
    help: str
    metrics: tuple[str, ...]  # the metric keys it adds


@dataclass(frozen=True)
class ArchitectureSpec:
    """One trainable family. `presets` are read from `preset_table` ("module:NAME") on demand."""

    name: str
    label: str
    family: str                        # models_lib family written to model_config.json
    preset_table: str                  # "models_lib.bert:BERT_PRESETS"
    config_class: str                  # "models_lib.bert:BertConfig" (has .from_preset)
    model_class: str                   # "models_lib.bert:BertForPreTraining"
    objectives: tuple[str, ...]        # compatible objectives
    required_objectives: tuple[str, ...]
    default_objectives: tuple[str, ...]
    tokenizer_algorithms: tuple[str, ...]
    optimizer_defaults: dict[str, Any] = field(default_factory=dict)
    default_preset: str = ""

    @property
    def presets(self) -> list[str]:
        return list(_load(self.preset_table))

    def preset_config(self, preset: str, **overrides: Any) -> Any:
        """The models_lib config object for a preset (vocab_size etc. as overrides)."""
        return _load(self.config_class).from_preset(preset, **overrides)

    def build_model(self, model_cfg: Any) -> Any:
        """A freshly initialised pre-training model (an nn.Module) for a models_lib config."""
        return _load(self.model_class)(model_cfg)

    def allowed_objective_sets(self) -> list[list[str]]:
        """Every objective set we accept: the required ones plus any of the optional ones."""
        optional = [o for o in self.objectives if o not in self.required_objectives]
        sets = []
        for mask in range(1 << len(optional)):
            extra = [o for i, o in enumerate(optional) if mask >> i & 1]
            sets.append(list(self.required_objectives) + extra)
        return sets


OBJECTIVES: dict[str, ObjectiveSpec] = {
    "mlm": ObjectiveSpec(
        name="mlm",
        label="Masked language modelling (MLM)",
        help="15% of the tokens are chosen; of those 80% become [MASK], 10% a random token and "
             "10% stay unchanged. The model predicts the original tokens.",
        metrics=("mlm_loss", "mlm_acc", "perplexity"),
    ),
    "nsp": ObjectiveSpec(
        name="nsp",
        label="Next sentence prediction (NSP)",
        help="Inputs are pairs [CLS] A [SEP] B [SEP]; half the time B really follows A in the "
             "document, half the time it comes from another document. The model tells which.",
        metrics=("nsp_loss", "nsp_acc"),
    ),
}

ARCHITECTURES: dict[str, ArchitectureSpec] = {
    "bert": ArchitectureSpec(
        name="bert",
        label="BERT",
        family="bert",
        preset_table="models_lib.bert:BERT_PRESETS",
        config_class="models_lib.bert:BertConfig",
        model_class="models_lib.bert:BertForPreTraining",
        objectives=("mlm", "nsp"),
        required_objectives=("mlm",),
        default_objectives=("mlm", "nsp"),
        tokenizer_algorithms=("wordpiece",),
        # BERT paper: Adam lr 1e-4, b1 0.9, b2 0.999, wd 0.01, warm-up then linear decay.
        optimizer_defaults={"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="bert-tiny",
    ),
}


def get(architecture: str) -> ArchitectureSpec:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        known = ", ".join(repr(a) for a in ARCHITECTURES)
        raise ConfigError(f"Unknown architecture {architecture!r}; choose one of {known}.") from None


def validate(config: "RunConfig") -> None:
    """Raise ConfigError unless the config's architecture, preset and objectives fit together."""
    spec = get(config.architecture)
    presets = spec.presets
    if config.preset not in presets:
        raise ConfigError(
            f"Unknown {spec.label} preset {config.preset!r}; choose one of {', '.join(presets)}."
        )
    for o in config.objectives:
        if o not in OBJECTIVES:
            raise ConfigError(f"Unknown objective {o!r}; known objectives are {', '.join(OBJECTIVES)}.")
        if o not in spec.objectives:
            raise ConfigError(f"{spec.label} cannot be trained with {OBJECTIVES[o].label}.")
    missing = [o for o in spec.required_objectives if o not in config.objectives]
    if missing:
        raise ConfigError(
            f"{spec.label} needs the {' and '.join(OBJECTIVES[o].label for o in missing)} objective."
        )
    if sorted(config.objectives) not in [sorted(s) for s in spec.allowed_objective_sets()]:
        raise ConfigError(f"{spec.label} cannot combine the objectives {', '.join(config.objectives)}.")
    reserved = sorted(set(config.model_overrides) & {"vocab_size", "pad_token_id"})
    if reserved:
        raise ConfigError(f"model_overrides cannot set {', '.join(reserved)}: it comes from the tokenizer.")
    try:
        model_cfg = spec.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"model_overrides do not fit the {config.preset} preset: {_msg(e)}") from None
    positions = max_positions(model_cfg)
    if not (16 <= config.seq_len <= positions):
        raise ConfigError(f"seq_len must be between 16 and the model's {positions} positions, not {config.seq_len}.")


def validate_tokenizer(config: "RunConfig", algorithm: str) -> None:
    """Raise ConfigError when a tokenizer trained with `algorithm` does not suit the architecture."""
    spec = get(config.architecture)
    if algorithm not in spec.tokenizer_algorithms:
        raise ConfigError(
            f"{spec.label} needs a {' or '.join(spec.tokenizer_algorithms)} tokenizer; this one is {algorithm}."
        )


def max_positions(model_cfg: Any) -> int:
    """Usable positions of a models_lib config (position_offset rows are not usable)."""
    n = getattr(model_cfg, "max_positions", None)
    if n is None:
        n = getattr(model_cfg, "max_position_embeddings") - getattr(model_cfg, "position_offset", 0)
    return int(n)


def as_json() -> dict[str, Any]:
    """Everything the launch form needs: architectures, presets with sizes, objectives, field
    defaults, bounds, choices and help text."""
    from trainer import config as config_mod

    archs = []
    for spec in ARCHITECTURES.values():
        presets = []
        for name in spec.presets:
            cfg = spec.preset_config(name, vocab_size=1024)
            presets.append({"name": name, **_preset_size(cfg)})
        archs.append({
            "name": spec.name,
            "label": spec.label,
            "family": spec.family,
            "presets": presets,
            "default_preset": spec.default_preset or (presets[0]["name"] if presets else ""),
            "objectives": list(spec.objectives),
            "required_objectives": list(spec.required_objectives),
            "default_objectives": list(spec.default_objectives),
            "allowed_objective_sets": spec.allowed_objective_sets(),
            "tokenizer_algorithms": list(spec.tokenizer_algorithms),
            "optimizer_defaults": dict(spec.optimizer_defaults),
        })
    bounds = {k: [lo, hi] for k, (lo, hi) in config_mod.BOUNDS.items()}
    return {
        "architectures": archs,
        "objectives": {o.name: {"label": o.label, "help": o.help, "metrics": list(o.metrics)}
                       for o in OBJECTIVES.values()},
        "fields": {
            name: {
                "default": default,
                "help": config_mod.field_help().get(name, ""),
                **({"min": bounds[name][0], "max": bounds[name][1]} if name in bounds else {}),
                **({"choices": list(config_mod.CHOICES[name])} if name in config_mod.CHOICES else {}),
            }
            for name, default in config_mod.field_defaults().items()
        },
        "dupe_factor": config_mod.DUPE_FACTOR,
    }


def _preset_size(cfg: Any) -> dict[str, Any]:
    """Shape of a preset and its parameter count without embeddings (those depend on the vocab)."""
    H = _first(cfg, "hidden_size")
    L = _first(cfg, "num_layers", "num_hidden_layers")
    A = _first(cfg, "num_heads", "num_attention_heads")
    F = _first(cfg, "intermediate_size") or 4 * H
    # per block: QKV + output projection (4 H^2 + 4H), FFN (2 H F + F + H), two LayerNorms (4H)
    block = 4 * H * H + 4 * H + 2 * H * F + F + H + 4 * H
    return {
        "layers": L, "hidden": H, "heads": A, "ffn": F,
        "max_positions": max_positions(cfg),
        "params_without_embeddings": L * block,
        "label": f"L{L} H{H} A{A}",
    }


def _first(obj: Any, *names: str) -> int:
    for n in names:
        v = getattr(obj, n, None)
        if v is not None:
            return int(v)
    return 0


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _msg(e: BaseException) -> str:
    return str(e.args[0]) if e.args else type(e).__name__
