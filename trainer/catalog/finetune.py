"""The fine-tuning form's schema, as trainer.catalog.schema is the launch form's: every
registered task (trainer.finetune) with what it says of itself, every technique, every setting
(trainer.settings_schema through trainer.finetune.settings: label, help, bounds, default, where
it applies), and, per family, the tasks it fine-tunes and the settings each task shows. The web app builds the fine-tuning
form and the API's validation from `as_json()`, and picks a form's fields with `fields_for`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer import families

if TYPE_CHECKING:
    from trainer.finetune.settings import Setting

# trainer.finetune is read inside each function: its engine trains through trainer.training, which
# validates against this catalog (the cycle pyproject.toml's import contract lists).


def as_json() -> dict[str, Any]:
    """Tasks, techniques, every setting, and per family its tasks (with each one's settings)."""
    from trainer import finetune
    from trainer.finetune import settings as ft_settings

    every = ft_settings.every_setting()
    return {
        "tasks": {name: task_json(name) for name in finetune.names()},
        "techniques": [t.as_json() for t in ft_settings.TECHNIQUES],
        "settings": {s.name: ft_settings.setting_json(s) for s in every},
        "families": {f.name: family_json(f.name) for f in families.all()},
    }


def task_json(name: str) -> dict[str, Any]:
    """One task as the form and the API describe it."""
    from trainer import finetune

    task = finetune.get(name)
    spec = task.dataset_spec
    return {"name": name, "label": task.label, "title": spec.title if spec is not None else name.replace("_", " "),
            "generates": task.generates, "explorer_action": task.explorer_action,
            "metrics": [m.name for m in task.scores().metrics], "primary": task.scores().primary}


def family_json(family: str) -> dict[str, Any]:
    """What a `family` checkpoint fine-tunes on: its tasks, with the settings each shows there
    (technique settings aside), and whether it mixes tasks (multi-task: it trains text to text)."""
    from trainer import finetune
    from trainer.finetune import settings as ft_settings

    variants = {name: finetune.for_family(name, family) for name in finetune.tasks_for_family(family)}
    return {"tasks": {name: [s.name for s in task.settings if s.applies_to(family, task)]
                      for name, task in variants.items()},
            "mixes": finetune.mixes(family),
            "techniques": [t.name for t in ft_settings.TECHNIQUES if not t.families or family in t.families]}


def fields_for(family: str, task: str = "", technique: str = "full") -> list["Setting"]:
    """The settings the form shows for a `family` checkpoint ("" or unknown: not chosen yet, the
    common ones) fine-tuned for the dataset task `task` ("": not chosen yet) with `technique`."""
    from trainer import finetune
    from trainer.finetune import settings as ft_settings

    known = family in families.names()
    chosen = finetune.for_family(task, family) if known and task in finetune.REGISTRY and \
        not finetune.refusal(family, task) else None
    return ft_settings.applicable(family if known else "", chosen, technique, mixes=known and finetune.mixes(family))
