"""The web's launch commands for runs: plan, create, cancel, resume, clone, fine-tune.

Views and the API call these; each takes keyword arguments only. Reads (selectors) never write.
A worker's side of a run is webapp.runs.execution, crashed runs are found by webapp.runs.reaper,
and the task's way into the queue is webapp.runs.queueing.
User-caused problems raise trainer.errors.UserError subclasses with a sentence to show.
"""
from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any, Sequence

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from trainer import families
from trainer.catalog import validation
from trainer import objectives
from trainer.config import RunConfig, epoch_steps, length_from
from trainer.finetune.config import MIX_TASK  # the task a multi-task run trains
from trainer.errors import ConfigError, UserError
from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus
from webapp.runs import capacity
from webapp.runs.queueing import ended_on_commit, enqueue, publish_on_commit
from webapp.runs.reaper import mark_stale_runs
from webapp.runs.models import Checkpoint, LogLine, Run, RunKind, RunStatus
from webapp.server.storage import check_free_space

log = logging.getLogger(__name__)

CHOICE_FIELDS = ("family", "preset", "objectives")
RESUMABLE_STATES = (RunStatus.CANCELLED, RunStatus.CRASHED, RunStatus.FAILED)


class RunStateError(UserError):
    """The run is not in a state that allows this action."""


# -- configuration ---------------------------------------------------------------------------

def build_config(*, family: str, preset: str, objectives, training: dict | None = None,
                 owner=None) -> RunConfig:
    """A validated RunConfig from the launch choices plus training settings (RunConfig defaults fill the rest).

    With `owner`, a teacher (DistilBERT's) given as one of the owner's checkpoints (its id, or
    its folder as an exported YAML holds it) becomes that checkpoint's folder, and the student's
    shape (half the teacher's layers, its width) is set in model_overrides."""
    training = dict(training or {})
    for key in CHOICE_FIELDS:
        training.pop(key, None)
    if owner is not None and training.get("teacher_checkpoint"):
        teacher = resolve_teacher(owner=owner, value=training["teacher_checkpoint"])
        training["teacher_checkpoint"] = str(teacher.folder)
        if family in families.names() and families.get(family).needs_teacher:
            user = dict(training.get("model_overrides") or {})
            training["model_overrides"] = {**user, **student_shape(teacher, preset, user,
                                                                   family=family)}
    # A RunConfig validates itself as it is made (trainer.catalog.validation.validate): once.
    return RunConfig.from_dict({**training, "family": family, "preset": preset, "objectives": list(objectives or [])})


def resolve_teacher(*, owner, value) -> Checkpoint:
    """One of the owner's checkpoints, from its id or its folder; ConfigError for anything else
    (a folder of someone else's, or not a checkpoint at all)."""
    text = str(value).strip()
    found = None
    try:
        found = Checkpoint.objects.filter(owner=owner, pk=uuid.UUID(text)).first()
    except ValueError:
        root = Path(settings.STORAGE_ROOT).resolve()
        try:
            rel = Path(text).resolve().relative_to(root)
        except (ValueError, OSError):
            rel = None
        if rel is not None:
            found = Checkpoint.objects.filter(owner=owner, path=str(rel)).first()
    if found is None:
        raise ConfigError("teacher_checkpoint must be one of your checkpoints (its id); that one does not exist, "
                          "or it is not yours.")
    return found


def student_shape(teacher: Checkpoint, preset: str, overrides: dict[str, Any] | None = None, *,
                  family: str) -> dict[str, Any]:
    """model_overrides that give a student preset (DistilBERT's, with the user's overrides) the
    teacher's width and half its layers, as the student's family asks (Family.student_overrides):
    only the fields still needed, in order (a new hidden size also changes the derived FFN size).
    {} when the teacher's files cannot be read (validate_teacher says why)."""
    from trainer.training.checkpoints import read_model_meta

    spec = families.get(family)
    try:
        wanted = spec.student_overrides(read_model_meta(teacher.folder)["config"])
    except (UserError, ValueError, KeyError, TypeError):
        return {}
    user, needed = dict(overrides or {}), {}
    for name, value in wanted.items():
        try:
            current = spec.preset_config(preset, vocab_size=1024, **{**user, **needed})
        except (ConfigError, ValueError, TypeError):
            return wanted
        if getattr(current, name, None) != value:
            needed[name] = value
    return needed


