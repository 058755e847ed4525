"""Writes for sweeps: create, advance (sample and launch the next trials), record a trial's
validation metric and prune it, cancel.

Each trial is a run of its own, created with webapp.runs.services (run_create or
finetune_create) and queued like any other, so trials spread over every worker. When a trial's
run reports validation metrics (webapp.runs.signals.validation_reported, sent by its sink in the
worker) the metric is recorded and the pruner asked; when it ends (run_ended) the sweep advances:
that worker samples and queues the next trials (webapp.sweeps.receivers).
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from trainer.config import length_from
from trainer.errors import ConfigError, UserError
from webapp.corpora.models import Corpus, Tokenizer
from webapp.runs import services as runs
from webapp.runs.events import send_run_event
from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run, RunKind, RunStatus
from webapp.sweeps import space as spaces
from webapp.sweeps import study
from webapp.sweeps.models import Direction, Pruner, Sampler, Sweep, SweepKind, SweepStatus, Trial, TrialState

log = logging.getLogger(__name__)

MAX_TRIALS = 200


# -- the base settings -------------------------------------------------------------------------

def base_from_run(*, owner, run: Run | None) -> tuple[str, dict[str, Any]]:
    """(kind, base) copied from one of the owner's runs: its data and its whole config."""
    if run is None or run.owner_id != owner.pk:
        raise ConfigError("That run does not exist, or it is not yours.")
    if run.kind == RunKind.FINETUNE:
        if run.base_checkpoint_id is None or run.dataset_id is None:
            raise ConfigError("The checkpoint or the dataset of that fine-tuning run was deleted.")
        training = {k: v for k, v in run.config.items() if k in runs.finetune_fields()}
        return SweepKind.FINETUNE, {"checkpoint": str(run.base_checkpoint_id), "dataset": str(run.dataset_id),
                                    "training": training}
    if run.tokenizer_id is None:
        raise ConfigError("The tokenizer of that run was deleted.")
    config = dict(run.config)
    return SweepKind.PRETRAIN, {
        "tokenizer": str(run.tokenizer_id), "corpus": str(run.corpus_id) if run.corpus_id else None,
        "family": config.get("family", run.family), "preset": config.get("preset", run.preset),
        "objectives": list(config.get("objectives", run.objectives)),
        "training": {k: v for k, v in config.items() if k not in runs.CHOICE_FIELDS},
    }


def _pretrain_sources(owner, base: dict[str, Any]) -> tuple[Corpus | None, Tokenizer]:
    tokenizer = Tokenizer.objects.filter(owner=owner, pk=base.get("tokenizer")).first()
    if tokenizer is None:
        raise ConfigError("The sweep's tokenizer does not exist, or it is not yours.")
    corpus = None
    if base.get("corpus"):
        corpus = Corpus.objects.filter(owner=owner, pk=base["corpus"]).first()
        if corpus is None:
            raise ConfigError("The sweep's corpus does not exist, or it is not yours.")
    return corpus, tokenizer


def _finetune_sources(owner, base: dict[str, Any]):
    from webapp.datasets.models import Dataset

    checkpoint = Checkpoint.objects.filter(owner=owner, pk=base.get("checkpoint")).first()
    dataset = Dataset.objects.filter(owner=owner, pk=base.get("dataset")).first()
    return checkpoint, dataset


def _check_base(*, owner, kind: str, base: dict[str, Any], space: list[dict[str, Any]]) -> None:
    """ConfigError unless the base is the owner's and valid with the space's extremes (the lowest
    and the highest of every setting; the first and the last listed value)."""
    samples = [
        {e["name"]: e["values"][0] if "values" in e else e["low"] for e in space},
        {e["name"]: e["values"][-1] if "values" in e else e["high"] for e in space},
    ]
    if kind == SweepKind.FINETUNE:
        checkpoint, dataset = _finetune_sources(owner, base)
        runs.check_finetune_sources(owner=owner, checkpoint=checkpoint, dataset=dataset)
        for sample in samples:
            runs.build_finetune_config(checkpoint=checkpoint, dataset=dataset, training={**base["training"], **sample})
        return
    corpus, tokenizer = _pretrain_sources(owner, base)
    runs._check_data(owner=owner, corpus=corpus, tokenizer=tokenizer)
    for sample in samples:
        config = runs.build_config(family=base["family"], preset=base["preset"], objectives=base["objectives"],
                                   training={**base["training"], **sample}, owner=owner)
        runs.check_tokenizer(config=config, tokenizer=tokenizer)


