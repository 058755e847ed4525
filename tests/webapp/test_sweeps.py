"""Sweeps with the database: creation (API and form), advancing as trials' runs end, the pruner
stopping a run through its sink, and ownership on every page and endpoint."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_data, make_run
from webapp.runs import execution, queueing
from webapp.runs import services as run_services
from webapp.runs.models import LogLine, MetricPoint, Run, RunStatus
from webapp.runs.sink import DatabaseChannelsSink
from webapp.sweeps import services
from webapp.sweeps.models import Sweep, SweepStatus, Trial, TrialState

pytestmark = pytest.mark.django_db

SPACE = [{"name": "lr", "values": [1e-3, 2e-3]}, {"name": "warmup_steps", "values": [0, 2]}]


def _sweep(owner, run, captured, **fields) -> Sweep:
    kind, base = services.base_from_run(owner=owner, run=run)
    with captured(execute=True):
        return services.sweep_create(owner=owner, kind=kind, base=base, **{
            "space": SPACE, "sampler": "grid", "n_trials": 4, "parallelism": 2, **fields})


def _end(run: Run, status: str, loss: float | None = None) -> None:
    """What a worker's end of the run does: the row finished, then run_ended's listeners."""
    if loss is not None:
        MetricPoint.objects.create(run=run, step=20, split="valid", values={"loss": loss})
    Run.objects.filter(pk=run.pk).update(status=status)
    queueing.announce_end(run.pk, status)


def test_a_sweep_queues_parallelism_trials_then_one_per_ended_trial_and_picks_the_best(
        alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    base_run = make_run(alice, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED)
    sweep = _sweep(alice, base_run, django_capture_on_commit_callbacks)
    trials = list(sweep.trials.order_by("number"))
    assert [t.state for t in trials] == ["running", "running"]
    assert len(enqueued) == 2  # two runs queued, like any run
    combos = set()
    for loss, trial in zip([3.0, 2.0], trials):
        run = trial.run
        assert run.owner == alice and run.status == RunStatus.QUEUED and "trial" in run.name
        assert run.config["lr"] == trial.params["lr"] and run.config["warmup_steps"] == trial.params["warmup_steps"]
        combos.add((trial.params["lr"], trial.params["warmup_steps"]))
        with django_capture_on_commit_callbacks(execute=True):
            _end(run, RunStatus.SUCCEEDED, loss)
    trials = list(sweep.trials.order_by("number"))
    assert [t.state for t in trials] == ["complete", "complete", "running", "running"]
    assert [t.value for t in trials[:2]] == [3.0, 2.0]
    with django_capture_on_commit_callbacks(execute=True):
        _end(trials[2].run, RunStatus.SUCCEEDED, 1.5)
        _end(trials[3].run, RunStatus.FAILED)
    sweep.refresh_from_db()
    trials = list(sweep.trials.order_by("number"))
    combos |= {(t.params["lr"], t.params["warmup_steps"]) for t in trials[2:]}
    assert len(combos) == 4  # the grid's four combinations, each once
    assert trials[3].state == "fail" and "failed" in trials[3].note
    assert sweep.status == SweepStatus.FINISHED and sweep.best_trial.number == 2 and sweep.best_trial.value == 1.5
    assert len(enqueued) == 4


def test_maximize_picks_the_highest(alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                   direction="maximize", n_trials=2)
    for loss, trial in zip([3.0, 2.0], sweep.trials.order_by("number")):
        with django_capture_on_commit_callbacks(execute=True):
            _end(trial.run, RunStatus.SUCCEEDED, loss)
    sweep.refresh_from_db()
    assert sweep.best_trial.value == 3.0


def test_a_trial_without_the_metric_fails_with_a_sentence(alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                   metric="accuracy", n_trials=1, parallelism=1)
    trial = sweep.trials.get()
    with django_capture_on_commit_callbacks(execute=True):
        _end(trial.run, RunStatus.SUCCEEDED, 2.0)
    trial.refresh_from_db()
    sweep.refresh_from_db()
    assert trial.state == "fail" and "no validation 'accuracy'; it reported: loss" in trial.note
    assert sweep.status == SweepStatus.FINISHED and "no best trial" in sweep.error


def test_the_pruner_stops_a_trial_whose_validation_metric_is_worse_than_the_median(
        alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                   pruner="median", prune_after_trials=2, sampler="random", n_trials=6,
                   space=[{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True}])
    first, second = sweep.trials.order_by("number")
    for trial, loss in ((first, 2.0), (second, 3.0)):
        sink = DatabaseChannelsSink(trial.run_id, claimed_by="w")
        sink.metrics(10, "valid", {"loss": loss})  # no finished trial yet: nothing to compare with
        with django_capture_on_commit_callbacks(execute=True):
            _end(trial.run, RunStatus.SUCCEEDED, loss)
    third = sweep.trials.get(number=2)
    Run.objects.filter(pk=third.run_id).update(status=RunStatus.RUNNING, claimed_by="w")
    sink = DatabaseChannelsSink(third.run_id, claimed_by="w")
    sink.metrics(10, "train", {"loss": 9.0})  # training metrics are not the pruner's business
    third.refresh_from_db()
    assert third.state == "running" and third.intermediate == {}
    sink.metrics(10, "valid", {"loss": 2.2})  # better than the median (2.5): goes on
    third.refresh_from_db()
    assert third.state == "running" and third.intermediate == {"10": 2.2}
    assert not Run.objects.get(pk=third.run_id).cancel_requested
    fourth = sweep.trials.get(number=3)
    Run.objects.filter(pk=fourth.run_id).update(status=RunStatus.RUNNING, claimed_by="w")
    DatabaseChannelsSink(fourth.run_id, claimed_by="w").metrics(10, "valid", {"loss": 4.0})
    fourth.refresh_from_db()
    run = Run.objects.get(pk=fourth.run_id)
    assert fourth.state == "pruned" and "Pruned at step 10" in fourth.note
    assert run.cancel_requested  # the engine's should_stop() sees it
    assert LogLine.objects.filter(run=run, text__contains="stopped this trial").exists()
    with django_capture_on_commit_callbacks(execute=True):
        _end(run, RunStatus.CANCELLED)
    fourth.refresh_from_db()
    assert fourth.state == "pruned"  # not a failure: the pruner's doing


def test_cancel_stops_the_running_trials_and_starts_no_more(alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        services.sweep_cancel(sweep=sweep)
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.CANCELLED
    assert set(Run.objects.filter(sweep_trial__sweep=sweep).values_list("status", flat=True)) == {"cancelled"}
    assert sweep.trials.count() == 2 and set(sweep.trials.values_list("state", flat=True)) == {"fail"}


def test_the_api_creates_reads_and_refuses_with_sentences(alice, bob, alice_api, bob_api, enqueued,
                                                         django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    base_run = make_run(alice, corpus=corpus, tokenizer=tokenizer)
    with django_capture_on_commit_callbacks(execute=True):
        r = alice_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": "lr = 1e-4 .. 1e-2 log",
                                            "sampler": "random", "n_trials": 3, "parallelism": 2}, format="json")
    assert r.status_code == 201, r.content
    sweep_id = r.json()["id"]
    body = alice_api.get(f"/api/sweeps/{sweep_id}/").json()
    assert body["kind"] == "pretrain" and len(body["trials"]) == 2 and body["trials"][0]["run_url"]
    assert alice_api.get("/api/sweeps/").json()[0]["id"] == sweep_id
    # from explicit fields, as POST /api/runs/ takes them
    with django_capture_on_commit_callbacks(execute=True):
        r = alice_api.post("/api/sweeps/", {"base": {"tokenizer": str(tokenizer.id), "max_steps": 10, "batch_size": 4,
                                                     "seq_len": 32, "warmup_steps": 2, "device": "cpu"},
                                            "space": [{"name": "lr", "values": [1e-3, 2e-3]}], "sampler": "grid",
                                            "n_trials": 2, "parallelism": 1}, format="json")
    assert r.status_code == 201, r.content
    assert Sweep.objects.get(pk=r.json()["id"]).trials.get().run.config["max_steps"] == 10
    # refusals
    r = alice_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": [{"name": "hidden", "values": [1]}]},
                       format="json")
    assert r.status_code == 400 and "not a setting" in r.json()["error"]
    r = alice_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": "lr = 1e-3, 2e-3", "sampler": "grid",
                                        "n_trials": 5}, format="json")
    assert r.status_code == 400 and "The grid has 2 combinations" in r.json()["error"]
    # Bob sees none of it and cannot start from Alice's run
    assert bob_api.get(f"/api/sweeps/{sweep_id}/").status_code == 404
    assert bob_api.post(f"/api/sweeps/{sweep_id}/cancel/").status_code == 404
    assert bob_api.get("/api/sweeps/").json() == []
    r = bob_api.post("/api/sweeps/", {"base_run": str(base_run.id), "space": "lr = 1e-3, 2e-3"}, format="json")
    assert r.status_code == 400 and "not yours" in r.json()["error"]
    r = alice_api.post(f"/api/sweeps/{sweep_id}/cancel/")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    r = alice_api.post(f"/api/sweeps/{sweep_id}/cancel/")
    assert r.status_code == 400 and "already ended" in r.json()["error"]


def test_the_pages_create_show_and_guard_a_sweep(alice, alice_client, bob_client, enqueued,
                                                 django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    base_run = make_run(alice, corpus=corpus, tokenizer=tokenizer, name="the base")
    page = alice_client.get(f"/sweeps/new/?from={base_run.id}")
    assert page.status_code == 200 and b"the base" in page.content
    form = {"base_run": str(base_run.id), "space": "lr = 1e-3, 2e-3\nwarmup_steps = 0 .. 3", "metric": "loss",
            "direction": "minimize", "sampler": "grid", "pruner": "none", "prune_after_trials": 2, "n_trials": 2,
            "parallelism": 2, "seed": 0}
    r = alice_client.post("/sweeps/new/", form)
    assert r.status_code == 200 and "grid sampler needs a list" in r.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        r = alice_client.post("/sweeps/new/", {**form, "space": "lr = 1e-3, 2e-3", "name": "my sweep"})
    assert r.status_code == 302
    sweep = Sweep.objects.get(name="my sweep")
    page = alice_client.get(f"/sweeps/{sweep.id}/").content.decode()
    assert 'id="trials-table"' in page and "sweep-parcoords" in page and page.count('data-trial="') == 2
    assert "my sweep" in alice_client.get("/sweeps/").content.decode()
    trial_run = sweep.trials.get(number=0).run
    assert f'href="/sweeps/{sweep.id}/">trial 0 of a sweep' in alice_client.get(f"/runs/{trial_run.id}/").content.decode()
    assert 'id="run-sweep"' not in alice_client.get(f"/runs/{base_run.id}/").content.decode()
    assert bob_client.get(f"/sweeps/{sweep.id}/").status_code == 404
    assert bob_client.post(f"/sweeps/{sweep.id}/cancel/").status_code == 404
    r = bob_client.post("/sweeps/new/", {**form, "space": "lr = 1e-3, 2e-3"})
    assert r.status_code == 200 and "not yours" in r.content.decode()
    assert Trial.objects.filter(sweep__owner__username="bob").count() == 0
    assert TrialState.RUNNING in sweep.trials.values_list("state", flat=True)


def test_the_periodic_pass_fails_a_trial_whose_run_was_deleted_and_launches_the_next(
        alice, enqueued, django_capture_on_commit_callbacks):
    from webapp.sweeps.tasks import advance_sweeps

    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                   n_trials=3)
    sweep.trials.get(number=0).run.delete()  # no run_ended for this one
    with django_capture_on_commit_callbacks(execute=True):
        assert advance_sweeps() == 1
    states = dict(sweep.trials.values_list("number", "state"))
    assert states == {0: "fail", 1: "running", 2: "running"}
    assert sweep.trials.get(number=0).note == "Its run was deleted."


def test_a_real_trial_is_pruned_by_its_own_validation_and_stops_within_a_step(alice, enqueued, monkeypatch,
                                                                            django_capture_on_commit_callbacks):
    """The engine, the sink, the pruner and StopCheck together: earlier trials reached a loss of 0.01
    at step 5, so this trial's first validation (step 5) is far worse, and the run stops at once."""
    from tests.webapp.runs_helpers import TINY_TRAINING
    from webapp.runs import sink as sink_module

    monkeypatch.setattr(sink_module, "STOP_CHECK_EVERY_S", 0.0)
    corpus, tokenizer = make_data(alice, real=True)
    sweep = Sweep.objects.create(owner=alice, name="prune", kind="pretrain", base={}, metric="loss",
                                 space=[{"name": "lr", "values": [1e-3, 2e-3, 3e-3]}], sampler="grid",
                                 pruner="median", prune_after_trials=2, n_trials=3, parallelism=1)
    for number in (0, 1):
        Trial.objects.create(sweep=sweep, number=number, params={"lr": 1e-3 * (number + 1)}, state="complete",
                             value=0.01, intermediate={"5": 0.01, "10": 0.01})
    run = make_run(alice, corpus=corpus, tokenizer=tokenizer, config={**make_run(alice).config,
                                                                      **TINY_TRAINING, "eval_every": 5})
    trial = Trial.objects.create(sweep=sweep, number=2, run=run, params={"lr": 3e-3})
    with django_capture_on_commit_callbacks(execute=True):
        execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    trial.refresh_from_db()
    sweep.refresh_from_db()
    assert trial.state == "pruned" and list(trial.intermediate) == ["5"], trial.note
    assert run.status == RunStatus.CANCELLED and 5 <= run.current_step <= 6, (run.status, run.current_step)
    assert sweep.status == SweepStatus.FINISHED and sweep.best_trial.number == 0