def check_teacher(*, config: RunConfig, tokenizer: Tokenizer) -> None:
    """The teacher of a run whose family distils (DistilBERT's: a BERT checkpoint on disk), trained
    with the run's tokenizer; nothing for other families."""
    if not families.get(config.family).needs_teacher:
        return
    from trainer.prep.tokenization import tokenizers_differ

    validation.validate_teacher(config)
    if tokenizers_differ(tokenizer.folder, config.teacher_checkpoint):
        raise ConfigError(f"The teacher was trained with another tokenizer than '{tokenizer.name}'; a student reads "
                          f"its teacher's vocabulary, so choose the tokenizer the teacher's run used.")


def tokenizer_extra_ids(tokenizer: Tokenizer) -> int:
    """How many T5 sentinel tokens a tokenizer has: its tokenizer_meta.json's "extra_ids" when the
    folder holds one (what training reads), else the row's setting (0 for tokenizers trained
    before sentinels existed)."""
    meta_path = Path(tokenizer.folder) / "tokenizer_meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        return int(meta.get("extra_ids", 0) or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    stats = tokenizer.stats if isinstance(tokenizer.stats, dict) else {}
    try:
        return int(getattr(tokenizer, "extra_ids", 0) or stats.get("extra_ids", 0) or 0)
    except (TypeError, ValueError):
        return 0


def check_tokenizer(*, config: RunConfig, tokenizer: Tokenizer) -> None:
    """The tokenizer's algorithm must be one the family reads, and T5's span corruption needs
    its sentinel tokens; the sentence says where to get one."""
    try:
        validation.validate_tokenizer(config, tokenizer.algorithm, {"extra_ids": tokenizer_extra_ids(tokenizer)})
    except ConfigError as e:
        wanted = families.get(config.family).tokenizer_algorithms[0]
        sentinels = any(objectives.get(o).needs_sentinels for o in config.objectives if o in objectives.REGISTRY)
        raise ConfigError(f"{e} Train a {validation.algorithm_label(wanted)} tokenizer on the corpus's page "
                          f"(Corpora, then the corpus, then “Train a tokenizer”"
                          f"{', with “T5 sentinel tokens” set to 100' if sentinels else ''}).") from None


def training_settings(config: RunConfig) -> dict[str, Any]:
    """Everything in a config except the family/preset/objectives choices."""
    data = config.to_dict()
    return {k: v for k, v in data.items() if k not in CHOICE_FIELDS}


class RunLimitError(UserError):
    """A user already has the most runs queued or running that one user may have (HTTP 429)."""

    status_code = 429


def check_run_limit(*, owner) -> None:
    """RunLimitError when `owner` already has MAX_ACTIVE_RUNS_PER_USER runs queued or running.
    Locks the owner's row first (inside the caller's transaction), so two launches at once
    cannot both take the last place."""
    limit = settings.MAX_ACTIVE_RUNS_PER_USER
    get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
    active = Run.objects.filter(owner_id=owner.pk, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).count()
    if active >= limit:
        raise RunLimitError(f"You have {active} runs queued or running, the most one user may have at once "
                            f"({limit}). Wait for one to finish, or cancel one, then launch again.")


def queue_for(config) -> str:
    """The Celery queue of a run (a RunConfig's or a FinetuneConfig's device and devices): the
    kind's, "gpu" for cuda, "cpu" for cpu, RUN_DEFAULT_QUEUE for auto, with the device count
    when it asks for more than one ("gpu.x2"), so that only a worker that can give it that many
    takes it (webapp.runs.capacity); "all" goes to the kind's queue, resolved by its worker."""
    if config.device in ("cuda", "cpu"):
        kind = "gpu" if config.device == "cuda" else "cpu"
    else:
        kind = getattr(settings, "RUN_DEFAULT_QUEUE", "cpu") or "cpu"
    return capacity.run_queue(kind, getattr(config, "devices", 1))


