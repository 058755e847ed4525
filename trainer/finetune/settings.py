"""The fine-tuning settings a person chooses, and where each applies: the fine-tuning kind of
trainer.settings_schema (label, help, bounds, the "advanced" fold, the form's card, the families,
the technique), the techniques that show some of them, and the tasks' own.

Where a setting is declared:
- one every task takes (max_steps, lr, seed, ...), a technique's (LoRA, adapters: `technique=`)
  or multi-task mixing's (section "multitask"): trainer/settings_schema.py, beside pre-training's
  (a setting both take is declared once there);
- one of a task (QA's doc_stride, T5's source_prefix, SFT's chat_template): the Task's own
  `settings` (trainer.finetune.tasks.Task), in the task's module, its bound in the schema's
  TASK_BOUNDS.
A new setting is its FinetuneConfig field and one Setting in one of those places;
trainer.catalog.finetune serves it to the web app's form and API, which are generated from that
schema (webapp/runs/fields.py).

No torch and no Django: the catalog reads this to build the form.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from trainer import settings_schema
from trainer.settings_schema import FINETUNE, Setting

def setting_json(setting: Setting) -> dict[str, Any]:
    """A fine-tuning setting's entry in the catalog (Setting.as_json): FinetuneConfig's default,
    the bounds it checks."""
    from trainer.finetune.config import FinetuneConfig

    field = FinetuneConfig.__dataclass_fields__[setting.name]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default  # a list: []
    return setting.as_json(default, settings_schema.bounds(FINETUNE).get(setting.name))


@dataclass(frozen=True)
class Technique:
    """A way to fine-tune: every weight (full), or a few added ones (LoRA, adapters). Choosing it
    shows its settings; `switch` is the FinetuneConfig field that turns it on, given `on` when the
    technique is chosen and its field was left at the default (0: off)."""

    name: str
    label: str
    help: str
    switch: str = ""
    on: Any = None
    families: tuple[str, ...] = ()  # () = every family

    @property
    def settings(self) -> tuple[Setting, ...]:
        """Its settings: the schema's whose `technique` is this one."""
        return tuple(s for s in settings_schema.offered(FINETUNE) if s.technique == self.name)

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


# Every task's settings (the training card, the techniques card), and multi-task mixing's.
COMMON: tuple[Setting, ...] = tuple(s for s in settings_schema.offered(FINETUNE)
                                    if not s.technique and s.section != "multitask")
MULTITASK: tuple[Setting, ...] = tuple(s for s in settings_schema.offered(FINETUNE) if s.section == "multitask")

FULL = Technique("full", "Full fine-tuning", "Every weight of the model trains, with the new head.")
LORA = Technique(
    "lora", "LoRA", "Low-rank adapters on the chosen projections; only they and the head train. Checkpoints hold the "
    "merged weights.", switch="lora_r", on=8)
ADAPTERS = Technique(
    "adapters", "Bottleneck adapters", "A small down-ReLU-up layer after every attention and feed-forward layer "
    "(Houlsby et al. 2019); only they, the layer norms and the head train. Checkpoints keep them, so they have no "
    "Hugging Face export.", switch="adapter_size", on=64)
TECHNIQUES: tuple[Technique, ...] = (FULL, LORA, ADAPTERS)


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