# -- create, cancel ----------------------------------------------------------------------------

def sweep_create(*, owner, name: str = "", kind: str, base: dict[str, Any], space: Any, metric: str = "loss",
                 direction: str = Direction.MINIMIZE, sampler: str = Sampler.TPE, pruner: str = Pruner.NONE,
                 prune_after_trials: int = 2, n_trials: int = 8, parallelism: int = 2, seed: int = 0) -> Sweep:
    """Validate everything, store the sweep, then queue its first trials (up to `parallelism`)."""
    if sampler not in Sampler.values:
        raise ConfigError(f"Choose a sampler among {', '.join(Sampler.values)}.")
    if pruner not in Pruner.values:
        raise ConfigError(f"Choose a pruner among {', '.join(Pruner.values)}.")
    if direction not in Direction.values:
        raise ConfigError("The direction is 'minimize' or 'maximize'.")
    metric = (metric or "").strip()
    if not metric:
        raise ConfigError("Name the validation metric to optimise (for example 'loss').")
    space = spaces.validate(space, kind=kind, sampler=sampler)
    if not 1 <= n_trials <= MAX_TRIALS:
        raise ConfigError(f"A sweep has between 1 and {MAX_TRIALS} trials.")
    if sampler == Sampler.GRID and n_trials > spaces.grid_size(space):
        raise ConfigError(f"The grid has {spaces.grid_size(space)} combinations, fewer than the {n_trials} trials "
                          f"asked; ask for at most {spaces.grid_size(space)}.")
    limit = settings.MAX_ACTIVE_RUNS_PER_USER
    if not 1 <= parallelism <= limit:
        raise ConfigError(f"Parallelism is the number of trials queued or running at once: between 1 and {limit} "
                          f"(the most runs one user may have at once).")
    _check_base(owner=owner, kind=kind, base=base, space=space)
    name = (name or "").strip() or f"{metric} sweep ({sampler}, {n_trials} trials)"
    with transaction.atomic():
        sweep = Sweep.objects.create(
            owner=owner, name=name[:200], kind=kind, base=base, space=space, metric=metric[:60], direction=direction,
            sampler=sampler, pruner=pruner, prune_after_trials=prune_after_trials, n_trials=n_trials,
            parallelism=parallelism, seed=seed,
        )
        sweep_id = sweep.pk
        transaction.on_commit(lambda: sweep_advance_or_fail(sweep_id=sweep_id))
    return sweep


def sweep_cancel(*, sweep: Sweep) -> Sweep:
    """No new trial starts; running trials are asked to stop (each saves a checkpoint first)."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().get(pk=sweep.pk)
        if sweep.status != SweepStatus.RUNNING:
            raise ConfigError(f"This sweep has already ended ({sweep.get_status_display().lower()}).")
        sweep.status, sweep.finished_at = SweepStatus.CANCELLED, timezone.now()
        sweep.save(update_fields=["status", "finished_at"])
        run_ids = list(sweep.trials.filter(state=TrialState.RUNNING, run__isnull=False).values_list("run_id", flat=True))
    for run in Run.objects.filter(pk__in=run_ids, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)):
        try:
            runs.run_cancel(run=run)
        except runs.RunStateError:
            pass  # it ended meanwhile
    sweep_advance(sweep_id=sweep.pk)  # records the trials that already ended
    sweep.refresh_from_db()
    return sweep


# -- advancing ---------------------------------------------------------------------------------

def sweep_advance_or_fail(*, sweep_id) -> bool:
    """sweep_advance, where a failure ends the sweep instead of coming back: the scheduler's
    periodic pass (and the first advance after creating a sweep) would otherwise retry the same
    crash every minute, and stop every other sweep behind it. The sweep is marked failed once,
    with the reason as a sentence; True when it advanced. The database away is no fault of the
    sweep's: that is left for the next pass to retry."""
    try:
        sweep_advance(sweep_id=sweep_id)
        return True
    except (OperationalError, InterfaceError):
        log.warning("Could not advance sweep %s (the database); the next pass retries", sweep_id, exc_info=True)
        return False
    except Exception as exc:  # noqa: BLE001 - any failure: recorded on the sweep, logged in full
        log.exception("Advancing sweep %s failed; the sweep is stopped", sweep_id)
        sweep_fail(sweep_id=sweep_id, reason=str(exc) if isinstance(exc, UserError) else (
            f"an internal error ({type(exc).__name__}), logged for the administrator"))
        return False


