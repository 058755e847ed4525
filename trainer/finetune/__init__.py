"""Fine-tuning: a checkpoint, a labelled dataset (trainer.prep.labelled) and a task.

    from trainer import finetune
    finetune.get("classification")      # the Task (trainer.finetune.tasks)
    finetune.names()                    # the registered tasks, in the form's order

`trainer.finetune.engine.finetune(config, out_dir=..., sink=...)` trains; `metrics` scores.
Importing this package imports no torch (the task modules load on first use).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Sequence

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from trainer.finetune.metrics import TaskMetrics
    from trainer.finetune.tasks import Task

# task name -> "module:ATTRIBUTE" of its Task, one line each.
REGISTRY: dict[str, str] = {
    "classification": "trainer.finetune.tasks:CLASSIFICATION",
    "regression": "trainer.finetune.tasks:REGRESSION",
    "multilabel": "trainer.finetune.tasks:MULTILABEL",
    "token_classification": "trainer.finetune.tasks:TOKEN_CLASSIFICATION",
    "extractive_qa": "trainer.finetune.qa:EXTRACTIVE_QA",
    "text_to_text": "trainer.finetune.text2text:TEXT_TO_TEXT",
    "sft": "trainer.finetune.sft:SFT",
    "multiple_choice": "trainer.finetune.gpt1:GPT_MULTIPLE_CHOICE",  # GPT only: GPT-1's one pass per choice
}


# (dataset task, model family) -> "module:ATTRIBUTE" of the Task that trains that family on that
# task when the registry's own (an encoder's head) does not: GPT-1's classifier on GPT, ELMo's
# features (a frozen biLM, a scalar mix, a small task model) on ELMo, T5 writing the label (or
# the score) as text.
VARIANTS: dict[tuple[str, str], str] = {
    ("classification", "t5"): "trainer.finetune.text_classify:T5_CLASSIFICATION",
    ("regression", "t5"): "trainer.finetune.text_classify:T5_REGRESSION",
    ("classification", "gpt"): "trainer.finetune.gpt1:GPT_CLASSIFICATION",
    ("regression", "gpt"): "trainer.finetune.gpt1:GPT_REGRESSION",
    ("classification", "elmo"): "trainer.finetune.elmo_features:ELMO_CLASSIFICATION",
    ("token_classification", "elmo"): "trainer.finetune.elmo_features:ELMO_TOKEN_CLASSIFICATION",
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


def for_family(name: str, family: str) -> "Task":
    """The Task that trains a `family` model on task `name`: its variant for that family, else the
    registry's own."""
    where = VARIANTS.get((name, family))
    if where is None:
        return get(name)
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr)


def every_task() -> list["Task"]:
    """Every registered Task and every family variant of one (VARIANTS), registry order first."""
    out = [get(name) for name in REGISTRY]
    for (name, family) in VARIANTS:
        out.append(for_family(name, family))
    return out


def metrics_for(name: str, *, dataset="") -> "TaskMetrics":
    """The task's trainer.finetune.metrics.TaskMetrics on the stored dataset `dataset` (Task.scores:
    extractive QA on a dataset with unanswerable questions is scored as SQuAD 2.0, as the engine does)."""
    return get(name).scores(dataset)


def charts_for(name: str, *, dataset="", mix_tasks: Sequence[str] = ()) -> list[dict]:
    """The dashboard's charts for a fine-tuning run of task `name` on the stored dataset `dataset`:
    the common series plus the task's metrics, drawn on FINETUNE_CHARTS and the task's own charts
    (trainer.charts.charts_for); [] of the task's own for an unknown task name (an older version's
    run still opens). mix_tasks: a multi-task run's task names
    (trainer.finetune.config.mix_task_names), each charted apart with their mean."""
    from trainer import charts
    from trainer.finetune.metrics import FINETUNE_CHARTS, mix_series

    own = metrics_for(name, dataset=dataset).metrics if name in REGISTRY else ()
    specs = (*FINETUNE_CHARTS, *get(name).charts) if name in REGISTRY else FINETUNE_CHARTS
    return charts.charts_for([*own, *mix_series(mix_tasks)], specs)


def stats_for(name: str, *, dataset="") -> list[dict]:
    """The numbers above the charts for a fine-tuning run of task `name` (trainer.charts.stats_for)."""
    from trainer import charts

    task = metrics_for(name, dataset=dataset) if name in REGISTRY else None
    # Only what the run records: a classifier's dashboard has no perplexity to show.
    recorded = {m.name for m in (*charts.COMMON_METRICS, *(task.metrics if task else ()))}
    return charts.stats_for(task.stats if task else (), recorded)


