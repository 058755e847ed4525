"""Optuna, wired to a sweep's rows: its sampler, its pruner, and an in-memory study rebuilt from
the Trial rows (webapp.sweeps.models says why the rows, not Optuna's RDBStorage, are the storage).

Rebuilding is cheap (a sweep has tens of trials) and makes every decision a pure function of
the rows: the sampler that picks trial N is seeded with (sweep seed, N) (the grid's order with the
sweep's seed alone), so two sweeps with the
same seed and the same results ask the same settings.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

import optuna
from optuna.pruners import BasePruner, MedianPruner, NopPruner
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState as OptunaState, create_trial

from webapp.sweeps import space as spaces
from webapp.sweeps.models import Pruner, Sampler, Sweep, Trial, TrialState

optuna.logging.set_verbosity(logging.WARNING)

_STATES = {TrialState.RUNNING: OptunaState.RUNNING, TrialState.COMPLETE: OptunaState.COMPLETE,
           TrialState.PRUNED: OptunaState.PRUNED, TrialState.FAIL: OptunaState.FAIL}


def sampler_for(sweep: Sweep, number: int) -> BaseSampler:
    """The sampler that picks trial `number` (seeded with the sweep's seed and the number)."""
    seed = sweep.seed * 100_003 + number
    if sweep.sampler == Sampler.GRID:
        # The grid's order is a shuffle seeded once per sweep: every rebuilt study must see the same
        # one, since the grid sampler picks the combinations no added trial (its grid_id) holds.
        return GridSampler({e["name"]: e["values"] for e in sweep.space}, seed=sweep.seed)
    if sweep.sampler == Sampler.RANDOM:
        return RandomSampler(seed=seed)
    # Optuna's default of 10 random trials first would leave a small sweep all random.
    return TPESampler(seed=seed, n_startup_trials=max(1, min(10, sweep.n_trials // 2)))


def pruner_for(sweep: Sweep) -> BasePruner:
    if sweep.pruner == Pruner.MEDIAN:
        return MedianPruner(n_startup_trials=sweep.prune_after_trials, n_warmup_steps=0)
    return NopPruner()


def frozen(trial: Trial, distributions: dict[str, Any]) -> FrozenTrial:
    state = _STATES[TrialState(trial.state)]
    return create_trial(
        state=state,
        params={k: v for k, v in trial.params.items() if k in distributions},
        distributions={k: d for k, d in distributions.items() if k in trial.params},
        value=trial.value if state == OptunaState.COMPLETE else None,
        intermediate_values={int(step): value for step, value in trial.intermediate.items() if value is not None},
        system_attrs=dict(trial.system_attrs),
    )


def build(sweep: Sweep, trials: Iterable[Trial], *, number: int = 0) -> optuna.Study:
    """An in-memory study holding `trials` (a completed one needs its value), sampling trial `number`."""
    study = optuna.create_study(direction=sweep.direction, sampler=sampler_for(sweep, number),
                                pruner=pruner_for(sweep))
    distributions = spaces.distributions(sweep.space, kind=sweep.kind)
    for trial in trials:
        if trial.state == TrialState.COMPLETE and trial.value is None:
            continue
        study.add_trial(frozen(trial, distributions))
    return study


def ask(sweep: Sweep, trials: list[Trial]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings of the next trial, given the sweep's trials so far; returns (params, system_attrs)."""
    study = build(sweep, trials, number=len(trials))
    trial = study.ask(fixed_distributions=spaces.distributions(sweep.space, kind=sweep.kind))
    asked = study.get_trials(deepcopy=False)[-1]
    return dict(trial.params), {k: v for k, v in asked.system_attrs.items() if _json_safe(v)}


def should_prune(sweep: Sweep, trial: Trial, others: list[Trial]) -> bool:
    """Whether the sweep's pruner stops `trial` (running, its intermediate values up to now) given
    the sweep's other trials."""
    if sweep.pruner == Pruner.NONE or not trial.intermediate:
        return False
    study = build(sweep, others)
    distributions = spaces.distributions(sweep.space, kind=sweep.kind)
    current = frozen(trial, distributions)
    current.number = len(others)
    return bool(study.pruner.prune(study, current))


def _json_safe(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False
