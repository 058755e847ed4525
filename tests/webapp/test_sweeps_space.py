"""Sweeps without a database: the search space's validation and parsing, and Optuna's sampler and
pruner as webapp.sweeps.study wires them to a sweep's rows."""
from __future__ import annotations

import itertools

import pytest

from trainer.errors import ConfigError
from webapp.sweeps import space as spaces
from webapp.sweeps import study
from webapp.sweeps.models import Sweep, Trial, TrialState


def test_a_space_is_validated_and_typed_as_the_settings_are():
    space = spaces.validate([{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True},
                             {"name": "batch_size", "values": ["8", 16.0]},
                             {"name": "warmup_steps", "low": 0, "high": 10}], kind="pretrain", sampler="tpe")
    assert space[1] == {"name": "batch_size", "values": [8, 16]}
    assert space[2] == {"name": "warmup_steps", "low": 0, "high": 10, "log": False}
    dists = spaces.distributions(space, kind="pretrain")
    assert type(dists["lr"]).__name__ == "FloatDistribution" and dists["lr"].log
    assert type(dists["warmup_steps"]).__name__ == "IntDistribution"
    assert type(dists["batch_size"]).__name__ == "CategoricalDistribution"


@pytest.mark.parametrize("space, sampler, words", [
    ([], "tpe", "empty"),
    ([{"name": "hidden_size", "values": [64]}], "tpe", "not a setting"),
    ([{"name": "device", "values": ["cpu"]}], "tpe", "not a setting"),
    ([{"name": "lr", "low": 1e-3, "high": 1e-2}], "grid", "grid sampler needs a list"),
    ([{"name": "lr", "low": 0, "high": 1e-2, "log": True}], "tpe", "above 0"),
    ([{"name": "lr", "low": 1e-2, "high": 1e-3}], "tpe", "must be below"),
    ([{"name": "batch_size", "low": 4.5, "high": 16}], "tpe", "whole number"),
    ([{"name": "batch_size", "values": [8, 8]}], "tpe", "repeat"),
    ([{"name": "lr", "values": [1e-3]}, {"name": "lr", "values": [1e-4]}], "tpe", "twice"),
    ([{"name": "batch_size", "values": ["eight"]}], "tpe", "not a valid value"),
    ([{"name": "lr"}], "tpe", "either a list of values or a low and a high"),
    ([{"name": "lr", "values": [1e-3, 2.0]}], "tpe", r"lr must be between 1e-07 and 1, not 2\."),  # the schema's bounds
])
def test_a_bad_space_is_refused_with_a_sentence(space, sampler, words):
    with pytest.raises(ConfigError, match=words):
        spaces.validate(space, kind="pretrain", sampler=sampler)


def test_fine_tuning_sweeps_vary_the_fine_tuning_settings():
    assert spaces.validate([{"name": "llrd", "values": [0.8, 1.0]}], kind="finetune", sampler="grid")
    with pytest.raises(ConfigError, match="not a setting"):
        spaces.validate([{"name": "warmup_steps", "values": [1]}], kind="finetune", sampler="grid")
    with pytest.raises(ConfigError, match=r"llrd must be above 0 and at most 1, not 0\."):  # fine-tuning's bounds
        spaces.validate([{"name": "llrd", "low": 0.0, "high": 1.0}], kind="finetune", sampler="tpe")


def test_the_forms_text_parses_ranges_and_lists():
    parsed = spaces.parse_text("lr = 1e-4 .. 1e-2 log\n# a comment\nbatch_size: 8, 16\nwarmup_steps = 0 .. 10\n")
    assert parsed == [{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True},
                      {"name": "batch_size", "values": [8, 16]},
                      {"name": "warmup_steps", "low": 0.0, "high": 10.0, "log": False}]
    assert spaces.parse_text(spaces.to_text(parsed)) == parsed
    with pytest.raises(ConfigError, match="Line 1"):
        spaces.parse_text("lr 1e-3")


def _sweep(**fields) -> Sweep:
    return Sweep(**{"kind": "pretrain", "metric": "loss", "direction": "minimize", "sampler": "random",
                    "pruner": "none", "n_trials": 4, "parallelism": 2, "seed": 0, "prune_after_trials": 2, **fields})


def _ask_all(sweep: Sweep, n: int) -> list[Trial]:
    trials: list[Trial] = []
    for number in range(n):
        params, attrs = study.ask(sweep, trials)
        trials.append(Trial(number=number, params=params, system_attrs=attrs, state=TrialState.RUNNING))
    return trials


def test_the_grid_sampler_asks_every_combination_once_across_rebuilt_studies():
    space = [{"name": "batch_size", "values": [4, 8]}, {"name": "lr", "values": [1e-3, 3e-3, 1e-2]}]
    sweep = _sweep(sampler="grid", space=space, n_trials=6)
    asked = [(t.params["batch_size"], t.params["lr"]) for t in _ask_all(sweep, 6)]
    assert sorted(asked) == sorted(itertools.product([4, 8], [1e-3, 3e-3, 1e-2]))


def test_the_random_sampler_stays_in_bounds_differs_per_trial_and_repeats_with_the_seed():
    space = [{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True}, {"name": "warmup_steps", "low": 0, "high": 50,
                                                                       "log": False}]
    first = [t.params for t in _ask_all(_sweep(space=space), 4)]
    assert all(1e-4 <= p["lr"] <= 1e-2 and isinstance(p["warmup_steps"], int) for p in first)
    assert len({p["lr"] for p in first}) == 4
    assert [t.params for t in _ask_all(_sweep(space=space), 4)] == first
    assert [t.params for t in _ask_all(_sweep(space=space, seed=1), 4)] != first


def test_tpe_samples_from_finished_trials():
    space = [{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True}]
    sweep = _sweep(sampler="tpe", space=space, n_trials=12)
    trials = [Trial(number=i, params={"lr": lr}, state=TrialState.COMPLETE, value=abs(lr - 2e-3))
              for i, lr in enumerate([1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2])]
    params, _ = study.ask(sweep, trials)
    assert 1e-4 <= params["lr"] <= 1e-2
    assert type(study.sampler_for(sweep, 6)).__name__ == "TPESampler"


def _done(number: int, value_at_10: float) -> Trial:
    return Trial(number=number, params={"lr": 1e-3}, state=TrialState.COMPLETE, value=value_at_10,
                 intermediate={"10": value_at_10})


@pytest.mark.parametrize("direction, current, pruned", [
    ("minimize", 3.0, True), ("minimize", 1.2, False), ("maximize", 3.0, False), ("maximize", 0.5, True),
])
def test_the_median_pruner_compares_with_earlier_trials_at_the_same_step(direction, current, pruned):
    sweep = _sweep(pruner="median", direction=direction, space=[{"name": "lr", "values": [1e-3]}])
    others = [_done(0, 1.0), _done(1, 2.0)]
    trial = Trial(number=2, params={"lr": 1e-3}, state=TrialState.RUNNING, intermediate={"10": current})
    assert study.should_prune(sweep, trial, others) is pruned


def test_no_pruning_without_a_pruner_or_before_enough_trials_finished():
    space = [{"name": "lr", "values": [1e-3]}]
    trial = Trial(number=2, params={"lr": 1e-3}, state=TrialState.RUNNING, intermediate={"10": 9.0})
    others = [_done(0, 1.0), _done(1, 2.0)]
    assert not study.should_prune(_sweep(pruner="none", space=space), trial, others)
    assert not study.should_prune(_sweep(pruner="median", prune_after_trials=3, space=space), trial, others)