def _check_data(*, owner, corpus: Corpus | None, tokenizer: Tokenizer) -> Corpus:
    if tokenizer is None:
        raise ConfigError("Choose a tokenizer.")
    if tokenizer.owner_id != owner.pk:
        raise ConfigError("That tokenizer does not exist, or it is not yours.")
    corpus = corpus or tokenizer.corpus
    if corpus.owner_id != owner.pk:
        raise ConfigError("That corpus does not exist, or it is not yours.")
    if tokenizer.corpus_id != corpus.pk:
        raise ConfigError(f"The tokenizer '{tokenizer.name}' was trained on another corpus, not on '{corpus.name}'.")
    if corpus.status != JobStatus.READY:
        raise ConfigError(f"The corpus '{corpus.name}' is not ready yet ({corpus.get_status_display().lower()}).")
    if tokenizer.status != JobStatus.READY:
        raise ConfigError(
            f"The tokenizer '{tokenizer.name}' is not ready yet ({tokenizer.get_status_display().lower()})."
        )
    return corpus


# -- create, cancel, resume, clone ----------------------------------------------------------

def check_memory(config, *, vocab_size: int = 1024) -> None:
    """ConfigError with a sentence naming batch_size and seq_len (max_length) and the estimate when a
    CPU run's model and activations need more memory than a live worker on its queue gives one run
    (capacity.run_memory; with none live, the worker checks before it allocates). A GPU run's
    activations live on the GPU: its worker says so if they do not fit."""
    from trainer import finetune

    queue = queue_for(config)
    kind, processes = capacity.parse_queue(queue)
    memory = capacity.run_memory(queue) if kind == "cpu" else None
    if memory is None:
        return
    whose = f"a worker on the {queue} queue gives one run"
    if isinstance(config, RunConfig):
        validation.check_memory(config, memory=memory, memory_of=whose, vocab_size=vocab_size, processes=processes)
    else:
        finetune.check_memory(config, memory=memory, memory_of=whose, processes=processes)


def check_epochs(config, *, examples: int, what: str, at_least: bool = False) -> None:
    """ConfigError naming `epochs` when they mean more steps than a run may have, counted from the
    sizes stored at launch (the worker counts the train split exactly and checks again)."""
    if not getattr(config, "epochs", 0) or examples < 1:
        return
    devices = getattr(config, "devices", 1)
    per_step = config.batch_size * config.grad_accum * (devices if isinstance(devices, int) and devices > 0 else 1)
    epoch_steps(config.epochs, examples, per_step, what=what, at_least=at_least)


def train_examples_of(dataset, extra_datasets: Sequence[dict] = ()) -> int:
    """A labelled dataset's training examples (with a multi-task mix's), as stored when it was ingested."""
    rows = [dataset, *(e.get("dataset") for e in extra_datasets)]
    return sum(int((getattr(d, "sizes", None) or {}).get("train") or 0) for d in rows if d is not None)


def _checked(field: str, check, **kwargs) -> None:
    """Run a launch check; its ConfigError says which field it is about (`field`), for the form."""
    try:
        check(**kwargs)
    except ConfigError as e:
        e.field = field
        raise