def generates(name: str) -> bool:
    """Whether a run of task `name` writes text at validation (its page shows the samples)."""
    return name in REGISTRY and get(name).generates


def chats(name: str) -> bool:
    """Whether checkpoints fine-tuned for task `name` learnt a chat template (Task.chats; False for an unknown name)."""
    return name in REGISTRY and get(name).chats


def explorer_action(name: str) -> str:
    """The explorer's tool for checkpoints fine-tuned for task `name` ("" for none, or an unknown name)."""
    return get(name).explorer_action if name in REGISTRY else ""


def has_unanswerable(dataset) -> bool:
    """Whether a stored dataset (trainer.prep.labelled) has a question without an answer in any
    split: its extractive QA run is scored, and charted, as SQuAD 2.0. No torch."""
    from pathlib import Path

    from trainer.errors import DatasetError
    from trainer.prep.labelled import read_meta

    if not dataset:
        return False
    try:
        counts = read_meta(Path(dataset)).get("unanswerable") or {}
    except DatasetError:
        return False
    return any(int(n) > 0 for n in counts.values())


def checkpoint_family(folder) -> str:
    """The model family of the checkpoint in `folder`; a ConfigError with a sentence when its files
    cannot be read."""
    from models_lib.checkpoint import read_model_config

    try:
        return str(read_model_config(folder).get("family", ""))
    except ValueError:
        raise ConfigError("That checkpoint's files cannot be read, so it cannot be fine-tuned.") from None


def check_memory(config: Any, *, memory: int | None = None, memory_of: str = "this machine has free",
                 processes: int = 1, activations: bool = True) -> None:
    """The one size check (trainer.catalog.size) for a fine-tuning run: the checkpoint's weights,
    gradients and optimizer state plus (`activations`: a CPU run's, which share that memory) the
    activations of batch_size x max_length, against `memory` (None: this machine's free memory
    now). ConfigError naming the fields otherwise."""
    from models_lib.checkpoint import FAMILIES, read_model_config
    from trainer.catalog.size import batch_of, check_model_size

    try:
        meta = read_model_config(config.checkpoint)
        model_cfg = FAMILIES[meta["family"]].config_cls.from_dict({"family": meta["family"], **meta["config"]})
    except (ValueError, TypeError, KeyError):
        return  # an unreadable checkpoint: loading it (or check_checkpoint, at launch) says why
    check_model_size(model_cfg, training=True, fields={}, where="This fine-tuning run", memory=memory,
                     memory_of=memory_of, batch=batch_of(config, processes=processes) if activations else None)


def refusal(family: str, name: str) -> str:
    """Why task `name` does not fine-tune a `family` checkpoint, as a sentence; "" when it does (an
    encoder with a task head, a family a generative task names, or a VARIANTS entry)."""
    from models_lib.families.downstream import encoder_families
    from trainer import families

    task = get(name)
    if (name, family) in VARIANTS:
        return ""
    label = families.get(family).label if family in families.names() else family or "unknown"
    what = task.label.split(" (")[0].lower()
    if task.families:
        if family in task.families:
            return ""
        fits = " or ".join(families.get(f).label if f in families.names() else f for f in task.families)
        return (f"A {label} checkpoint cannot be fine-tuned for {what}: that task trains a {fits} model. Choose a "
                f"checkpoint of one of those.")
    if family in encoder_families():
        return ""
    encoders = ", ".join(families.get(f).label if f in families.names() else f for f in encoder_families())
    return (f"A {label} checkpoint cannot be fine-tuned for {what}: the task heads sit on an encoder ({encoders}). "
            f"Choose a checkpoint of one of those.")


def mixes(family: str) -> bool:
    """Whether a `family` checkpoint takes more datasets in one run: the task a multi-task run trains
    (trainer.finetune.config.MIX_TASK, text to text) is registered and fine-tunes it."""
    from trainer.finetune.config import MIX_TASK

    return MIX_TASK in REGISTRY and not refusal(family, MIX_TASK)


def tasks_for_family(family: str) -> list[str]:
    """The dataset tasks a `family` checkpoint fine-tunes on, in the registry's order (what the
    fine-tuning form offers beside a checkpoint of that family)."""
    return [name for name in REGISTRY if not refusal(family, name)]


def check_checkpoint(folder, name: str) -> str:
    """The family of the checkpoint in `folder` when task `name` fine-tunes it (an encoder with a
    task head, or the families a generative task names); else a ConfigError with a sentence."""
    get(name)  # an unknown task is refused before the checkpoint is read
    family = checkpoint_family(folder)
    why = refusal(family, name)
    if why:
        raise ConfigError(why)
    return family
