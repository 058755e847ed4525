"""RunConfig: everything a training run needs besides its data, validated on creation.

A RunConfig is JSON- and YAML-able (the web form stores `to_dict()` on the Run row; the CLI
reads it from YAML). `__post_init__` checks each field on its own, then asks the
family registry whether the combination (family, preset, objectives, seq_len)
is one we can train; either way a bad value raises `ConfigError` with a sentence a user can
act on. Nothing here imports torch at import time: the web process validates configs too.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from trainer import settings_schema, trackers
from trainer.errors import ConfigError
from trainer.settings_schema import MIN_SEQ_LEN, PRETRAIN, Bounds

# The settings' bounds, choices, labels and help are declared once, in trainer.settings_schema
# (with fine-tuning's): bounds() and choices() below are pre-training's.

# Choices owned by the data layer (trainer.objectives.masking.MASKING_UNITS, trainer.objectives.examples.PACKINGS);
# read lazily so that importing this module does not import torch. See choices().
_LAZY_CHOICES = {
    "masking_unit": ("trainer.objectives.masking", "MASKING_UNITS"),
    "packing": ("trainer.objectives.examples", "PACKINGS"),
}

ALL_DEVICES = "all"  # devices: every GPU of the machine
AUTO_WORKERS = -1  # data_workers: as many as the cores left by the training threads ("auto" in YAML reads as it)

# Static masking: each example gets this many different masks, reused round-robin by epoch.
DUPE_FACTOR = 10


def load_yaml(text: str) -> Any:
    """yaml.safe_load for text a user gives (an imported config). PyYAML composes nested lists and
    mappings recursively, so ``[[[[...`` thousands deep is a RecursionError: refused here as a
    ConfigError with a sentence instead (JSON has trainer.jsonio's depth limit for the same)."""
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError("The YAML is nested too deeply to read (lists or mappings inside one another); a run "
                          "config is a flat mapping of settings.") from None


# ---------------------------------------------------------------------- setting groups
# A run's settings in the groups the code that reads them works with: the optimizer reads
# OptimArgs, the data stream ObjectiveArgs and TrainArgs, and so on. RunConfig stays the one
# flat record that YAML, the API and checkpoints store; `RunConfig.<group>` hands out a group.
@dataclass(frozen=True)
class ModelArgs:
    """What to train: the family, its preset and the preset fields replaced."""

    family: str
    preset: str
    model_overrides: dict[str, Any]


@dataclass(frozen=True)
class ObjectiveArgs:
    """What the model learns and how its examples are made."""

    objectives: tuple[str, ...]
    masking: str
    mask_prob: float
    masking_unit: str
    packing: str
    rtd_weight: float
    teacher_checkpoint: str
    distill_temperature: float
    distill_soft_weight: float
    distill_mlm_weight: float
    distill_cos_weight: float
    plm_k: int
    tinybert_temperature: float
    tinybert_prediction_share: float


@dataclass(frozen=True)
class TrainArgs:
    """How long and in what batches."""

    max_steps: int
    epochs: float
    batch_size: int
    seq_len: int
    grad_accum: int


@dataclass(frozen=True)
class OptimArgs:
    """The optimizer, its learning-rate schedule and gradient clipping."""

    optimizer: str
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup_steps: int
    schedule: str
    clip_grad: float


@dataclass(frozen=True)
class EvalArgs:
    """When to validate, checkpoint and log, and the trackers the metrics are mirrored to."""

    eval_every: int
    eval_batches: int
    checkpoint_every: int
    keep_last: int
    log_every: int
    report_to: tuple[str, ...]


@dataclass(frozen=True)
class RuntimeArgs:
    """Where and how the computation runs."""

    seed: int
    device: str
    precision: str
    num_threads: int
    data_workers: int
    devices: int | str
    strategy: str
    compile: str  # "auto" (on with CUDA), "on" or "off"
    activation_checkpointing: bool


# group name (the RunConfig property) -> its class, in the order YAML exports them
GROUPS: dict[str, type] = {"model": ModelArgs, "objective": ObjectiveArgs, "train": TrainArgs, "optim": OptimArgs,
                           "eval": EvalArgs, "runtime": RuntimeArgs}


# ---------------------------------------------------------------------- epochs or max_steps
# A run's length is max_steps (optimizer updates) or epochs (passes over the train split), never
# both. With epochs, max_steps is 0 until the engine knows the train split's size and turns the
# epochs into steps (resolve_epochs); the config it trains with (and its checkpoints record) has both.
BOTH_LENGTHS = ("Give the run's length as max_steps (optimizer updates) or as epochs (passes over the train "
                "split), not both: leave one of them out.")


LENGTH_FIELDS = ("max_steps", "epochs")


def _given(value: Any) -> bool:
    """A length setting that says something: not absent, null, empty or 0."""
    return value not in (None, "", 0) and value is not False


def length_from(values: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`values` (settings a run starts from: a form's defaults, a base or multi-task run's) with
    the run's length that `given` sets: when `given` names exactly one of max_steps and epochs, the
    other one of `values` is cleared (0), so that the two never both say how long it trains."""
    named = [k for k in LENGTH_FIELDS if _given(given.get(k))]
    if len(named) != 1:
        return values
    return {**values, next(k for k in LENGTH_FIELDS if k not in named): 0}


def check_length_fields(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict as given (YAML, the API, a form) with its length settings checked: both
    max_steps and epochs -> ConfigError; epochs alone -> max_steps 0 (to be resolved)."""
    if not _given(d.get("epochs")):
        return d
    if _given(d.get("max_steps")):
        raise ConfigError(BOTH_LENGTHS)
    return {**d, "max_steps": 0}


def resolve_epochs(config: Any, examples: int, per_step: int) -> Any:
    """The config a run trains with: with `epochs`, max_steps = steps_for_epochs (a pre-training
    run's warmup_steps must fit in them); without, the config as it is. The same data gives the
    same steps, so a resumed run resolves them again to the same count."""
    if not config.epochs:
        return config
    steps = epoch_steps(config.epochs, examples, per_step)
    warmup = config.warmup_steps
    if isinstance(config, RunConfig) and warmup > steps:
        raise ConfigError(f"warmup_steps ({warmup}) is more than the {steps:,} steps that {config.epochs:g} epochs "
                          f"take ({examples:,} training sequences, {per_step:,} a step); lower warmup_steps.")
    return config.replace(max_steps=steps)


def epoch_steps(epochs: float, examples: int, per_step: int, *, what: str = "training examples",
                at_least: bool = False) -> int:
    """steps_for_epochs, or ConfigError naming `epochs` when they are more steps than a run may
    have (not max_steps' bound, a field the user did not send). at_least: `examples` is a lower
    bound (a pre-training launch counts the train split's tokens, not yet its sequences)."""
    steps = steps_for_epochs(epochs, examples, per_step)
    most = settings_schema.MAX_STEPS
    if steps > most:
        raise ConfigError(f"epochs {float(epochs):g} would take {'at least ' if at_least else ''}{steps:,} steps "
                          f"({examples:,} {what}, {per_step:,} a step), more than the {most:,} a run may have; "
                          f"lower epochs.")
    return steps


def steps_for_epochs(epochs: float, examples: int, per_step: int) -> int:
    """Optimizer updates that make `epochs` passes over `examples` training examples, `per_step`
    of them an update (batch_size x grad_accum x devices): ceil(epochs x examples / per_step). The
    training streams run on across an epoch's end (its last batch is completed from the next
    epoch), so this is exactly that many passes, rounded up to a whole update."""
    if examples < 1:
        raise ConfigError("The train split has no examples, so it cannot be trained on for a number of epochs.")
    return max(1, math.ceil(float(epochs) * examples / max(1, per_step)))


class FlatRecord:
    """A flat settings record (a dataclass): a plain dict and YAML in and out, unknown fields
    refused with a sentence. RunConfig and trainer.finetune's FinetuneConfig are ones."""

    WHAT = "config"      # how messages name its fields ("Unknown config field: ...")
    RECORD = "run config"  # and the whole ("A run config must be a mapping ...")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists)."""
        d = dataclasses.asdict(self)  # type: ignore[call-overload]
        d["betas"] = list(self.betas)  # type: ignore[attr-defined]
        return d

    @classmethod
    def _upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        """A dict saved by an earlier version, in today's field names."""
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Build from a dict; missing keys take their defaults, unknown keys are refused."""
        if not isinstance(d, dict):
            raise ConfigError(f"A {cls.RECORD} must be a mapping of field names to values, not {type(d).__name__}.")
        d = cls._upgrade(d)
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise ConfigError(f"Unknown {cls.WHAT} field{'s' if len(unknown) > 1 else ''}: "
                              f"{', '.join(map(str, unknown))}.")
        return cls(**check_length_fields(d))

    @classmethod
    def from_yaml(cls, text: str) -> Any:
        try:
            data = load_yaml(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"The config is not valid YAML: {e}".replace("\n", " ")) from None
        return cls.from_dict(data if data is not None else {})

    def replace(self, **changes: Any) -> Any:
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass
class RunConfig(FlatRecord):
    """How to train one model. Each field's label, help, bounds and choices are declared in
    trainer.settings_schema (what the launch form and the API show)."""

    # --- what to train
    family: str = "bert"
    preset: str = "bert-tiny"
    model_overrides: dict[str, Any] = field(default_factory=dict)
    objectives: list[str] = field(default_factory=lambda: ["mlm", "nsp"])

    # --- objective details
    masking: str = "dynamic"
    mask_prob: float = 0.15
    masking_unit: str = ""
    packing: str = "full-sentences"

    # --- ELECTRA (the generator's width is the model field generator_size)
    rtd_weight: float = 50.0

    # --- DistilBERT
    teacher_checkpoint: str = ""
    distill_temperature: float = 2.0
    distill_soft_weight: float = 5.0
    distill_mlm_weight: float = 2.0
    distill_cos_weight: float = 1.0

    # --- XLNet
    plm_k: int = 6

    # --- TinyBERT (the teacher is teacher_checkpoint; the student's shape is its preset)
    tinybert_temperature: float = 1.0
    tinybert_prediction_share: float = 0.5

    # --- length and batches
    max_steps: int = 1000
    epochs: float = 0.0
    batch_size: int = 32
    seq_len: int = 128
    grad_accum: int = 1

    # --- optimizer and schedule
    optimizer: str = ""
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "linear"
    clip_grad: float = 1.0

    # --- bookkeeping
    eval_every: int = 100
    eval_batches: int = 20
    checkpoint_every: int = 500
    keep_last: int = 3  # checkpoints kept besides the best and the pinned (trainer.training.retention); 0 = all
    log_every: int = 10
    report_to: list[str] = field(default_factory=list)
    seed: int = 0

    # --- hardware
    device: str = "auto"
    precision: str = "auto"
    num_threads: int = 0
    data_workers: int = AUTO_WORKERS
    devices: int | str = 1
    strategy: str = "auto"
    compile: str = "auto"
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        self._coerce_types()
        from trainer import families  # lazy: the families read the model presets
        from trainer.catalog import validation

        if self.family in families.names():
            spec = families.get(self.family)
            if not self.masking_unit:
                self.masking_unit = spec.default_masking_unit
            if not self.optimizer:  # configs saved before the field existed read as AdamW (their families')
                self.optimizer = spec.optimizer_defaults.get("optimizer", "adamw")
        self._check_fields()
        validation.validate(self)

    # ----------------------------------------------------------------- validation
    def _coerce_types(self) -> None:
        """Accept what JSON and YAML produce (lists for tuples, "1e-4" strings, 3.0 for 3)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = _default_of(f)
            if f.name == "devices" and isinstance(value, str) and value.strip().lower() == ALL_DEVICES:
                self.devices = ALL_DEVICES
                continue
            if f.name == "compile" and isinstance(value, bool):  # configs from before "auto": true / false
                self.compile = "on" if value else "off"
                continue
            if f.name == "data_workers" and is_auto(value):
                self.data_workers = AUTO_WORKERS
                continue
            try:
                setattr(self, f.name, _coerce(value, default))
            except (TypeError, ValueError):
                kind = f"{_kind(default)} or \"{ALL_DEVICES}\"" if f.name == "devices" else _kind(default)
                raise ConfigError(f"{f.name} must be {kind}, not {value!r}.") from None

    def _check_fields(self) -> None:
        for name, bound in bounds().items():
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, not {value}.")
            if name == "seq_len" or (name == "devices" and value == ALL_DEVICES):
                continue  # seq_len: checked against the model's positions by the registry
            if name == "max_steps" and value == 0 and self.epochs:
                continue  # set from the epochs when the run starts (resolve_epochs)
            if not bound.admits(value):
                raise ConfigError(bound.refusal(name, value))
        if self.seq_len < MIN_SEQ_LEN:
            raise ConfigError(f"seq_len must be at least {MIN_SEQ_LEN} tokens, not {self.seq_len}.")
        for name, options in choices().items():
            if name in ("masking_unit", "optimizer") and not getattr(self, name):
                continue  # an unknown family: the registry says so
            if getattr(self, name) not in options:
                raise ConfigError(
                    f"{name} must be one of {', '.join(repr(o) for o in options)}, not {getattr(self, name)!r}."
                )
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"betas must be two numbers in [0, 1), like [0.9, 0.999], not {list(self.betas)}.")
        if not self.objectives:
            raise ConfigError("Choose at least one objective.")
        if len(set(self.objectives)) != len(self.objectives):
            raise ConfigError(f"objectives lists an objective twice: {self.objectives}.")
        if not all(isinstance(o, str) for o in self.objectives):
            raise ConfigError(f"objectives must be names like \"mlm\", not {self.objectives!r}.")
        if not all(isinstance(k, str) for k in self.model_overrides):
            raise ConfigError("model_overrides must map field names to values.")
        if self.max_steps and self.warmup_steps > self.max_steps:  # with epochs: checked by resolve_epochs
            raise ConfigError(
                f"warmup_steps ({self.warmup_steps}) must not be larger than max_steps ({self.max_steps})."
            )
        if self.precision == "bf16" and self.device == "cpu":
            raise ConfigError("bf16 precision needs a CUDA GPU; use precision \"auto\" or \"fp32\" on the CPU.")
        if not (self.distill_soft_weight or self.distill_mlm_weight or self.distill_cos_weight):
            raise ConfigError("The three distillation loss weights cannot all be 0: the student would learn nothing.")
        self.report_to = trackers.check(self.report_to)  # the trackers' packages are looked for, not imported

    # ----------------------------------------------------------------- (de)serialisation
    @classmethod
    def _upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        if "architecture" in d:  # configs saved before the field was named family
            d = dict(d)
            old = d.pop("architecture")
            if d.setdefault("family", old) != old:
                raise ConfigError(f"The config names two families: architecture {old!r} and family {d['family']!r}; "
                                  "keep family.")
        return d

    def to_yaml(self) -> str:
        """The flat record, its keys under a comment per setting group (any flat YAML reads back)."""
        d = self.to_dict()
        parts = []
        for name, cls in GROUPS.items():
            keys = [f.name for f in dataclasses.fields(cls)]
            parts.append(f"# {name}: {cls.__doc__.strip()}\n" + yaml.safe_dump({k: d[k] for k in keys}, sort_keys=False))
        return "\n".join(parts)

    # ----------------------------------------------------------------- setting groups
    def group(self, cls: type) -> Any:
        """One setting group (ModelArgs, OptimArgs, ...) of this config."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(cls)}
        for name in ("objectives", "report_to"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    @property
    def model(self) -> ModelArgs:
        return self.group(ModelArgs)

    @property
    def objective(self) -> ObjectiveArgs:
        return self.group(ObjectiveArgs)

    @property
    def train(self) -> TrainArgs:
        return self.group(TrainArgs)

    @property
    def optim(self) -> OptimArgs:
        return self.group(OptimArgs)

    @property
    def eval(self) -> EvalArgs:
        return self.group(EvalArgs)

    @property
    def runtime(self) -> RuntimeArgs:
        return self.group(RuntimeArgs)

    # ----------------------------------------------------------------- derived
    @property
    def distill_weights(self) -> dict[str, float]:
        """DistilBERT's loss weights by metric name: soft targets, MLM, cosine."""
        return {"soft_loss": self.distill_soft_weight, "mlm_loss": self.distill_mlm_weight,
                "cos_loss": self.distill_cos_weight}

    @property
    def tokens_per_step(self) -> int:
        """Upper bound on tokens per update on one device (padding included)."""
        return self.batch_size * self.grad_accum * self.seq_len

    def effective_batch(self, world_size: int | None = None) -> int:
        """Sequences per update: batch_size x grad_accum x the number of processes (world_size,
        default: `devices` when it is a number)."""
        if world_size is None:
            world_size = self.devices if isinstance(self.devices, int) else 1
        return self.batch_size * self.grad_accum * world_size


# --------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=1)
def bounds() -> dict[str, Bounds]:
    """The bounds of every numeric field: the schema's (trainer.settings_schema, pre-training's)
    and each objective's own settings (trainer.objectives: Objective.settings), read lazily."""
    from trainer import objectives

    own = {name: Bounds(lo, hi) for o in objectives.all() for name, (lo, hi) in o.settings.items()}
    return {**settings_schema.bounds(PRETRAIN), **own}


def choices() -> dict[str, tuple[str, ...]]:
    """{field: its allowed values} for every text field with a fixed set of values: the schema's,
    the masking units and packings read from the data layer."""
    import importlib

    out = settings_schema.choices(PRETRAIN)
    for name, (module, table) in _LAZY_CHOICES.items():
        out[name] = tuple(getattr(importlib.import_module(module), table))
    return out


def field_defaults() -> dict[str, Any]:
    """{field name: default value}, JSON-able."""
    out = {}
    for f in dataclasses.fields(RunConfig):
        v = _default_of(f)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def is_auto(value: Any) -> bool:
    """Whether a data_workers value is the word "auto" (what AUTO_WORKERS reads as in YAML and forms)."""
    return isinstance(value, str) and value.strip().lower() == "auto"


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA GPU is usable, else 'cpu'. Call at run time, not import time."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device is \"cuda\" but no CUDA GPU is available here; use \"auto\" or \"cpu\".")
    return device


def resolve_devices(devices: int | str, device: str) -> int:
    """How many processes to start on this machine: "all" -> every CUDA GPU (1 without one);
    a number is checked against the GPUs there are when the run trains on CUDA. (On the CPU
    any number runs: that many processes over gloo.)"""
    import torch

    device = resolve_device(device)
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    if devices == ALL_DEVICES:
        return max(gpus, 1)
    if device == "cuda" and int(devices) > gpus:
        raise ConfigError(f"devices is {devices} but this machine has {gpus} CUDA GPU{'s' if gpus != 1 else ''}; "
                          f"ask for at most {gpus}, or \"all\".")
    return int(devices)


def resolve_precision(precision: str, device: str) -> str:
    """'auto' -> 'bf16' on CUDA (when supported), else 'fp32'."""
    if precision == "auto":
        if device == "cuda":
            import torch

            return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        return "fp32"
    if precision == "bf16" and device != "cuda":
        raise ConfigError("bf16 precision needs a CUDA GPU; use precision \"auto\" or \"fp32\" on the CPU.")
    return precision


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _coerce(value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError
        return value
    if isinstance(default, int):
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):
            value = float(value.strip())
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError
            return int(value)
        if not isinstance(value, int):
            raise TypeError
        return value
    if isinstance(default, float):
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str):  # YAML reads 1e-4 (no dot) as a string
            return float(value.strip())
        if not isinstance(value, (int, float)):
            raise TypeError
        return float(value)
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return tuple(_coerce(v, d) for v, d in zip(value, default)) + tuple(value[len(default):])
    if isinstance(default, list):
        if isinstance(value, str):  # "mlm,nsp" or "mlm"
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return list(value)
    if isinstance(default, dict):
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise TypeError
        return dict(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise TypeError
        return value.strip()
    return value


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "a whole number"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, tuple):
        return f"a list of {len(default)} numbers"
    if isinstance(default, list):
        return "a list"
    if isinstance(default, dict):
        return "a mapping"
    return "a text value"
