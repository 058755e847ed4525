"""The fine-tuning settings a person chooses, each described once: its label, one line of help,
whether it sits in the form's "advanced" fold, and what it applies to (the families, the
technique, the task). Bounds come from trainer.finetune.config (BOUNDS, TECHNIQUE_LIMITS) and
defaults from FinetuneConfig, so a setting is never described twice.

Where a setting is declared:
- one every task takes (max_steps, lr, seed, ...): COMMON below;
- one of a technique (LoRA, adapters): that Technique's `settings`, in TECHNIQUES below;
- one of a task (QA's doc_stride, T5's source_prefix, SFT's chat_template): the Task's own
  `settings` (trainer.finetune.tasks.Task), in the task's module.
A new setting is its FinetuneConfig field (with its bound in BOUNDS when it is a number) and one
Setting line in one of those places; trainer.catalog.finetune serves it to the web app's form
and API, which are generated from that schema.

No torch and no Django: the catalog reads this to build the form.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from trainer import trackers


@dataclass(frozen=True)
class Setting:
    """One FinetuneConfig field as the form and the API offer it."""

    name: str                     # the FinetuneConfig field
    label: str                    # what the form calls it ("Learning rate", not "Lr")
    help: str                     # one line: what it does, and its usual values
    advanced: bool = False        # in the "advanced" fold
    section: str = "training"     # the form's card: "training", "techniques", "task", "multitask"
    families: tuple[str, ...] = ()  # the checkpoint families it applies to; () = every family
    task_flag: str = ""           # a Task attribute that must be true for it to apply ("" = any task)
    choices: tuple[tuple[str, str], ...] = ()  # (value, label) when it is a choice
    textarea: bool = False        # a long text (a chat template)
    keep_if_empty: bool = False   # an empty text keeps the default the form showed
    multiple: bool = False        # a list of choices (check boxes), none ticked by default

    def applies_to(self, family: str, task: Any = None) -> bool:
        if self.families and family not in self.families:
            return False
        return not self.task_flag or bool(task is not None and getattr(task, self.task_flag, False))

    def as_json(self) -> dict[str, Any]:
        from trainer.finetune.config import FinetuneConfig

        field = FinetuneConfig.__dataclass_fields__[self.name]
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default  # a list: []
        out: dict[str, Any] = {"name": self.name, "label": self.label, "help": self.help, "advanced": self.advanced,
                               "section": self.section, "families": list(self.families), "type": _type(default),
                               "default": default}
        out.update(bounds(self.name))
        if self.choices:
            out["choices"] = [list(c) for c in self.choices]
        if self.textarea:
            out["textarea"] = True
        if self.keep_if_empty:
            out["keep_if_empty"] = True
        if self.multiple:
            out["multiple"] = True
        return out


@dataclass(frozen=True)
class Technique:
    """A way to fine-tune: every weight (full), or a few added ones (LoRA, adapters). Choosing it
    shows its settings; `switch` is the FinetuneConfig field that turns it on, given `on` when the
    technique is chosen and its field was left at the default (0: off)."""

    name: str
    label: str
    help: str
    settings: tuple[Setting, ...] = ()
    switch: str = ""
    on: Any = None
    families: tuple[str, ...] = ()  # () = every family

    def chosen_in(self, values: dict[str, Any]) -> bool:
        """Whether settings `values` (a posted form, a stored config) turn this technique on."""
        if not self.switch:
            return False
        try:
            return float(values.get(self.switch) or 0) > 0
        except (TypeError, ValueError):
            return False

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "help": self.help, "switch": self.switch, "on": self.on,
                "families": list(self.families), "settings": [s.name for s in self.settings]}


def _type(default: Any) -> str:
    if isinstance(default, list):
        return "list"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "float"
    return "text"


def bounds(name: str) -> dict[str, Any]:
    """{"min", "max"} of a numeric setting, as FinetuneConfig checks them ({} for a text or a choice).
    llrd's lower bound is open (above 0): "min_exclusive"."""
    from trainer.finetune.config import BOUNDS, TECHNIQUE_LIMITS

    if name == "llrd":
        return {"min": 0.0, "max": 1.0, "min_exclusive": True}
    if name in BOUNDS:
        lo, hi = BOUNDS[name]
        return {"min": lo, "max": hi}
    if name in TECHNIQUE_LIMITS:
        return {"min": 0, "max": TECHNIQUE_LIMITS[name]}
    return {}