def test_a_fine_tuning_sweep_launches_fine_tuning_trials(alice, eager, enqueued, django_capture_on_commit_callbacks):
    from tests.webapp.test_runs_finetune import FAST, ready_demo, tiny_checkpoint
    from webapp.runs.models import RunKind

    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    checkpoint = tiny_checkpoint(alice)
    with django_capture_on_commit_callbacks(execute=True):
        base_run = run_services.finetune_create(owner=alice, checkpoint=checkpoint, dataset=dataset, training=FAST)
    kind, base = services.base_from_run(owner=alice, run=base_run)
    assert kind == "finetune" and base["training"]["max_steps"] == 6
    with pytest.raises(Exception, match="not a setting"):
        services.sweep_create(owner=alice, kind=kind, base=base, space=[{"name": "warmup_steps", "values": [1, 2]}])
    with django_capture_on_commit_callbacks(execute=True):
        sweep = services.sweep_create(owner=alice, kind=kind, base=base, metric="accuracy", direction="maximize",
                                      space=[{"name": "llrd", "values": [0.8, 1.0]}], sampler="grid", n_trials=2)
    runs = [t.run for t in sweep.trials.order_by("number")]
    assert [r.kind for r in runs] == [RunKind.FINETUNE] * 2
    assert sorted(r.config["llrd"] for r in runs) == [0.8, 1.0]
    assert all(r.dataset_id == dataset.id and r.base_checkpoint_id == checkpoint.id for r in runs)


def test_a_crashed_trial_fails_and_runs_again_when_its_run_is_resumed(alice, enqueued,
                                                                      django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice, real=True)
    sweep = _sweep(alice, make_run(alice, corpus=corpus, tokenizer=tokenizer), django_capture_on_commit_callbacks,
                   n_trials=2)
    first = sweep.trials.get(number=0)
    Run.objects.filter(pk=first.run_id).update(error="The worker stopped sending heartbeats.")
    with django_capture_on_commit_callbacks(execute=True):
        _end(first.run, RunStatus.CRASHED)
    first.refresh_from_db()
    assert first.state == "fail" and "crashed: The worker stopped" in first.note
    Run.objects.filter(pk=first.run_id).update(status=RunStatus.QUEUED)  # what run_resume does
    services.sweep_advance(sweep_id=sweep.pk)
    first.refresh_from_db()
    assert first.state == "running" and first.note == ""
    with django_capture_on_commit_callbacks(execute=True):
        _end(first.run, RunStatus.SUCCEEDED, 1.0)
    first.refresh_from_db()
    assert first.state == "complete" and first.value == 1.0