def run_plan(*, owner, corpus: Corpus | None, tokenizer: Tokenizer, family: str, preset: str, objectives,
             training: dict | None = None) -> tuple[Corpus, RunConfig]:
    """(the corpus, the validated RunConfig) of a pre-training launch: the data checked, the config
    built once (build_config, the teacher resolved) and checked against the tokenizer, the teacher,
    the memory a worker gives one run and the steps its epochs mean. The form calls it to put a
    refusal on its field (a ConfigError's `field`, when it is about one) and hands the result to
    run_create, which then builds nothing again; the API and clones let run_create call it."""
    corpus = _check_data(owner=owner, corpus=corpus, tokenizer=tokenizer)
    config = build_config(family=family, preset=preset, objectives=objectives, training=training, owner=owner)
    _checked("tokenizer", check_tokenizer, config=config, tokenizer=tokenizer)
    _checked("teacher_checkpoint", check_teacher, config=config, tokenizer=tokenizer)
    check_memory(config, vocab_size=tokenizer.vocab_size)
    # A sequence holds at most seq_len of the train split's tokens: their count over seq_len is a floor.
    train_tokens = int((((tokenizer.stats or {}).get("shards") or {}).get("train") or {}).get("n_tokens") or 0)
    _checked("epochs", check_epochs, config=config, examples=train_tokens // max(1, config.seq_len),
             what="training sequences or more", at_least=True)
    return corpus, config


@transaction.atomic
def run_create(*, owner, name: str = "", corpus: Corpus | None, tokenizer: Tokenizer, family: str,
               preset: str, objectives, training: dict | None = None, cloned_from: Run | None = None,
               plan: tuple[Corpus, RunConfig] | None = None) -> Run:
    """Validate the choices (run_plan, unless the caller made the plan for these same choices), store
    the run with its full config, enqueue it on commit."""
    check_run_limit(owner=owner)
    check_free_space(what="a new run (its checkpoints need room)")
    corpus, config = plan or run_plan(owner=owner, corpus=corpus, tokenizer=tokenizer, family=family, preset=preset,
                                      objectives=objectives, training=training)
    name = (name or "").strip() or f"{config.preset} on {corpus.name}"
    run = Run.objects.create(
        owner=owner, name=name[:200], corpus=corpus, tokenizer=tokenizer,
        family=config.family, preset=config.preset, objectives=list(config.objectives),
        config=config.to_dict(), queue=queue_for(config), max_steps=config.max_steps, cloned_from=cloned_from,
    )
    enqueue(run)
    return run