DEVICES = (("auto", "Auto"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))
TRACKER_CHOICES = tuple(trackers.LABELS.items())  # report_to's experiment trackers (trainer.trackers)

COMMON: tuple[Setting, ...] = (
    Setting("max_steps", "Training steps", "Optimizer updates in all (or give epochs instead)."),
    Setting("epochs", "Epochs", "Passes over the train split instead of steps: ceil(epochs × train examples / "
            "batch size) steps (0 or empty: train for the steps)."),
    Setting("batch_size", "Batch size", "Examples per update."),
    Setting("lr", "Learning rate", "Peak learning rate of AdamW (BERT's recipes: 2e-5 to 5e-5)."),
    Setting("device", "Device", "CUDA GPU runs on the gpu queue (a worker with a GPU), CPU on the cpu queue; Auto on "
            "the default queue, on a GPU when its worker has one.", choices=DEVICES),
    Setting("max_length", "Maximum length (tokens)", "Tokens per example; longer inputs are cut (dynamic padding "
            "per batch).", advanced=True),
    Setting("warmup_ratio", "Warm-up share", "Share of the training steps over which the learning rate climbs from "
            "0, then decays linearly.", advanced=True),
    Setting("eval_every", "Validate every (steps)", "Steps between validation passes (the task's metrics are "
            "computed there).", advanced=True),
    Setting("seed", "Random seed", "Seeds the data order, the new head's initial weights and dropout: the same seed "
            "and settings train the same run again.", advanced=True),
    Setting("num_threads", "CPU threads", "CPU threads the run's PyTorch uses (0: PyTorch's default, one per core).",
            advanced=True),
    Setting("data_workers", "Batch-building processes", "Processes that build the training batches beside the run "
            "(-1: auto; 0: none). The batches are the same whatever the number.", advanced=True),
    Setting("report_to", "Mirror the metrics to", "Experiment trackers that also get every metric, the settings and "
            "the test report, written into the run's folder (no server, no network); the run's page then says where. "
            "Each needs its package installed where the run trains.", advanced=True, choices=TRACKER_CHOICES,
            multiple=True),
    Setting("group_by_length", "Group examples by length", "Batch training examples of similar length together "
            "(each epoch still shuffled), so that little of each batch is padding.", advanced=True),
    Setting("llrd", "Layer-wise learning-rate decay", "The head trains at the learning rate, each layer below at the "
            "one above's times this factor. 1 turns it off; 0.8 to 0.95 is usual.", advanced=True,
            section="techniques"),
    Setting("freeze_embeddings", "Freeze the embeddings", "Keep the embeddings exactly as pre-trained.",
            advanced=True, section="techniques"),
    Setting("freeze_layers", "Frozen bottom layers", "Freeze the bottom k encoder layers (0: none).", advanced=True,
            section="techniques"),
    Setting("gradual_unfreeze_every", "Gradual unfreezing (steps)", "ULMFiT: train the head alone, then unfreeze "
            "one more layer group from the top every n steps (0: off).", advanced=True, section="techniques"),
    Setting("early_stopping_patience", "Early-stopping patience", "Stop after this many validations without a "
            "better primary metric; the best checkpoint is restored before the test split (0: off).",
            advanced=True, section="techniques"),
    Setting("class_weights", "Class weights", "Balanced: weigh each class's loss by how rare it is in the train "
            "split.", advanced=True, section="techniques", task_flag="balances_classes",
            choices=(("none", "none"), ("balanced", "balanced"))),
)

