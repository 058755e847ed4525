"""The one table of what can be trained: architectures, their presets and objectives.

Adding a family (T5, GPT, ...) means adding an `ArchitectureSpec` row (and its objectives to
`OBJECTIVES`); `validate()` and the launch form (`as_json()`) read everything from the table.
Presets come from models_lib's own preset registry, loaded lazily so that importing this
module does not import torch.

The encoder family (SPEC.md, "Encoder family"): BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA,
DistilBERT and UniLM. Per family the table says which tokenizer algorithm it reads, which
objectives it trains (and which it must), which masking units and packings make sense, its
optimizer defaults from the paper, and the extra settings the form shows: RunConfig fields
only that family uses (`config_fields`) and models_lib config fields it exposes
(`model_fields`, written to model_overrides).
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
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
class ModelField:
    """A models_lib config field the launch form shows for one family; its value goes to
    model_overrides (its default is the preset's own value)."""

    name: str
    label: str
    help: str
    choices: tuple[str, ...] = ()
    choice_labels: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None

    def check(self, value: Any, label: str) -> None:
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(repr(c) for c in self.choices)} for {label}, "
                              f"not {value!r}.")
        if self.bounds is not None:
            lo, hi = self.bounds
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(f"{self.name} must be between {lo:g} and {hi:g} for {label}, not {value!r}.")

    def as_json(self, default: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "help": self.help, "default": default}
        if self.choices:
            out["choices"] = [[c, lab] for c, lab in zip(self.choices, self.choice_labels or self.choices)]
        if self.bounds is not None:
            out["min"], out["max"] = self.bounds
        return out


@dataclass(frozen=True)
class ArchitectureSpec:
    """One trainable family. `presets` are read from `preset_table` ("module:NAME") on demand."""

    name: str
    label: str
    family: str                        # models_lib family written to model_config.json
    preset_table: str                  # "models_lib.presets:BERT_PRESETS"
    config_class: str                  # "models_lib.config:EncoderConfig" (has .from_preset)
    model_class: str                   # "models_lib.bert:BertForPreTraining"
    objectives: tuple[str, ...]        # compatible objectives
    required_objectives: tuple[str, ...]
    default_objectives: tuple[str, ...]
    tokenizer_algorithms: tuple[str, ...]   # the first is the one to train for it
    masking_units: tuple[str, ...] = ("token", "word", "phrase", "ngram")  # the first is the default
    packings: tuple[str, ...] = ("full-sentences", "doc-sentences")
    optimizer_defaults: dict[str, Any] = field(default_factory=dict)
    default_preset: str = ""
    config_fields: tuple[str, ...] = ()       # RunConfig fields only this family uses
    model_fields: tuple[ModelField, ...] = ()  # models_lib fields the form shows (model_overrides)
    refusals: dict[str, str] = field(default_factory=dict)  # objective -> why this family does not train it
    about: str = ""                    # one line for the form

    @property
    def presets(self) -> list[str]:
        return list(_load(self.preset_table))

    @property
    def default_masking_unit(self) -> str:
        return self.masking_units[0]

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


# Objectives whose examples are sentence pairs (their collators build their own pairs, so
# the packing of single segments does not apply).
PAIR_OBJECTIVES = ("nsp", "sop", "unilm")

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
    "sop": ObjectiveSpec(
        name="sop",
        label="Sentence order prediction (SOP)",
        help="Inputs are two consecutive segments of one document, [CLS] A [SEP] B [SEP]; half the "
             "time they are swapped. The model tells whether they are in their original order (ALBERT).",
        metrics=("sop_loss", "sop_acc"),
    ),
    "sbo": ObjectiveSpec(
        name="sbo",
        label="Span boundary objective (SBO)",
        help="Whole spans of words are masked (lengths ~ Geometric(0.2), at most 10); each span token is "
             "also predicted from the two tokens just outside the span and its place in it (SpanBERT).",
        metrics=("sbo_loss", "sbo_acc"),
    ),
    "rtd": ObjectiveSpec(
        name="rtd",
        label="Replaced token detection (RTD)",
        help="A small generator fills the masked positions with sampled tokens; the discriminator tells "
             "for every token whether it was replaced. Loss = generator MLM + rtd_weight x RTD (ELECTRA).",
        metrics=("rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"),
    ),
    "distill": ObjectiveSpec(
        name="distill",
        label="Knowledge distillation",
        help="A student with half the teacher's layers learns the teacher's soft predictions at a "
             "temperature, the true tokens (MLM) and the direction of its hidden states (DistilBERT).",
        metrics=("soft_loss", "cos_loss"),
    ),
    "unilm": ObjectiveSpec(
        name="unilm",
        label="UniLM attention modes",
        help="Each example is trained with one self-attention mask: bidirectional (1/3), seq2seq (1/3, "
             "source fully visible, target left to right), left-to-right or right-to-left (1/6 each).",
        metrics=(),
    ),
}