def sweep_fail(*, sweep_id, reason: str) -> None:
    """End a running sweep as failed, saying why (its trials' runs go on as runs of their own)."""
    Sweep.objects.filter(pk=sweep_id, status=SweepStatus.RUNNING).update(
        status=SweepStatus.FAILED, finished_at=timezone.now(),
        error=f"The sweep could not go on and was stopped: {reason}.".replace("..", "."))


def sweep_advance(*, sweep_id) -> None:
    """Record the trials whose run ended, queue new trials up to the parallelism, and end the
    sweep once every trial has. Called when a trial's run ends (in whichever process ended it)
    and right after the sweep is created; safe to call any time (the sweep row is locked)."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id).first()
        if sweep is None:
            return
        trials = list(sweep.trials.select_related("run").order_by("number"))
        for trial in trials:
            _sync(sweep, trial)
        if sweep.status == SweepStatus.RUNNING:
            _launch_more(sweep, trials)
        _update_best(sweep, trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if not running and sweep.status == SweepStatus.RUNNING and len(trials) >= sweep.n_trials:
            sweep.status, sweep.finished_at = SweepStatus.FINISHED, timezone.now()
            if sweep.best_trial_id is None:
                sweep.error = "No trial finished with a value of the metric, so there is no best trial."
            sweep.save(update_fields=["status", "finished_at", "error"])


def _launch_more(sweep: Sweep, trials: list[Trial]) -> None:
    while sum(t.state == TrialState.RUNNING for t in trials) < sweep.parallelism and len(trials) < sweep.n_trials:
        params, system_attrs = study.ask(sweep, trials)
        number = len(trials)
        try:
            with transaction.atomic():
                run = _create_run(sweep, number, params)
        except UserError as exc:
            if any(t.state == TrialState.RUNNING for t in trials):
                log.info("Sweep %s waits to launch trial %s: %s", sweep.pk, number, exc)
                return  # the next trial to end tries again
            sweep.status, sweep.finished_at = SweepStatus.FAILED, timezone.now()
            sweep.error = f"Trial {number} could not be launched: {exc}"
            sweep.save(update_fields=["status", "finished_at", "error"])
            return
        trials.append(Trial.objects.create(sweep=sweep, number=number, run=run, params=params,
                                           system_attrs=system_attrs))


def _create_run(sweep: Sweep, number: int, params: dict[str, Any]) -> Run:
    base = sweep.base
    name = f"{sweep.name} · trial {number}"
    training = {**length_from(base.get("training", {}), params), **params}  # a searched length replaces the other
    if sweep.kind == SweepKind.FINETUNE:
        checkpoint, dataset = _finetune_sources(sweep.owner, base)
        return runs.finetune_create(owner=sweep.owner, checkpoint=checkpoint, dataset=dataset, training=training,
                                    name=name)
    corpus, tokenizer = _pretrain_sources(sweep.owner, base)
    return runs.run_create(owner=sweep.owner, name=name, corpus=corpus, tokenizer=tokenizer, family=base["family"],
                           preset=base["preset"], objectives=base["objectives"], training=training)


def final_value(run: Run, metric: str) -> tuple[float | None, str]:
    """(the metric at the run's last validation, "") or (None, why there is none)."""
    reported: set[str] = set()
    for point in MetricPoint.objects.filter(run=run, split="valid").order_by("-step"):
        if metric in point.values:
            value = point.values[metric]
            if value is None:
                return None, f"The run's validation {metric} at step {point.step} was not a finite number."
            return float(value), ""
        reported.update(point.values)
    if not reported:
        return None, ("The run reported no validation metrics (set eval_every to at most max_steps, and give "
                      "the data a validation split).")
    return None, f"The run reported no validation '{metric}'; it reported: {', '.join(sorted(reported))}."


def _sync(sweep: Sweep, trial: Trial) -> None:
    """Record how a running (or pruned) trial's run ended; a failed trial whose run was resumed
    (a crashed run, from its page) runs again while the sweep does."""
    run = trial.run
    if (trial.state == TrialState.FAIL and run is not None and not run.is_finished
            and sweep.status == SweepStatus.RUNNING):
        trial.state, trial.note = TrialState.RUNNING, ""
        trial.save(update_fields=["state", "note"])
        return
    if trial.state in (TrialState.COMPLETE, TrialState.FAIL):
        return
    if run is None:
        trial.state, trial.note = TrialState.FAIL, "Its run was deleted."
    elif not run.is_finished:
        return
    elif trial.state == TrialState.PRUNED:
        return  # it stays pruned however its run ended
    elif run.status == RunStatus.SUCCEEDED:
        value, why = final_value(run, sweep.metric)
        if value is None:
            trial.state, trial.note = TrialState.FAIL, why
        else:
            trial.state, trial.value = TrialState.COMPLETE, value
    elif run.status == RunStatus.CANCELLED:
        trial.state, trial.note = TrialState.FAIL, "Its run was cancelled."
    else:
        trial.state = TrialState.FAIL
        trial.note = f"Its run {run.get_status_display().lower()}: {run.error}".rstrip(": ")
    trial.save(update_fields=["state", "value", "note"])


def _update_best(sweep: Sweep, trials: list[Trial]) -> None:
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    best = None
    if done:
        sign = 1 if sweep.direction == Direction.MINIMIZE else -1
        best = min(done, key=lambda t: (sign * t.value, t.number))  # a tie goes to the earlier trial
    best_id = best.pk if best else None
    if sweep.best_trial_id != best_id:
        sweep.best_trial_id = best_id
        sweep.save(update_fields=["best_trial"])


# -- pruning -----------------------------------------------------------------------------------

def report_validation(*, run_id, step: int, values: dict[str, float | None]) -> bool:
    """Record a trial's validation metric at `step`; when the sweep's pruner says so, mark the trial
    pruned and ask its run to stop (it ends cancelled, its log saying why). True when pruned."""
    trial = Trial.objects.select_related("sweep").filter(run_id=run_id, state=TrialState.RUNNING).first()
    if trial is None:
        return False
    sweep = trial.sweep
    value = values.get(sweep.metric)
    if value is None:
        return False
    trial.intermediate = {**trial.intermediate, str(int(step)): float(value)}
    Trial.objects.filter(pk=trial.pk).update(intermediate=trial.intermediate)
    if sweep.status != SweepStatus.RUNNING or sweep.pruner == Pruner.NONE:
        return False
    others = list(sweep.trials.exclude(pk=trial.pk))
    if not study.should_prune(sweep, trial, others):
        return False
    note = (f"Pruned at step {step}: its validation {sweep.metric} ({value:.4g}) was worse than the median of the "
            f"earlier trials at that step.")
    if not Trial.objects.filter(pk=trial.pk, state=TrialState.RUNNING).update(state=TrialState.PRUNED, note=note):
        return False
    Run.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(cancel_requested=True)
    line = LogLine.objects.create(run_id=run_id, text=f"The sweep “{sweep.name}” stopped this trial. {note}")
    send_run_event(run_id, {"type": "run.log", "id": line.id, "text": line.text, "time": line.created_at.isoformat()})
    return True
