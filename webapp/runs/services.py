"""Writes for runs: create, cancel, resume, clone, execute (in a worker), reap crashed runs.

Views, the API and the Celery tasks (webapp/runs/tasks.py) call these; each takes keyword
arguments only. Reads (selectors) never write: crashed runs are reaped by the periodic task,
and before a resume or a claim looks at a run's state.
User-caused problems raise trainer.errors.UserError subclasses with a sentence to show.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
import traceback
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from trainer import families
from trainer.catalog import validation
from trainer import objectives
from trainer.config import RunConfig, epoch_steps, length_from
from trainer.finetune.config import MIX_TASK  # the task a multi-task run trains
from trainer.errors import ConfigError, UserError
from webapp.api.storage import check_free_space, is_disk_full
from webapp.corpora.models import Corpus, JobStatus, Tokenizer
from webapp.runs import shutdown
from webapp.runs.events import send_run_event, status_event
from webapp.runs import capacity, multiproc
from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run, RunKind, RunStatus
from webapp.runs.signals import run_ended
from webapp.runs.sink import DatabaseChannelsSink, StopCheck

log = logging.getLogger(__name__)

CHOICE_FIELDS = ("family", "preset", "objectives")
RESUMABLE_STATES = (RunStatus.CANCELLED, RunStatus.CRASHED, RunStatus.FAILED)
# How a run that found the disk full ends (the worker keeps trying to write it until there is room).
RUN_DISK_FULL = ("The disk is full: the server's storage had no space left for this run's metrics, log or "
                 "checkpoints, so it stopped. Its saved checkpoints are intact; free some space (delete runs, "
                 "checkpoints or corpora you no longer need), then resume it.")
END_RETRY_S = 2.0  # how often a worker tries again to record a run's end that the full disk refused


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


QUEUE_DOWN = ("The run could not be queued because the task queue (Redis) did not answer. Once Redis and a "
              "worker are running, resume it (or clone it, if it has no checkpoint yet).")


def _enqueue(run: Run) -> None:
    """Send the run's task once the transaction commits; when the broker does not answer, the run
    fails with QUEUE_DOWN instead of staying queued with no task (and the request gets no 500)."""
    from webapp.runs.tasks import train_run

    run_id, queue = str(run.id), run.queue

    def send() -> None:
        try:
            train_run.apply_async(args=[run_id], queue=queue)
        except Exception:  # noqa: BLE001 - the broker is down: say so on the run's page
            log.exception("Could not enqueue run %s", run_id)
            if Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
                    status=RunStatus.FAILED, error=QUEUE_DOWN, finished_at=timezone.now()):
                LogLine.objects.create(run_id=run_id, text=QUEUE_DOWN)

    transaction.on_commit(send)


def _ended(run_id, status: str) -> None:
    """Tell run_ended's listeners (webapp.sweeps); their failure is logged, never the run's."""
    try:
        run_ended.send(sender=Run, run_id=run_id, status=status)
    except Exception:  # noqa: BLE001
        log.exception("A listener of run %s's end failed", run_id)


def _ended_on_commit(run: Run) -> None:
    run_id, status = run.id, run.status
    transaction.on_commit(lambda: _ended(run_id, status))


def _publish_on_commit(run: Run) -> None:
    payload, run_id = status_event(run), run.id
    transaction.on_commit(lambda: send_run_event(run_id, payload))


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
    _enqueue(run)
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
        _ended_on_commit(run)
    elif run.status == RunStatus.RUNNING:
        if not run.cancel_requested:
            run.cancel_requested = True
            run.save(update_fields=["cancel_requested"])
            LogLine.objects.create(run=run, text="Cancel requested; stopping after a checkpoint.")
    else:
        raise RunStateError(f"This run has already finished ({run.get_status_display().lower()}).")
    _publish_on_commit(run)
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
    _enqueue(run)
    _publish_on_commit(run)
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
    from webapp.datasets.models import DatasetStatus

    if dataset is None or dataset.owner_id != owner.pk:
        raise ConfigError("That dataset does not exist, or it is not yours.")
    if dataset.status != DatasetStatus.READY:
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
    from webapp.datasets.models import DatasetStatus
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
    datasets = {str(d.pk): {"task": d.task, "ready": d.status == DatasetStatus.READY,
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
    run = Run.objects.create(
        owner=owner, name=name[:200], kind=RunKind.FINETUNE, dataset=dataset, base_checkpoint=checkpoint,
        family=family, preset=checkpoint.label[:40], objectives=[config.task], config=config.to_dict(),
        queue=queue_for(config), max_steps=config.max_steps,
    )
    _enqueue(run)
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

def resume_point(run_folder: Path) -> tuple[int, Path] | None:
    """(step, folder) of the newest checkpoint a resume continues from, or None."""
    from trainer.training import checkpoints

    folder = checkpoints.latest_resumable(run_folder)
    if folder is None:
        return None
    return int(checkpoints.read_state(folder)["step"]), folder


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_execute(*, run_id) -> None:
    """Claim a queued run, train it with a database+websocket sink, record how it ended.

    A redelivered task finds the row no longer queued and returns without doing anything.
    """
    me = worker_name()
    # A redelivered task of a dead worker's run: crashed (at once when its process on this host
    # is gone, as when a pool child is killed), not claimed again.
    mark_dead_claims(run_id=run_id)
    mark_stale_runs(run_id=run_id)
    if not _claim(run_id, me):
        log.info("Run %s is not queued (already claimed, cancelled or deleted); nothing to do.", run_id)
        return
    run = Run.objects.select_related("tokenizer", "dataset", "base_checkpoint").get(pk=run_id)
    sink = DatabaseChannelsSink(run.id, claimed_by=me)
    status, error, final_step = RunStatus.FAILED, "", run.current_step
    try:
        status, final_step = (_finetune if run.kind == RunKind.FINETUNE else _train)(run, sink, me)
    except UserError as exc:
        error = str(exc)
        status = getattr(exc, "status", status)  # multiproc.ProcessesCrashed: crashed, not failed
    except Exception as exc:  # noqa: BLE001 - any bug becomes a failed run with a sentence, never a stuck one
        if is_disk_full(exc):  # a write of the sink (a point, a log line, the heartbeat, a checkpoint's row)
            log.warning("Run %s stopped: the disk is full (%s)", run_id, exc)
            error = RUN_DISK_FULL
        else:
            log.exception("Run %s stopped with an internal error", run_id)
            error = f"Training stopped with an internal error: {type(exc).__name__}: {exc}"
            _safe_log(sink, "".join(traceback.format_exception(exc)).rstrip())
    finally:
        if not (status == RunStatus.CANCELLED and requeue_on_shutdown(run, sink, me=me, step=final_step)):
            _finish(run, sink, me=me, status=status, error=error, final_step=final_step)


def _claim(run_id, me: str) -> bool:
    """queued -> running in one UPDATE: of two workers given the same run, exactly one wins."""
    now = timezone.now()
    return bool(Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, claimed_by=me, heartbeat_at=now, finished_at=None, cancel_requested=False,
        error="", started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
    ))


def _train(run: Run, sink: DatabaseChannelsSink, me: str) -> tuple[str, int]:
    """Call the engine (from the last checkpoint when there is one); returns (status, final step)."""
    from trainer.training.checkpoints import list_checkpoints
    from trainer.training.engine import train  # imports torch: only workers pay for it

    config = RunConfig.from_dict(run.config)
    resume = bool(list_checkpoints(run.folder))  # the engine refuses to start over existing checkpoints
    resume_from = resume_point(run.folder) if resume else None
    _prepare_history(run, resume_from)
    if resume_from:
        sink.log(f"Resuming on {me} from the checkpoint at step {resume_from[0]}.")
    else:
        sink.log(f"Started on {me} ({run.queue} queue).")
    send_run_event(run.id, {**status_event(run), "resumed_from": resume_from[0] if resume_from else None})
    run.folder.mkdir(parents=True, exist_ok=True)
    processes = capacity.devices_here(config)  # what this worker gives the run, or a sentence why not
    if processes > 1:  # torchrun in a process group of its own (webapp.runs.multiproc)
        return multiproc.train(run, config, sink, StopCheck(run.id, claimed_by=me), processes=processes,
                               resume=resume)
    result = train(config, data_dir=run.tokenizer.folder, out_dir=run.folder, sink=sink,
                   should_stop=StopCheck(run.id, claimed_by=me), resume=resume)
    return (RunStatus.CANCELLED if result.status == "cancelled" else RunStatus.SUCCEEDED), result.final_step


def _finetune(run: Run, sink: DatabaseChannelsSink, me: str) -> tuple[str, int]:
    """Fine-tune (from the run's last checkpoint when it has one: a resume) with the same sink,
    cancel check and heartbeat as pre-training; its checkpoints are registered by the sink like
    any run's."""
    from trainer.finetune.config import FinetuneConfig
    from trainer.finetune.engine import finetune  # imports torch: only workers pay for it
    from trainer.training.checkpoints import list_checkpoints

    if run.base_checkpoint_id is None or run.dataset_id is None:
        raise ConfigError("The checkpoint or the dataset of this fine-tuning run was deleted.")
    config = FinetuneConfig.from_dict(run.config)
    resume = bool(list_checkpoints(run.folder))
    resume_from = resume_point(run.folder) if resume else None
    _prepare_history(run, resume_from)
    if resume_from:
        sink.log(f"Resuming on {me} from the checkpoint at step {resume_from[0]}: {run.lineage}.")
    else:
        sink.log(f"Started on {me} ({run.queue} queue): {run.lineage}.")
    send_run_event(run.id, {**status_event(run), "resumed_from": resume_from[0] if resume_from else None})
    run.folder.mkdir(parents=True, exist_ok=True)
    result = finetune(config, out_dir=run.folder, sink=sink, should_stop=StopCheck(run.id, claimed_by=me),
                      resume=resume)
    return (RunStatus.CANCELLED if result.status == "cancelled" else RunStatus.SUCCEEDED), result.final_step


def _prepare_history(run: Run, resume_from: tuple[int, Path] | None) -> None:
    """Drop metric points the resumed run will produce again (logged after its last checkpoint)."""
    if resume_from:
        step = resume_from[0]
        MetricPoint.objects.filter(run=run, step__gt=step).delete()
        Run.objects.filter(pk=run.pk).update(current_step=step)
        run.current_step = step
    else:
        MetricPoint.objects.filter(run=run).delete()  # a fresh start: no stale history


def _safe_log(sink: DatabaseChannelsSink, text: str) -> bool:
    """Write a log line of the run; False when it could not be written."""
    try:
        sink.log(text)
    except Exception:  # noqa: BLE001 - the database itself may be what failed
        log.warning("Could not write a log line", exc_info=True)
        return False
    return True


def _finish(run: Run, sink: DatabaseChannelsSink, *, me: str, status: str, error: str, final_step: int) -> None:
    try:
        sink.close()
    except Exception:  # noqa: BLE001
        log.exception("Could not write the last heartbeat of run %s", run.id)
    line = error or f"Finished: {RunStatus(status).label.lower()} at step {final_step}."
    logged = _safe_log(sink, line)
    updates: dict[str, Any] = {
        "status": status, "error": error, "finished_at": timezone.now(), "cancel_requested": False,
        "heartbeat_at": timezone.now(),
    }
    if not error:
        updates["current_step"] = final_step
    ended = _record_end(run, me=me, updates=updates)
    if ended is None:
        return  # still no room, and the worker is shutting down: the reaper ends the run later
    if not logged:
        _safe_log(sink, line)  # the disk had no room for it before the end was written
    try:
        run.refresh_from_db()
    except Run.DoesNotExist:
        return  # deleted while it trained
    send_run_event(run.id, status_event(run))
    if ended:
        _ended(run.id, status)


def _record_end(run: Run, *, me: str, updates: dict[str, Any]) -> int | None:
    """Write how the run ended; returns how many rows changed (0: not this worker's run any more).

    Only the worker that owns the run records its end (a resume elsewhere may have taken it over).
    When the disk is full the row cannot be written either (SQLite shares the volume), so the
    worker tries again every END_RETRY_S until it can: the run then ends with its own sentence as
    soon as there is room, instead of staying "running" until the reaper calls it silent. (A
    reaper that got there first is overruled: the claim is still this worker's.) None when the
    worker is told to stop meanwhile."""
    while True:
        try:
            return Run.objects.filter(pk=run.pk, claimed_by=me).update(**updates)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            if shutdown.requested():
                log.error("Run %s: the disk is full and the worker is stopping; its end was not recorded", run.pk)
                return None
            log.warning("Run %s: the disk is full; trying again in %s s to record its end", run.pk, END_RETRY_S)
            time.sleep(END_RETRY_S)


def requeue_on_shutdown(run: Run, sink: DatabaseChannelsSink, *, me: str, step: int) -> bool:
    """After the engine stopped because this worker is shutting down (webapp.runs.shutdown; the
    engine saved a checkpoint at `step`): the run is queued again and its task sent again, so the
    next worker resumes it from that checkpoint (a fine-tuning run, which has no resume, starts
    over). False, with nothing changed, when the worker is not shutting down or the run is no
    longer this worker's to requeue (a cancel requested meanwhile wins: the run ends cancelled)."""
    if not shutdown.requested():
        return False
    try:
        sink.close()
    except Exception:  # noqa: BLE001
        log.exception("Could not write the last heartbeat of run %s", run.id)
    updates: dict[str, Any] = {"status": RunStatus.QUEUED, "claimed_by": "", "heartbeat_at": None}
    if run.kind != RunKind.FINETUNE:
        updates["current_step"] = step
    with transaction.atomic():
        if not Run.objects.filter(pk=run.pk, claimed_by=me, status=RunStatus.RUNNING,
                                  cancel_requested=False).update(**updates):
            return False
        run.refresh_from_db()
        _enqueue(run)
        _publish_on_commit(run)
    then = ("starts it over (a fine-tuning run cannot resume)" if run.kind == RunKind.FINETUNE
            else f"resumes it from the checkpoint at step {step}")
    _safe_log(sink, f"The worker {me} is shutting down: the run stopped at step {step} and is queued again; "
                    f"the next worker {then}.")
    log.info("Run %s requeued at step %s: the worker is shutting down", run.id, step)
    return True


# -- crash detection ------------------------------------------------------------------------

def mark_dead_claims(*, run_id=None, now=None) -> int:
    """Mark running runs claimed by a process of this host that no longer exists (a killed pool
    child) as crashed at once, without waiting for the heartbeat timeout; only `run_id` when
    given. Callers: run_execute (Celery redelivers a dead child's task at once) and the reaper."""
    now = now or timezone.now()
    host = socket.gethostname()
    running = Run.objects.filter(status=RunStatus.RUNNING, claimed_by__startswith=f"{host}:")
    if run_id is not None:
        running = running.filter(pk=run_id)
    count = 0
    for run in running:
        pid = run.claimed_by.rpartition(":")[2]
        if not pid.isdigit() or _process_alive(int(pid)):
            continue
        message = (f"The worker process that was training it (pid {pid} on {host}) died. Resume continues from "
                   "its last checkpoint.")
        with _unless_disk_full(run):
            if Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, claimed_by=run.claimed_by).update(
                    status=RunStatus.CRASHED, error=message, finished_at=now):
                count += 1
                _announce_crash(run, message)
    return count


