"""A sweep grid that cannot be enumerated (issue 22, point 5): grids past settings.SWEEP_MAX_GRID
combinations are refused at validation (API and form) by arithmetic, the grid never built; a
sweep whose advance fails in the scheduler's pass is failed once, with a sentence, not retried."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_data, make_run
from tests.webapp.test_sweeps import _sweep
from webapp.runs.models import Run, RunStatus
from webapp.sweeps import study
from webapp.sweeps.models import Sweep, SweepStatus

pytestmark = pytest.mark.django_db

# 12 settings x 64 values: inside the limits of 12 settings and 64 values each, and of each setting's bounds.
INTS = ["batch_size", "checkpoint_every", "eval_batches", "eval_every", "grad_accum", "log_every", "max_steps",
        "seed", "warmup_steps", "num_threads", "data_workers", "epochs"]
HUGE_GRID = [{"name": name, "values": list(range(1, 65))} for name in INTS]


@pytest.fixture
def no_grid_built(monkeypatch):
    """Building Optuna's grid sampler fails the test: the refusal must come from the arithmetic."""
    def refuse(*args, **kwargs):
        pytest.fail("the grid sampler was built")
    monkeypatch.setattr(study, "GridSampler", refuse)


def test_a_grid_of_64_to_the_12th_is_a_400_without_building_it(alice, alice_api, enqueued, no_grid_built):
    corpus, tokenizer = make_data(alice)
    base_run = make_run(alice, corpus=corpus, tokenizer=tokenizer)
    r = alice_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": HUGE_GRID, "sampler": "grid",
                                        "n_trials": 200}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"] == (
        f"The grid has {64**12:,} combinations ({' x '.join(['64'] * 12)} values), more than the 10,000 a grid sweep "
        "may have (SWEEP_MAX_GRID). List fewer values, or use the TPE or random sampler, which draw from the same "
        "values without listing every combination.")
    assert not Sweep.objects.exists() and not enqueued
    # the same values with TPE: nothing is listed, so they are fine
    r = alice_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": HUGE_GRID[:2], "sampler": "tpe",
                                        "n_trials": 2, "parallelism": 1}, format="json")
    assert r.status_code == 201, r.content


def test_the_limit_is_a_setting_and_the_form_says_it(alice, alice_client, enqueued, settings, no_grid_built):
    settings.SWEEP_MAX_GRID = 3
    corpus, tokenizer = make_data(alice)
    base_run = make_run(alice, corpus=corpus, tokenizer=tokenizer)
    form = {"base_run": str(base_run.id), "space": "lr = 1e-3, 2e-3\nwarmup_steps = 0, 2", "metric": "loss",
            "direction": "minimize", "sampler": "grid", "pruner": "none", "prune_after_trials": 2, "n_trials": 2,
            "parallelism": 2, "seed": 0}
    r = alice_client.post("/sweeps/new/", form)
    assert r.status_code == 200
    assert "The grid has 4 combinations (2 x 2 values), more than the 3 a grid sweep may have" in r.content.decode()
    assert not Sweep.objects.exists()


def test_a_sweep_that_fails_in_the_scheduler_is_failed_once_and_not_retried(
        alice, enqueued, monkeypatch, django_capture_on_commit_callbacks):
    from webapp.sweeps.tasks import advance_sweeps

    corpus, tokenizer = make_data(alice, real=True)
    broken = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                    name="broken")
    healthy = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                     name="healthy", n_trials=3)
    asked = []
    real_ask = study.ask

    def ask(sweep, trials):
        asked.append(sweep.name)
        if sweep.name == "broken":
            raise MemoryError  # what building a huge grid ended in
        return real_ask(sweep, trials)

    monkeypatch.setattr(study, "ask", ask)
    for sweep in (broken, healthy):  # a trial of each ends, without the signal: the pass finds it
        Run.objects.filter(pk=sweep.trials.get(number=0).run_id).update(status=RunStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        assert advance_sweeps() == 2
    broken.refresh_from_db()
    assert broken.status == SweepStatus.FAILED and broken.finished_at is not None
    assert broken.error == ("The sweep could not go on and was stopped: an internal error (MemoryError), logged for "
                            "the administrator.")
    assert sorted(asked) == ["broken", "healthy"] and healthy.trials.count() == 3  # the other sweep went on
    with django_capture_on_commit_callbacks(execute=True):
        assert advance_sweeps() == 1  # only the healthy one: the failed sweep is not retried
    assert sorted(asked) == ["broken", "healthy"]
    broken.refresh_from_db()
    assert broken.status == SweepStatus.FAILED


def test_a_sweep_whose_advance_killed_the_scheduler_is_failed_not_advanced_again(
        alice, enqueued, monkeypatch, django_capture_on_commit_callbacks):
    from webapp.runs.capacity import _redis
    from webapp.sweeps import tasks

    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks)
    key = f"{tasks.ADVANCING_PREFIX}{sweep.pk}"
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.advance_sweeps() == 1
    assert not _redis().exists(key)  # a pass that ends removes its marker
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.RUNNING

    _redis().set(key, "1", ex=60)  # what a pass killed while advancing it leaves behind
    monkeypatch.setattr(study, "ask", lambda *a, **kw: pytest.fail("the sweep was advanced again"))
    Run.objects.filter(pk=sweep.trials.get(number=0).run_id).update(status=RunStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.advance_sweeps() == 1
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.FAILED
    assert sweep.error == ("The sweep could not go on and was stopped: the scheduler stopped while advancing it (its "
                           "process was killed, most likely out of memory), so it is not advanced again.")
    assert not _redis().exists(key)