@transaction.atomic
def run_cancel(*, run: Run) -> Run:
    """A queued run is cancelled at once; a running one is asked to stop (it saves a checkpoint first)."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status == RunStatus.QUEUED:
        run.status = RunStatus.CANCELLED
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "finished_at"])
        LogLine.objects.create(run=run, text="Cancelled before it started.")
        ended_on_commit(run)
    elif run.status == RunStatus.RUNNING:
        if not run.cancel_requested:
            run.cancel_requested = True
            run.save(update_fields=["cancel_requested"])
            LogLine.objects.create(run=run, text="Cancel requested; stopping after a checkpoint.")
    else:
        raise RunStateError(f"This run has already finished ({run.get_status_display().lower()}).")
    publish_on_commit(run)
    return run


def run_resume(*, run: Run) -> Run:
    """Queue a stopped run again; the worker continues from its last checkpoint. A run still marked
    running whose worker went silent is marked crashed first (committed on its own), so it can be
    resumed without waiting for the periodic reaper."""
    mark_stale_runs(run_id=run.pk)
    return _requeue(run=run)


@transaction.atomic
def _requeue(*, run: Run) -> Run:
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status not in RESUMABLE_STATES:
        raise RunStateError(
            f"Only a cancelled, crashed or failed run can be resumed; this one is {run.get_status_display().lower()}."
        )
    check_run_limit(owner=run.owner)
    if run.kind == RunKind.FINETUNE and (run.base_checkpoint_id is None or run.dataset_id is None):
        raise RunStateError("The checkpoint or the dataset of this fine-tuning run was deleted, so it cannot be "
                            "resumed.")
    check_free_space(what="resuming this run (its checkpoints need room)")
    newest = run.checkpoints.order_by("-step").first()
    if newest is None:
        raise RunStateError("This run has no checkpoint to resume from. Clone it to start again from step 0.")
    run.status = RunStatus.QUEUED
    run.error = ""
    run.cancel_requested = False
    run.claimed_by = ""
    run.heartbeat_at = None
    run.finished_at = None
    # The step it resumes from, shown from now on (not the one it stopped at, until the worker logs).
    run.current_step = newest.step
    run.save(update_fields=["status", "error", "cancel_requested", "claimed_by", "heartbeat_at", "finished_at",
                            "current_step"])
    LogLine.objects.create(run=run, text=f"Resume requested from the checkpoint at step {newest.step:,}; "
                                         "waiting for a worker.")
    enqueue(run)
    publish_on_commit(run)
    return run


@transaction.atomic
def run_clone(*, run: Run, owner, name: str | None = None) -> Run:
    """A new queued run with the same data and config (starting from step 0)."""
    if run.owner_id != owner.pk:
        raise ConfigError("That run does not exist, or it is not yours.")
    if run.kind == RunKind.FINETUNE:
        from trainer.finetune.config import FinetuneConfig

        from webapp.datasets.models import Dataset

        config = FinetuneConfig.from_dict(run.config)
        extras = [{**e, "dataset": Dataset.objects.filter(pk=e.get("id"), owner=owner).first()}
                  for e in config.extra_datasets]  # None where it was deleted: refused with a sentence
        return finetune_create(owner=owner, checkpoint=run.base_checkpoint, dataset=run.dataset,
                               training={k: getattr(config, k) for k in finetune_fields()},
                               name=name or f"{run.name} (copy)", extra_datasets=extras)
    config = RunConfig.from_dict(run.config)
    return run_create(
        owner=owner, name=name or f"{run.name} (copy)", corpus=run.corpus, tokenizer=run.tokenizer,
        family=config.family, preset=config.preset, objectives=config.objectives,
        training=training_settings(config), cloned_from=run,
    )


# -- fine-tuning --------------------------------------------------------------------------------

def finetune_fields() -> list[str]:
    """The FinetuneConfig fields the form and the API take (every setting of trainer.catalog.finetune's
    schema); the rest keep their defaults, and the checkpoint, dataset and task come from the rows
    the user chose."""
    from webapp.runs import launch

    return list(launch.finetune_json()["settings"])


def check_finetune_sources(*, owner, checkpoint: Checkpoint | None, dataset, extra_datasets: Sequence = ()) -> str:
    """ConfigError with a sentence unless the checkpoint and the datasets are the owner's, the
    datasets are ready and the task has a head for the checkpoint's family; returns that family.
    With extra_datasets (T5 multi-task mixing) every dataset must be one that can be written as
    text to text, and the checkpoint one that trains text to text."""
    from trainer import finetune
    from trainer.finetune.config import MIX_DATASET_TASKS

    if checkpoint is None or checkpoint.owner_id != owner.pk:
        raise ConfigError("That checkpoint does not exist, or it is not yours.")
    _check_dataset(owner, dataset)
    if extra_datasets:
        for extra in [dataset, *extra_datasets]:
            _check_dataset(owner, extra)
            if extra.task not in MIX_DATASET_TASKS:
                raise ConfigError(f"The dataset '{extra.name}' is a {extra.task.replace('_', ' ')} dataset; "
                                  f"multi-task mixing trains text to text, classification and regression "
                                  f"datasets written as text.")
        return finetune.check_checkpoint(checkpoint.folder, MIX_TASK)
    if dataset.task not in finetune.names():
        raise ConfigError(f"Fine-tuning does not offer the task of the dataset '{dataset.name}' ({dataset.task}) yet.")
    return finetune.check_checkpoint(checkpoint.folder, dataset.task)


def _check_dataset(owner, dataset) -> None:
    if dataset is None or dataset.owner_id != owner.pk:
        raise ConfigError("That dataset does not exist, or it is not yours.")
    if dataset.status != JobStatus.READY:
        raise ConfigError(f"The dataset '{dataset.name}' is not ready yet ({dataset.get_status_display().lower()}); "
                          f"fine-tuning reads a dataset once its columns are mapped and it is ingested.")


def finetune_choices(owner) -> dict[str, dict[str, dict[str, Any]]]:
    """What the fine-tuning form offers the owner, so that it lists only pairs
    check_finetune_sources accepts: {"checkpoints": {id: {"family", "family_label", "tasks": the
    dataset tasks its family fine-tunes on (trainer.finetune.tasks_for_family)}}, "datasets": {id:
    {"task", "ready", "mixable": whether multi-task mixing takes it}}}. A checkpoint whose files cannot
    be read fine-tunes on nothing. Checkpoints of one run share a family (read once per run)."""
    from trainer import finetune
    from trainer.finetune.config import MIX_DATASET_TASKS
    from webapp.datasets.selectors import datasets_for
    from webapp.runs.selectors import checkpoints_for

    by_run: dict[Any, str] = {}
    checkpoints: dict[str, dict[str, Any]] = {}
    for checkpoint in checkpoints_for(owner):
        key = checkpoint.run_id or checkpoint.pk
        if key not in by_run:
            try:
                by_run[key] = finetune.checkpoint_family(checkpoint.folder)
            except ConfigError:
                by_run[key] = ""
        family = by_run[key]
        checkpoints[str(checkpoint.pk)] = {
            "family": family, "tasks": finetune.tasks_for_family(family) if family else [],
            "mixes": bool(family) and MIX_TASK in finetune.tasks_for_family(family),
            "family_label": families.get(family).label if family in families.names() else family or "unreadable"}
    datasets = {str(d.pk): {"task": d.task, "ready": d.status == JobStatus.READY,
                            "mixable": d.task in MIX_DATASET_TASKS} for d in datasets_for(owner)}
    return {"checkpoints": checkpoints, "datasets": datasets}


def build_finetune_config(*, checkpoint: Checkpoint, dataset, training: dict | None = None,
                          extra_datasets: Sequence[dict] = ()):
    """A validated FinetuneConfig: the user's settings (finetune_fields() only) over the defaults,
    with the checkpoint's and the datasets' folders resolved here, never taken from the user.
    extra_datasets: [{"dataset": a Dataset row, "prefix": ..., "name": ...}] (multi-task)."""
    from trainer.finetune.config import FinetuneConfig

    fields = finetune_fields()
    chosen = {k: v for k, v in (training or {}).items() if k in fields and v is not None}
    extras = [{"dataset": str(e["dataset"].data_dir), "prefix": str(e.get("prefix") or ""),
               "name": str(e.get("name") or ""), "id": str(e["dataset"].pk)} for e in extra_datasets]
    return FinetuneConfig.from_dict({**chosen, "checkpoint": str(checkpoint.folder), "dataset": str(dataset.data_dir),
                                     "task": MIX_TASK if extras else dataset.task, "extra_datasets": extras})


def check_settings_apply(*, family: str, task: str, training: dict | None) -> None:
    """ConfigError naming the first setting of `training` that does not apply to a `family`
    checkpoint fine-tuned for the dataset task `task` (MIX_TASK: multi-task) with the technique the
    settings choose (trainer.catalog.finetune.fields_for, what the form shows), and saying which do.
    A technique's switch (lora_r, adapter_size) is always taken: it chooses the technique
    (technique_of), whose settings then apply, and two switched on at once get the config's own
    sentence (LoRA and adapters do not mix). A value equal to the setting's default changes
    nothing, so it passes."""
    from trainer.catalog import finetune as catalog_finetune
    from trainer.finetune import settings as ft_settings
    from trainer.prep.labelled import TASKS
    from webapp.runs import launch

    given = {k: v for k, v in (training or {}).items() if v is not None}
    technique = ft_settings.technique_of(given)
    applying = ft_settings.names(catalog_finetune.fields_for(family, task, technique))
    defaults = {name: spec["default"] for name, spec in launch.finetune_json()["settings"].items()}
    switches = {t.switch for t in ft_settings.TECHNIQUES if t.switch}
    for name, value in given.items():
        if name not in defaults or name in applying or name in switches or value == defaults[name]:
            continue
        what = TASKS[task].title.lower() if task in TASKS else task.replace("_", " ")
        how = "" if technique == ft_settings.FULL.name else f" with {ft_settings.technique(technique).label}"
        raise ConfigError(f"{name} does not apply to a {families.get(family).label} checkpoint fine-tuned for "
                          f"{what}{how}; the settings that apply are {', '.join(applying)}.")


def finetune_plan(*, owner, checkpoint: Checkpoint | None, dataset, training: dict | None = None,
                  extra_datasets: Sequence[dict] = (), only_applicable: bool = False) -> tuple[str, Any]:
    """(the checkpoint's family, the validated FinetuneConfig) of a launch: the sources checked
    (check_finetune_sources) and the config built once (build_finetune_config) and sized (check_memory). The form calls it
    to put a refusal on its field and hands the result to finetune_create, which then builds nothing
    again. only_applicable (the API): a setting given that does not apply is refused
    (check_settings_apply) rather than carried along unused. ConfigError with a sentence."""
    extra_datasets = list(extra_datasets)
    family = check_finetune_sources(owner=owner, checkpoint=checkpoint, dataset=dataset,
                                    extra_datasets=[e.get("dataset") for e in extra_datasets])
    if only_applicable:
        check_settings_apply(family=family, task=MIX_TASK if extra_datasets else dataset.task, training=training)
    config = build_finetune_config(checkpoint=checkpoint, dataset=dataset, training=training,
                                   extra_datasets=extra_datasets)
    check_memory(config)  # its activations against the memory a worker gives one run
    check_epochs(config, examples=train_examples_of(dataset, extra_datasets), what="training examples")
    return family, config


@transaction.atomic
def finetune_create(*, owner, checkpoint: Checkpoint | None, dataset, training: dict | None = None,
                    name: str = "", extra_datasets: Sequence[dict] = (), plan: tuple[str, Any] | None = None,
                    only_applicable: bool = False) -> Run:
    """Validate a fine-tuning launch, store the run (kind "finetune", its FinetuneConfig as the
    config), enqueue it on commit. The owner's run limit applies as for pre-training.
    extra_datasets: T5 multi-task mixing, [{"dataset": a Dataset row or None, "prefix", "name"}].
    plan: finetune_plan's result for these same choices, when the caller (the form) made it.
    only_applicable: finetune_plan's (the API refuses a setting that does not apply; a rerun, a
    sweep or a follow-up hands on a whole stored config, whose unused settings are harmless)."""
    check_run_limit(owner=owner)
    check_free_space(what="a new run (its checkpoints need room)")
    extra_datasets = list(extra_datasets)
    family, config = plan or finetune_plan(owner=owner, checkpoint=checkpoint, dataset=dataset, training=training,
                                           extra_datasets=extra_datasets, only_applicable=only_applicable)
    name = (name or "").strip() or f"{checkpoint.label} on {dataset.name}" + (
        f" and {len(extra_datasets)} more" if extra_datasets else "")
    if checkpoint.run_id is not None:  # its run's retention keeps it: this run (and its resume) reads it
        from trainer.training.retention import pin

        try:
            pin(checkpoint.run.folder, checkpoint.step)
        except (UserError, OSError):
            pass  # not a whole checkpoint on disk: check_finetune_sources has said what it lacks
    run = Run.objects.create(
        owner=owner, name=name[:200], kind=RunKind.FINETUNE, dataset=dataset, base_checkpoint=checkpoint,
        family=family, preset=checkpoint.label[:40], objectives=[config.task], config=config.to_dict(),
        queue=queue_for(config), max_steps=config.max_steps,
    )
    enqueue(run)
    return run


# -- multi-task, then fine-tuned on one of its tasks (T5, Raffel et al. 2020, section 3.5.3) -----

def mix_datasets(run: Run) -> list[dict[str, Any]]:
    """The tasks of a multi-task run, in its order: {"name", "prefix", "dataset": the Dataset row
    or None where it was deleted, "id"}; [] for any other run."""
    from trainer.finetune.config import mix_task_names
    from webapp.datasets.models import Dataset

    config = run.config or {}
    names = mix_task_names(config) if run.is_finetune else []
    if not names:
        return []
    extras = [e if isinstance(e, dict) else {} for e in config.get("extra_datasets") or []]
    specs = [{"id": str(run.dataset_id or ""), "prefix": str(config.get("source_prefix") or "")},
             *({"id": str(e.get("id") or ""), "prefix": str(e.get("prefix") or "")} for e in extras)]
    rows = {str(d.pk): d for d in Dataset.objects.filter(owner_id=run.owner_id,
                                                         pk__in=[s["id"] for s in specs if _is_uuid(s["id"])])}
    return [{"name": name, "prefix": spec["prefix"], "id": spec["id"], "dataset": rows.get(spec["id"])}
            for name, spec in zip(names, specs)]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def handed_on_checkpoint(run: Run) -> Checkpoint | None:
    """The checkpoint a multi-task run hands on: early stopping's best (best.json) when it kept
    one, else its newest."""
    try:
        best = json.loads((run.folder / "best.json").read_text(encoding="utf-8"))
        found = run.checkpoints.filter(step=int(best["step"])).first()
        if found is not None:
            return found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return run.checkpoints.order_by("-step").first()


# What the follow-up run does not take from the multi-task run: the mixing and the main task's prefix.
_NOT_HANDED_ON = ("source_prefix", "task_name", "mixing", "mixing_limit", "mixing_temperature")


def finetune_on_one_settings(run: Run, task: dict[str, Any]) -> dict[str, Any]:
    """The launch settings of a follow-up run on one task of `run`: the multi-task run's own
    (finetune_fields()) and that task's prefix; what the form is pre-filled with."""
    config = run.config or {}
    settings = {k: config[k] for k in finetune_fields() if k in config and k not in _NOT_HANDED_ON}
    return {**settings, "source_prefix": task["prefix"]}