FULL = Technique("full", "Full fine-tuning", "Every weight of the model trains, with the new head.")
LORA = Technique(
    "lora", "LoRA", "Low-rank adapters on the chosen projections; only they and the head train. Checkpoints hold the "
    "merged weights.", switch="lora_r", on=8, settings=(
        Setting("lora_r", "LoRA rank r", "The adapters' size (1 to 64 is usual).", section="techniques"),
        Setting("lora_alpha", "LoRA alpha", "The update is scaled by alpha / r.", section="techniques"),
        Setting("lora_dropout", "LoRA dropout", "Dropout on the adapters' input.", advanced=True,
                section="techniques"),
        Setting("lora_targets", "LoRA targets", "The projections LoRA adapts, comma-separated: query, key, value, "
                "output, ffn_up, ffn_down.", section="techniques", keep_if_empty=True),
    ))
ADAPTERS = Technique(
    "adapters", "Bottleneck adapters", "A small down-ReLU-up layer after every attention and feed-forward layer "
    "(Houlsby et al. 2019); only they, the layer norms and the head train. Checkpoints keep them, so they have no "
    "Hugging Face export.", switch="adapter_size", on=64, settings=(
        Setting("adapter_size", "Adapter size", "The adapters' bottleneck size d (the T5 study tried 32 to 2048).",
                section="techniques"),
    ))
TECHNIQUES: tuple[Technique, ...] = (FULL, LORA, ADAPTERS)

# T5 multi-task mixing (trainer/finetune/mixing.py): offered beside a checkpoint that trains text to text.
MIXING_CHOICES = (("proportional", "examples-proportional (cap K)"), ("temperature", "temperature-scaled (T)"),
                  ("equal", "equal"))
MULTITASK: tuple[Setting, ...] = (
    Setting("task_name", "Main task's name", "The main dataset's task in the metric names (exact_match/<task>); "
            "empty: from its prefix.", section="multitask", advanced=True),
    Setting("mixing", "Mixing", "How often each task's examples are drawn: in proportion to its size (capped at K), "
            "those rates to the power 1/T renormalised, or equally.", section="multitask", choices=MIXING_CHOICES,
            keep_if_empty=True),
    Setting("mixing_limit", "Size cap K", "The most examples a task counts as in proportional and temperature "
            "mixing (0: no limit).", section="multitask", advanced=True),
    Setting("mixing_temperature", "Temperature T", "T of temperature mixing (1: proportional; large: nearly equal; "
            "2 in the T5 study).", section="multitask", advanced=True),
)


def technique(name: str) -> Technique:
    from trainer.errors import ConfigError

    for t in TECHNIQUES:
        if t.name == name:
            return t
    raise ConfigError(f"technique must be one of {', '.join(t.name for t in TECHNIQUES)}, not {name!r}.")


def technique_of(values: dict[str, Any]) -> str:
    """The technique that settings `values` turn on (a posted form without a technique, a stored
    config): the first whose switch is above 0, else full fine-tuning."""
    return next((t.name for t in TECHNIQUES if t.chosen_in(values)), FULL.name)


def every_setting() -> list[Setting]:
    """Every setting any task, technique or mix offers, each name once (COMMON's first); the
    registered tasks' own are read from trainer.finetune (its registry and variants)."""
    from trainer import finetune

    seen: dict[str, Setting] = {}
    for s in (*COMMON, *(s for t in TECHNIQUES for s in t.settings), *MULTITASK,
              *(s for task in finetune.every_task() for s in task.settings)):
        seen.setdefault(s.name, s)
    return list(seen.values())


def applicable(family: str, task: Any = None, technique_name: str = "full", *, mixes: bool = False) -> list[Setting]:
    """The settings that apply to a `family` checkpoint fine-tuned for `task` (the Task for that
    family, trainer.finetune.for_family; None: not chosen yet) with technique `technique_name`;
    `mixes`: the multi-task settings too (a checkpoint that trains text to text)."""
    chosen = technique(technique_name)
    out = [s for s in COMMON if s.applies_to(family, task)]
    if not chosen.families or family in chosen.families:
        out += [s for s in chosen.settings if s.applies_to(family, task)]
    if task is not None:
        out += [s for s in task.settings if s.applies_to(family, task)]
    if mixes:
        out += [s for s in MULTITASK if s.applies_to(family, task)]
    names: dict[str, Setting] = {}
    for s in out:
        names.setdefault(s.name, s)
    return list(names.values())


def names(settings: Sequence[Setting]) -> list[str]:
    return [s.name for s in settings]