_WORDS = ("token", "word", "phrase", "ngram")  # units any MLM-style objective takes ("span" needs SBO)
_BERT_ADAM = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"}


def _presets(family: str) -> str:
    return f"models_lib.presets:{family.upper()}_PRESETS"


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
        masking_units=_WORDS,
        # BERT paper: Adam lr 1e-4, b1 0.9, b2 0.999, wd 0.01, warm-up then linear decay.
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="bert-tiny",
        about="Post-LN encoder with segment embeddings; MLM, optionally with next sentence prediction.",
    ),
    "roberta": ArchitectureSpec(
        name="roberta",
        label="RoBERTa",
        family="roberta",
        preset_table=_presets("roberta"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.roberta:RobertaForPreTraining",
        objectives=("mlm",),
        required_objectives=("mlm",),
        default_objectives=("mlm",),
        tokenizer_algorithms=("bpe",),
        masking_units=_WORDS,
        # Liu et al. 2019: Adam b2 0.98 (stabler with large batches), eps 1e-6, wd 0.01; lr 6e-4 (base).
        optimizer_defaults={"lr": 6e-4, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="roberta-tiny",
        refusals={"nsp": "RoBERTa is trained without next sentence prediction (NSP): Liu et al. found that "
                         "dropping it does not hurt. Train MLM only."},
        about="BERT's encoder with a byte-level BPE vocabulary, dynamic masking, packed full-length "
              "inputs and no NSP.",
    ),
    "albert": ArchitectureSpec(
        name="albert",
        label="ALBERT",
        family="albert",
        preset_table=_presets("albert"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.albert:AlbertForPreTraining",
        objectives=("mlm", "sop"),
        required_objectives=("mlm",),
        default_objectives=("mlm", "sop"),
        tokenizer_algorithms=("unigram",),
        masking_units=("ngram", "token", "word", "phrase"),
        optimizer_defaults=dict(_BERT_ADAM),  # ALBERT used LAMB (lr 0.00176); AdamW here
        default_preset="albert-tiny",
        model_fields=(
            ModelField("share_layers", "Cross-layer sharing",
                       "Which weights the layers share: all of them (ALBERT's default), only the attention, "
                       "only the feed-forward network, or none.",
                       choices=("all", "attention", "ffn", "none"),
                       choice_labels=("All layers", "Attention only", "Feed-forward only", "None")),
        ),
        refusals={"nsp": "ALBERT replaces next sentence prediction (NSP) with sentence order prediction "
                         "(SOP); choose SOP."},
        about="Factorised embeddings (vocab x E, then E -> H) and layers that share weights; MLM with "
              "n-gram masking plus sentence order prediction.",
    ),
    "spanbert": ArchitectureSpec(
        name="spanbert",
        label="SpanBERT",
        family="spanbert",
        preset_table=_presets("spanbert"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.spanbert:SpanBertForPreTraining",
        objectives=("mlm", "sbo"),
        required_objectives=("mlm", "sbo"),
        default_objectives=("mlm", "sbo"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=("span",),
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="spanbert-tiny",
        refusals={"nsp": "SpanBERT trains on single segments without next sentence prediction (NSP)."},
        about="BERT's encoder trained on single segments with span masking and the span boundary objective.",
    ),
    "electra": ArchitectureSpec(
        name="electra",
        label="ELECTRA",
        family="electra",
        preset_table=_presets("electra"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.electra:ElectraForPreTraining",
        objectives=("mlm", "rtd"),
        required_objectives=("mlm", "rtd"),
        default_objectives=("mlm", "rtd"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        # Clark et al. 2020: Adam lr 5e-4 (small), eps 1e-6, wd 0.01, linear decay.
        optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="electra-tiny",
        config_fields=("rtd_weight",),
        model_fields=(
            ModelField("generator_size", "Generator size",
                       "The generator's width as a fraction of the discriminator's (ELECTRA: 1/4 to 1/2; "
                       "hidden size, FFN and heads scale, depth stays).",
                       bounds=(0.25, 0.5)),
        ),
        refusals={"nsp": "ELECTRA's discriminator is trained on single segments without next sentence "
                         "prediction (NSP)."},
        about="A small generator fills the masks, a discriminator spots replaced tokens; only the "
              "discriminator is kept for fine-tuning.",
    ),
    "distilbert": ArchitectureSpec(
        name="distilbert",
        label="DistilBERT",
        family="distilbert",
        preset_table=_presets("distilbert"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.distilbert:DistilBertForPreTraining",
        objectives=("mlm", "distill"),
        required_objectives=("mlm", "distill"),
        default_objectives=("mlm", "distill"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        # Sanh et al. 2019: Adam lr 5e-4, eps 1e-6, warm-up then linear decay.
        optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="distilbert-tiny",
        config_fields=("teacher_checkpoint", "distill_temperature", "distill_soft_weight", "distill_mlm_weight",
                       "distill_cos_weight"),
        refusals={"nsp": "DistilBERT drops token types and the pooler, so it has no next sentence "
                         "prediction (NSP)."},
        about="A student with half a trained BERT teacher's layers, distilled from its soft predictions "
              "and hidden states.",
    ),
    "unilm": ArchitectureSpec(
        name="unilm",
        label="UniLM",
        family="unilm",
        preset_table=_presets("unilm"),
        config_class="models_lib.config:EncoderConfig",
        model_class="models_lib.unilm:UniLMForPreTraining",
        objectives=("mlm", "unilm"),
        required_objectives=("mlm", "unilm"),
        default_objectives=("mlm", "unilm"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="unilm-tiny",
        refusals={"nsp": "UniLM here trains its four attention modes without next sentence prediction (NSP)."},
        about="BERT's encoder trained with bidirectional, left-to-right, right-to-left and seq2seq attention "
              "masks, so it can also generate text.",
    ),
}

# The teacher families DistilBERT distils (models_lib.distilbert.distil_from_teacher).
TEACHER_FAMILIES = ("bert",)
# Fields of the student that follow from the teacher (the rest come from the preset).
STUDENT_SHAPE = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings")


def get(architecture: str) -> ArchitectureSpec:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        known = ", ".join(repr(a) for a in ARCHITECTURES)
        raise ConfigError(f"Unknown architecture {architecture!r}; choose one of {known}.") from None


def validate(config: "RunConfig") -> None:
    """Raise ConfigError unless the config's architecture, preset, objectives, masking unit,
    packing, family settings and seq_len fit together. Reads no files: a DistilBERT teacher
    (a BERT checkpoint on disk that the student's shape fits) is checked by validate_teacher,
    which the engine, the CLI and the web app call before training, so that a stored config
    stays loadable after its teacher is deleted, and the web app can check that the teacher
    is the user's own before anything reads it."""
    spec = get(config.architecture)
    presets = spec.presets
    if config.preset not in presets:
        raise ConfigError(
            f"Unknown {spec.label} preset {config.preset!r}; choose one of {', '.join(presets)}."
        )
    _check_objectives(spec, config)
    _check_masking_and_packing(spec, config)
    _check_family_fields(spec, config)
    reserved = sorted(set(config.model_overrides) & {"vocab_size", "pad_token_id", "family"})
    if reserved:
        raise ConfigError(f"model_overrides cannot set {', '.join(reserved)}: "
                          f"{'the architecture sets it' if reserved == ['family'] else 'it comes from the tokenizer'}.")
    try:
        model_cfg = spec.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"model_overrides do not fit the {config.preset} preset: {_msg(e)}") from None
    for mf in spec.model_fields:
        mf.check(getattr(model_cfg, mf.name), spec.label)
    if spec.name == "spanbert" and getattr(model_cfg, "max_span_length", 10) < 10:
        raise ConfigError("SpanBERT's spans are up to 10 words long, so max_span_length (the SBO head's position "
                          f"table) must be at least 10, not {model_cfg.max_span_length}.")
    positions = max_positions(model_cfg)
    if not (16 <= config.seq_len <= positions):
        raise ConfigError(f"seq_len must be between 16 and the model's {positions} positions, not {config.seq_len}.")


def _check_objectives(spec: ArchitectureSpec, config: "RunConfig") -> None:
    for o in config.objectives:
        if o not in OBJECTIVES:
            raise ConfigError(f"Unknown objective {o!r}; known objectives are {', '.join(OBJECTIVES)}.")
        if o not in spec.objectives:
            raise ConfigError(spec.refusals.get(o) or f"{spec.label} cannot be trained with {OBJECTIVES[o].label}.")
    missing = [o for o in spec.required_objectives if o not in config.objectives]
    if missing:
        names = " and ".join(OBJECTIVES[o].label for o in missing)
        raise ConfigError(f"{spec.label} needs the {names}{'' if 'objective' in names.lower() else ' objective'}.")
    if sorted(config.objectives) not in [sorted(s) for s in spec.allowed_objective_sets()]:
        raise ConfigError(f"{spec.label} cannot combine the objectives {', '.join(config.objectives)}.")


def _check_masking_and_packing(spec: ArchitectureSpec, config: "RunConfig") -> None:
    unit = config.masking_unit
    if unit not in spec.masking_units:
        if unit == "span":
            raise ConfigError(f"Span masking (masking_unit \"span\") belongs to SpanBERT's span boundary objective "
                              f"(SBO); choose the SpanBERT architecture, or another masking unit for {spec.label} "
                              f"({', '.join(spec.masking_units)}).")
        if spec.masking_units == ("span",):
            raise ConfigError(f"{spec.label}'s span boundary objective (SBO) needs span masking: masking_unit must be "
                              f"\"span\", not {unit!r}.")
        raise ConfigError(f"{spec.label} cannot use {unit!r} masking; choose one of {', '.join(spec.masking_units)}.")
    if config.packing not in spec.packings:
        raise ConfigError(f"{spec.label} cannot use {config.packing!r} packing; choose one of {', '.join(spec.packings)}.")
    pairs = [o for o in config.objectives if o in PAIR_OBJECTIVES]
    if config.packing == "doc-sentences" and pairs:
        label = OBJECTIVES[pairs[0]].label
        raise ConfigError(f"packing \"doc-sentences\" applies to single-segment inputs, but {label} trains on "
                          f"sentence pairs it makes itself; keep packing \"full-sentences\" or train without it.")


def _check_family_fields(spec: ArchitectureSpec, config: "RunConfig") -> None:
    """A setting of another family is refused when it differs from its default, so that nobody
    believes it had an effect. (A models_lib field another family lacks, e.g. generator_size
    for BERT, is refused by the preset's config class.)"""
    from trainer.config import field_defaults

    defaults = field_defaults()
    for other in ARCHITECTURES.values():
        if other.name == spec.name:
            continue
        for name in other.config_fields:
            if name not in spec.config_fields and getattr(config, name) != defaults[name]:
                raise ConfigError(f"{name} applies to {other.label} only; leave it out for {spec.label}.")
    if spec.name == "distilbert" and not config.teacher_checkpoint:
        raise ConfigError("DistilBERT distils a trained BERT teacher: set teacher_checkpoint to the folder of a BERT "
                          "checkpoint trained with the same tokenizer (on the web form, choose one of your BERT "
                          "checkpoints).")


def validate_teacher(config: "RunConfig") -> dict[str, Any]:
    """For a DistilBERT config: the teacher's model_config.json ({"family", "config", ...}),
    after checking that the folder exists and holds a BERT checkpoint the student's preset
    fits. ConfigError otherwise. The engine and the web app call this before training."""
    spec = get(config.architecture)
    if not config.teacher_checkpoint:
        raise ConfigError(f"{spec.label} has no teacher to check: teacher_checkpoint is empty.")
    model_cfg = spec.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    folder = Path(config.teacher_checkpoint)
    meta_path = folder / "model_config.json"
    if not meta_path.is_file() or not (folder / "model.safetensors").is_file():
        raise ConfigError(f"The teacher checkpoint {folder} does not exist or is incomplete "
                          f"(model_config.json and model.safetensors are needed).")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        teacher = dict(meta["config"])
        family = meta.get("family", "bert")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ConfigError(f"The teacher checkpoint {folder.name} has an unreadable model_config.json.") from None
    if family not in TEACHER_FAMILIES:
        label = ARCHITECTURES[family].label if family in ARCHITECTURES else family
        raise ConfigError(f"The teacher checkpoint {folder.name} holds a model of another family ({label}); "
                          f"DistilBERT's teacher must be a BERT checkpoint.")
    if (teacher.get("share_layers", "none") != "none" or teacher.get("norm_placement", "post") != "post"
            or teacher.get("embedding_size") is not None):
        raise ConfigError(f"The teacher checkpoint {folder.name} is a BERT with shared layers, pre-LN blocks or "
                          f"factorised embeddings; a DistilBERT student copies every other layer of a plain BERT.")
    wanted = student_overrides(teacher)
    have = {k: getattr(model_cfg, k) for k in STUDENT_SHAPE}
    if have != wanted:
        teacher_shape = f"L{teacher.get('num_layers')} H{teacher.get('hidden_size')} A{teacher.get('num_heads')}"
        differ = ", ".join(f"{k} {have[k]} (needs {wanted[k]})" for k in STUDENT_SHAPE if have[k] != wanted[k])
        raise ConfigError(f"The student must have half the teacher's layers and its width: the teacher is "
                          f"{teacher_shape}, but the {config.preset} preset with these model_overrides gives "
                          f"{differ}. Set model_overrides to {json.dumps(wanted)}.")
    return meta


def student_overrides(teacher_config: dict[str, Any]) -> dict[str, Any]:
    """The student's shape fields for a teacher's config dict: half its layers (rounded up, as
    distil_from_teacher takes layers 0, 2, 4, ...), the same width, heads and positions."""
    from models_lib.config import EncoderConfig  # defaults for fields an old config lacks

    base = EncoderConfig()
    value = {k: teacher_config.get(k, getattr(base, k)) for k in STUDENT_SHAPE}
    if value["intermediate_size"] is None:
        value["intermediate_size"] = 4 * value["hidden_size"]
    value["num_layers"] = math.ceil(int(value["num_layers"]) / 2)
    return value


def validate_tokenizer(config: "RunConfig", algorithm: str) -> None:
    """Raise ConfigError when a tokenizer trained with `algorithm` does not suit the architecture."""
    spec = get(config.architecture)
    if algorithm not in spec.tokenizer_algorithms:
        raise ConfigError(f"{spec.label} needs a {' or '.join(spec.tokenizer_algorithms)} tokenizer; "
                          f"this one is {algorithm}.")


def algorithm_label(name: str) -> str:
    from trainer.tokenization import ALGORITHMS

    return ALGORITHMS[name].label if name in ALGORITHMS else name


def max_positions(model_cfg: Any) -> int:
    """Usable positions of a models_lib config (position_offset rows are not usable)."""
    n = getattr(model_cfg, "max_positions", None)
    if n is None:
        n = getattr(model_cfg, "max_position_embeddings") - getattr(model_cfg, "position_offset", 0)
    return int(n)


def as_json() -> dict[str, Any]:
    """Everything the launch form needs: architectures (presets with sizes, objectives, masking
    units, packings, tokenizer algorithm, family settings), objectives, field defaults, bounds,
    choices and help text."""
    from trainer import config as config_mod
    from trainer.collators import PACKINGS
    from trainer.masking import MASKING_UNITS

    archs = []
    for spec in ARCHITECTURES.values():
        presets = []
        for name in spec.presets:
            cfg = spec.preset_config(name, vocab_size=1024)
            presets.append({"name": name, **_preset_size(cfg)})
        default_preset = spec.default_preset or (presets[0]["name"] if presets else "")
        default_cfg = spec.preset_config(default_preset, vocab_size=1024)
        archs.append({
            "name": spec.name,
            "label": spec.label,
            "family": spec.family,
            "about": spec.about,
            "presets": presets,
            "default_preset": default_preset,
            "objectives": list(spec.objectives),
            "required_objectives": list(spec.required_objectives),
            "default_objectives": list(spec.default_objectives),
            "allowed_objective_sets": spec.allowed_objective_sets(),
            "refusals": dict(spec.refusals),
            "tokenizer_algorithms": list(spec.tokenizer_algorithms),
            "default_tokenizer_algorithm": spec.tokenizer_algorithms[0],
            "masking_units": list(spec.masking_units),
            "default_masking_unit": spec.default_masking_unit,
            "packings": list(spec.packings),
            "optimizer_defaults": dict(spec.optimizer_defaults),
            "config_fields": list(spec.config_fields),
            "model_fields": [mf.as_json(getattr(default_cfg, mf.name)) for mf in spec.model_fields],
            "needs_teacher": "teacher_checkpoint" in spec.config_fields,
        })
    bounds = {k: [lo, hi] for k, (lo, hi) in config_mod.BOUNDS.items()}
    all_choices = config_mod.choices()
    return {
        "architectures": archs,
        "objectives": {o.name: {"label": o.label, "help": o.help, "metrics": list(o.metrics)}
                       for o in OBJECTIVES.values()},
        "masking_units": dict(MASKING_UNITS),
        "packings": dict(PACKINGS),
        "tokenizer_algorithms": {a: algorithm_label(a) for spec in ARCHITECTURES.values()
                                 for a in spec.tokenizer_algorithms},
        "pair_objectives": list(PAIR_OBJECTIVES),
        "fields": {
            name: {
                "default": default,
                "help": config_mod.field_help().get(name, ""),
                **({"min": bounds[name][0], "max": bounds[name][1]} if name in bounds else {}),
                **({"choices": list(all_choices[name])} if name in all_choices else {}),
            }
            for name, default in config_mod.field_defaults().items()
        },
        "dupe_factor": config_mod.DUPE_FACTOR,
    }


def _preset_size(cfg: Any) -> dict[str, Any]:
    """Shape of a preset and its parameter count without embeddings (those depend on the vocab).
    Shared layers count once (ALBERT); ELECTRA's count includes its generator."""
    H = _first(cfg, "hidden_size")
    L = _first(cfg, "num_layers", "num_hidden_layers")
    A = _first(cfg, "num_heads", "num_attention_heads")
    F = _first(cfg, "intermediate_size") or 4 * H
    params = _encoder_params(cfg)
    if getattr(cfg, "family", "") == "electra":
        params += _encoder_params(cfg.generator_config())
    return {
        "layers": L, "hidden": H, "heads": A, "ffn": F,
        "max_positions": max_positions(cfg),
        "params_without_embeddings": params,
        "label": f"L{L} H{H} A{A}",
    }


def _encoder_params(cfg: Any) -> int:
    H = _first(cfg, "hidden_size")
    L = _first(cfg, "num_layers", "num_hidden_layers")
    F = _first(cfg, "intermediate_size") or 4 * H
    # per block: QKV + output projection (4 H^2 + 4H), FFN (2 H F + F + H), two LayerNorms (4H)
    attention, ffn, norms = 4 * H * H + 4 * H, 2 * H * F + F + H, 4 * H
    shared = getattr(cfg, "share_layers", "none")
    return {"all": attention + ffn + norms,
            "attention": attention + L * (ffn + norms),
            "ffn": ffn + L * (attention + norms)}.get(shared, L * (attention + ffn + norms))


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