def finetune_on_one(*, owner, run: Run, dataset_id, training: dict | None = None, name: str = "") -> Run:
    """Fine-tune a multi-task run's checkpoint (its best, else its last) on one of its datasets
    alone, with that task's prefix and the run's settings (`training` overrides them); a
    classification or regression dataset is T5's label words (trainer.finetune.text_classify), so
    it is scored like the encoders. One call from the run's page or POST
    /api/runs/<id>/finetune-on/; the new run's base checkpoint is the multi-task run's, so the
    lineage shows where it comes from."""
    if run.owner_id != owner.pk:
        raise ConfigError("That run does not exist, or it is not yours.")
    tasks = mix_datasets(run)
    if not tasks:
        raise ConfigError("Only a multi-task run (one with extra datasets) can be fine-tuned on one of its datasets; "
                          "fine-tune this run's checkpoints from their row instead.")
    task = next((t for t in tasks if t["id"] == str(dataset_id)), None)
    if task is None:
        names = ", ".join(t["dataset"].name if t["dataset"] else f"{t['name']} (deleted)" for t in tasks)
        raise ConfigError(f"That dataset is not one of this run's tasks; it trained on {names}.")
    if task["dataset"] is None:
        raise ConfigError(f"The dataset of the task {task['name']!r} was deleted, so it cannot be fine-tuned on.")
    checkpoint = handed_on_checkpoint(run)
    if checkpoint is None:
        raise RunStateError("This run has no checkpoint yet; fine-tune on one of its datasets once it has saved one.")
    given = {k: v for k, v in (training or {}).items() if v is not None}
    settings = {**length_from(finetune_on_one_settings(run, task), given), **given}  # a length given replaces the run's
    name = (name or "").strip() or f"{run.name}, then {task['dataset'].name}"
    return finetune_create(owner=owner, checkpoint=checkpoint, dataset=task["dataset"], training=settings, name=name)


# -- execution (in a Celery worker) ---------------------------------------------------------