@contextmanager
def _unless_disk_full(run: Run):
    """The reaper's write for one run; a full disk skips it (logged) instead of stopping the pass:
    the next pass tries again, and a worker still waiting to record its run's end writes it first
    (_record_end) as soon as there is room."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        log.warning("The disk is full: run %s could not be marked crashed now; the next pass tries again", run.pk)


def _announce_crash(run: Run, message: str) -> None:
    """After a reaper marked `run` crashed: its log line, its status event and run_ended's listeners."""
    run.refresh_from_db()
    LogLine.objects.create(run=run, text=message)
    send_run_event(run.id, status_event(run))
    _ended(run.id, run.status)


def _process_alive(pid: int) -> bool:
    """Whether a process of this host runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def mark_stale_runs(*, now=None, run_id=None) -> int:
    """Mark running runs whose worker went silent (no heartbeat for RUN_HEARTBEAT_TIMEOUT_S) as
    crashed, only the run `run_id` when given; returns how many. Callers: the periodic task
    (webapp.runs.tasks.reap_stale_runs), `manage.py reap_runs`, run_resume and run_execute."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=int(getattr(settings, "RUN_HEARTBEAT_TIMEOUT_S", 120)))
    stale = Run.objects.filter(status=RunStatus.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    if run_id is not None:
        stale = stale.filter(pk=run_id)
    count = 0
    for run in stale:
        seen = run.heartbeat_at or run.started_at
        message = (
            f"The worker stopped sending heartbeats (last seen {seen:%Y-%m-%d %H:%M:%S} UTC on "
            f"{run.claimed_by or 'an unknown worker'})."
        )
        with _unless_disk_full(run):
            changed = Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, heartbeat_at=run.heartbeat_at).update(
                status=RunStatus.CRASHED, error=message, finished_at=now
            )
            if changed:
                count += 1
                _announce_crash(run, message)
    return count
