"""Fine-tuning: a checkpoint, a labelled dataset (trainer.prep.labelled) and a task.

    from trainer import finetune
    finetune.get("classification")      # the Task (trainer.finetune.tasks)
    finetune.names()                    # the registered tasks, in the form's order

`trainer.finetune.engine.finetune(config, out_dir=..., sink=...)` trains; `metrics` scores.
Importing this package imports no torch (the task modules load on first use).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from trainer.finetune.tasks import Task

# task name -> "module:ATTRIBUTE" of its Task, one line each.
REGISTRY: dict[str, str] = {
    "classification": "trainer.finetune.tasks:CLASSIFICATION",
    "regression": "trainer.finetune.tasks:REGRESSION",
    "multilabel": "trainer.finetune.tasks:MULTILABEL",
    "token_classification": "trainer.finetune.tasks:TOKEN_CLASSIFICATION",
    "extractive_qa": "trainer.finetune.qa:EXTRACTIVE_QA",
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> "Task":
    try:
        module, _, attr = REGISTRY[name].partition(":")
    except KeyError:
        raise ConfigError(f"Fine-tuning does not offer the task {name!r} yet; choose one of "
                          f"{', '.join(REGISTRY)}.") from None
    return getattr(importlib.import_module(module), attr)
