"""Runs: launching (form, API, YAML), the registry's rules, state changes, ownership, crash reaping.

Training itself is faked here (test_runs_training.py trains for real).
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import timedelta

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs_helpers import TINY_TRAINING, make_checkpoint, make_data, make_run
from trainer.errors import ConfigError
from webapp.jobs.models import JobStatus
from webapp.runs import execution
from webapp.runs import selectors, services
from webapp.runs.models import LogLine, MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db


def create(owner, tokenizer, **training):
    return services.run_create(owner=owner, name="", corpus=None, tokenizer=tokenizer, family="bert",
                               preset="bert-tiny", objectives=["mlm", "nsp"], training=training)


# ---------------------------------------------------------------------------- services
def test_run_create_stores_the_config_and_enqueues_on_the_cpu_queue_after_commit(
        alice, enqueued, django_capture_on_commit_callbacks):
    corpus, tokenizer = make_data(alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = create(alice, tokenizer, max_steps=300, batch_size=8)
    assert run.status == RunStatus.QUEUED and run.queue == "cpu"
    assert run.corpus == corpus and run.max_steps == 300
    assert run.config["batch_size"] == 8 and run.config["preset"] == "bert-tiny"
    assert run.name == "bert-tiny on demo corpus"
    assert enqueued == [((), {"args": [str(run.id)], "queue": "cpu"})]


def test_run_create_picks_the_gpu_queue_for_cuda_and_the_setting_for_auto(alice, settings, enqueued):
    _, tokenizer = make_data(alice)
    assert create(alice, tokenizer, device="cuda").queue == "gpu"
    assert create(alice, tokenizer, device="auto").queue == "cpu"
    settings.RUN_DEFAULT_QUEUE = "gpu"
    assert create(alice, tokenizer, device="auto").queue == "gpu"
    assert create(alice, tokenizer, device="cpu").queue == "cpu"


def test_run_create_refuses_an_objective_set_the_registry_does_not_allow(alice, enqueued):
    _, tokenizer = make_data(alice)
    with pytest.raises(ConfigError, match="needs the Masked language modelling"):
        services.run_create(owner=alice, name="x", corpus=None, tokenizer=tokenizer, family="bert",
                            preset="bert-tiny", objectives=["nsp"], training={})
    with pytest.raises(ConfigError, match=r"BERT cannot be trained with Sentence order prediction \(SOP\)"):
        services.run_create(owner=alice, name="x", corpus=None, tokenizer=tokenizer, family="bert",
                            preset="bert-tiny", objectives=["mlm", "sop"], training={})
    with pytest.raises(ConfigError, match="Unknown objective 'xyz'"):
        services.run_create(owner=alice, name="x", corpus=None, tokenizer=tokenizer, family="bert",
                            preset="bert-tiny", objectives=["mlm", "xyz"], training={})
    assert not Run.objects.exists()


@pytest.mark.parametrize("problem, message", [
    ("foreign", "not yours"),
    ("not_ready", "is not ready yet"),
    ("bpe", "needs a wordpiece tokenizer"),
    ("bad_value", "max_steps must be between"),
    ("unknown_field", "Unknown config field: flux_capacitor"),
])
def test_run_create_explains_what_is_wrong(alice, bob, enqueued, problem, message):
    owner, training = alice, {}
    if problem == "foreign":
        _, tokenizer = make_data(bob)
    elif problem == "not_ready":
        _, tokenizer = make_data(alice, status=JobStatus.PROCESSING)
    elif problem == "bpe":
        _, tokenizer = make_data(alice, algorithm="bpe")
    else:
        _, tokenizer = make_data(alice)
        training = {"max_steps": 0} if problem == "bad_value" else {"flux_capacitor": 1}
    with pytest.raises(ConfigError, match=message):
        create(owner, tokenizer, **training)


def test_cancel_a_queued_run_at_once_and_ask_a_running_one_to_stop(alice, enqueued):
    queued = make_run(alice)
    assert services.run_cancel(run=queued).status == RunStatus.CANCELLED
    assert Run.objects.get(pk=queued.pk).finished_at is not None
    running = make_run(alice, status=RunStatus.RUNNING)
    running = services.run_cancel(run=running)
    assert running.status == RunStatus.RUNNING and running.cancel_requested
    with pytest.raises(services.RunStateError, match="already finished"):
        services.run_cancel(run=queued)


def test_resume_needs_a_stopped_run_with_a_checkpoint(alice, enqueued, django_capture_on_commit_callbacks):
    run = make_run(alice, status=RunStatus.CANCELLED, current_step=10)
    with pytest.raises(services.RunStateError, match="no checkpoint"):
        services.run_resume(run=run)
    make_checkpoint(run, step=10)
    with django_capture_on_commit_callbacks(execute=True):
        resumed = services.run_resume(run=run)
    assert resumed.status == RunStatus.QUEUED and not resumed.error and resumed.claimed_by == ""
    assert enqueued and enqueued[0][1]["args"] == [str(run.id)]
    with pytest.raises(services.RunStateError, match="this one is queued"):
        services.run_resume(run=resumed)


def test_a_resumed_run_shows_the_step_it_resumes_from_as_soon_as_it_is_queued(
        alice, alice_client, alice_api, enqueued, monkeypatch, django_capture_on_commit_callbacks):
    """Issue 29, point 6: crashed at step 37 with checkpoints at 10 and 20, it is queued at step 20
    (the page, the API and the status event say so) before any worker has picked it up."""
    run = make_run(alice, status=RunStatus.CRASHED, current_step=37)
    make_checkpoint(run, step=10), make_checkpoint(run, step=20)
    sent = []
    from webapp.runs import queueing

    monkeypatch.setattr(queueing, "send_run_event", lambda run_id, payload: sent.append(payload))
    with django_capture_on_commit_callbacks(execute=True):
        services.run_resume(run=run)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.current_step == 20
    assert [p["step"] for p in sent if p.get("type") == "run.status"] == [20]
    assert alice_api.get(f"/api/runs/{run.id}/").json()["current_step"] == 20
    assert run.log_lines.order_by("id").last().text == ("Resume requested from the checkpoint at step 20; "
                                                        "waiting for a worker.")
    assert 'id="run-step">step 20 / ' in alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()


def test_clone_copies_data_and_config_into_a_new_queued_run(alice, bob, enqueued):
    run = make_run(alice, status=RunStatus.SUCCEEDED, name="first")
    clone = services.run_clone(run=run, owner=alice)
    assert clone.pk != run.pk and clone.cloned_from == run and clone.status == RunStatus.QUEUED
    assert clone.name == "first (copy)" and clone.config == run.config and clone.tokenizer == run.tokenizer
    with pytest.raises(ConfigError):
        services.run_clone(run=run, owner=bob)


def test_reaper_marks_runs_with_an_old_heartbeat_as_crashed(alice, settings):
    settings.RUN_HEARTBEAT_TIMEOUT_S = 60
    old = timezone.now() - timedelta(seconds=300)
    stale = make_run(alice, status=RunStatus.RUNNING, heartbeat_at=old, started_at=old, claimed_by="host:1")
    fresh = make_run(alice, status=RunStatus.RUNNING, heartbeat_at=timezone.now(), started_at=old)
    out = io.StringIO()
    call_command("reap_runs", stdout=out)
    assert "Marked 1 run as crashed" in out.getvalue()
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == RunStatus.CRASHED and stale.finished_at is not None
    assert stale.error.startswith("The worker stopped sending heartbeats (last seen ")
    assert "host:1" in stale.error
    assert LogLine.objects.filter(run=stale, text=stale.error).exists()
    assert fresh.status == RunStatus.RUNNING


def stale_run(owner, **fields) -> Run:
    """A run marked running whose worker stopped sending heartbeats an hour ago."""
    old = timezone.now() - timedelta(hours=1)
    return make_run(owner, status=RunStatus.RUNNING, heartbeat_at=old, started_at=old, claimed_by="dead:1", **fields)


def test_reading_runs_never_writes(alice, alice_client, alice_api, settings):
    """Pages and the API only read, even with a run whose worker died (the reaper marks it)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.RUN_HEARTBEAT_TIMEOUT_S = 60
    run = stale_run(alice)
    make_checkpoint(run, step=10)
    LogLine.objects.create(run=run, text="Started.")
    urls = [reverse("runs:list"), reverse("runs:detail", args=[run.id]), reverse("runs:config-yaml", args=[run.id])]
    api = [f"/api/runs/{run.id}/{tail}" for tail in ("", "metrics/", "log/", "checkpoints/")] + ["/api/runs/"]
    with CaptureQueriesContext(connection) as queries:
        for url in urls:
            assert alice_client.get(url).status_code == 200, url
        for url in api:
            assert alice_api.get(url).status_code == 200, url
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and not LogLine.objects.filter(run=run, text__contains="heartbeats")


def test_the_periodic_task_reaps_stale_runs_and_the_list_then_shows_them(alice, alice_client, settings):
    from webapp.runs.tasks import reap_stale_runs

    settings.RUN_HEARTBEAT_TIMEOUT_S = 60
    run = stale_run(alice)
    assert reap_stale_runs.apply().get() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED and "dead:1" in run.error
    page = alice_client.get(reverse("runs:list"))
    assert 'class="badge crashed"' in page.content.decode()
    assert reap_stale_runs.apply().get() == 0


def test_celery_knows_every_task_and_beat_sends_the_reaper_to_its_own_queue(settings):
    from webapp.celery import app

    # What a fresh worker process registers (autodiscovery of <app>/tasks.py; here the tests have
    # imported some of them already).
    code = ("from webapp.celery import app; app.loader.import_default_modules(); "
            "print(' '.join(sorted(app.tasks)))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    names = {"trainer.tasks.ingest_corpus", "trainer.tasks.build_tokenizer", "trainer.tasks.train_run",
             "trainer.tasks.import_checkpoint", "webapp.runs.tasks.reap_stale_runs"}
    assert names <= set(done.stdout.split())
    entry = settings.CELERY_BEAT_SCHEDULE["reap-stale-runs"]
    assert entry["task"] == "webapp.runs.tasks.reap_stale_runs"
    assert 0 < entry["schedule"] <= settings.RUN_HEARTBEAT_TIMEOUT_S
    assert app.amqp.router.route({}, entry["task"])["queue"].name == "maintenance"
    assert app.amqp.router.route({}, "trainer.tasks.train_run")["queue"].name == "cpu"


def test_resuming_a_run_whose_worker_died_marks_it_crashed_then_queues_it(
        alice, alice_api, enqueued, settings, django_capture_on_commit_callbacks):
    settings.RUN_HEARTBEAT_TIMEOUT_S = 60
    run = stale_run(alice)
    make_checkpoint(run, step=10)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(f"/api/runs/{run.id}/resume/")
    assert response.status_code == 200, response.json()
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.claimed_by == "" and not run.error
    assert LogLine.objects.filter(run=run, text__startswith="The worker stopped sending heartbeats").exists()
    assert enqueued and enqueued[0][1]["args"] == [str(run.id)]
    alive = make_run(alice, status=RunStatus.RUNNING, heartbeat_at=timezone.now(), started_at=timezone.now())
    make_checkpoint(alive, step=10)
    response = alice_api.post(f"/api/runs/{alive.id}/resume/")
    assert response.status_code == 409 and "this one is running" in response.json()["error"]


def test_a_worker_given_a_dead_workers_run_marks_it_crashed_instead_of_training(alice, settings, monkeypatch):
    import trainer.training.engine

    monkeypatch.setattr(trainer.training.engine, "train", lambda *a, **k: pytest.fail("must not train"))
    settings.RUN_HEARTBEAT_TIMEOUT_S = 60
    run = stale_run(alice)
    execution.run_execute(run_id=run.id)  # e.g. the task redelivered after its worker was killed
    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED and run.claimed_by == "dead:1"


# ---------------------------------------------------------------------------- run_execute (fake engine)
@pytest.fixture
def fake_train(monkeypatch):
    """Replace the engine with a function the test provides."""
    import trainer.training.engine

    def install(fn):
        monkeypatch.setattr(trainer.training.engine, "train", fn)
    return install


def test_run_execute_records_success_and_every_event(alice, fake_train, tmp_path):
    from trainer.training.engine import TrainResult

    run = make_run(alice)

    def train(config, *, data_dir, out_dir, sink, should_stop, resume):
        assert config.max_steps == 20 and not resume and not should_stop()
        assert data_dir == run.tokenizer.folder and out_dir == run.folder
        for step in range(1, 21):
            sink.heartbeat(step, step * 100)
            if step % 5 == 0:
                sink.metrics(step, "train", {"loss": 10.0 / step, "lr": 1e-3, "grad_norm": float("nan")})
        sink.metrics(20, "valid", {"loss": 0.9, "perplexity": 2.5})
        folder = out_dir / "checkpoints" / "step-00000020"
        sink.checkpoint(20, folder, {"train": {"loss": 0.5}, "valid": {"loss": 0.9}})
        sink.close()
        return TrainResult(20, "succeeded", folder)

    fake_train(train)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.current_step == 20 and run.finished_at and not run.error
    assert run.claimed_by and run.started_at
    steps = list(MetricPoint.objects.filter(run=run, split="train").values_list("step", flat=True))
    assert steps == [5, 10, 15, 20]
    assert MetricPoint.objects.get(run=run, split="train", step=5).values["grad_norm"] is None  # NaN is stored as null
    ckpt = run.checkpoints.get()
    assert ckpt.step == 20 and ckpt.path == f"runs/{run.id}/checkpoints/step-00000020"
    assert ckpt.metrics == {"train": {"loss": 0.5}, "valid": {"loss": 0.9}}
    assert LogLine.objects.filter(run=run, text__startswith="Started on").exists()


def test_run_execute_turns_a_user_error_into_a_failed_run_with_its_message(alice, fake_train):
    def train(config, **kwargs):
        raise ConfigError("seq_len is too long for this model.")

    fake_train(train)
    run = make_run(alice)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error == "seq_len is too long for this model."


def test_run_execute_reports_a_bug_as_an_internal_error_with_the_traceback_in_the_log(alice, fake_train):
    def train(config, **kwargs):
        raise RuntimeError("boom")

    fake_train(train)
    run = make_run(alice)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error == "Training stopped with an internal error: RuntimeError: boom"
    assert LogLine.objects.filter(run=run, text__contains="Traceback").exists()


def test_a_redelivered_task_for_a_claimed_run_does_nothing(alice, fake_train):
    fake_train(lambda *a, **k: pytest.fail("must not train"))
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="other:1")
    execution.run_execute(run_id=run.id)
    execution.run_execute(run_id="00000000-0000-0000-0000-000000000000")  # deleted run
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.claimed_by == "other:1"


# ---------------------------------------------------------------------------- sink
def test_the_sink_stores_each_point_before_it_publishes_it_and_never_duplicates_a_step(alice, monkeypatch):
    from webapp.runs import sink as sink_module

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    stored_when_published = []
    monkeypatch.setattr(sink_module, "send_run_event", lambda run_id, payload: stored_when_published.append(
        MetricPoint.objects.filter(run_id=run_id, step=payload["step"], split=payload["split"]).exists()))
    sink = sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1", clock=lambda: 0.0)
    sink.metrics(1, "train", {"loss": 3.0})
    sink.metrics(2, "train", {"loss": 2.0})
    assert MetricPoint.objects.count() == 2 and stored_when_published == [True, True]
    sink.metrics(2, "train", {"loss": 99.0})  # a resumed run reporting a stored step again
    assert MetricPoint.objects.filter(step=2).get().values == {"loss": 2.0}


def test_the_heartbeat_writes_at_most_every_two_seconds(alice):
    from webapp.runs.sink import DatabaseChannelsSink

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    now = [10.0]
    sink = DatabaseChannelsSink(run.id, claimed_by="me:1", clock=lambda: now[0])
    sink.heartbeat(1, 10)
    now[0] = 11.0
    sink.heartbeat(2, 20)
    assert Run.objects.get(pk=run.pk).current_step == 1
    now[0] = 12.5
    sink.heartbeat(3, 30)
    assert Run.objects.get(pk=run.pk).current_step == 3
    now[0] = 13.0
    sink.heartbeat(4, 40)  # held back by the interval ...
    assert Run.objects.get(pk=run.pk).tokens_seen == 30
    sink.close()  # ... and written as the run ends: a run shorter than the interval still counts its tokens
    run.refresh_from_db()
    assert (run.current_step, run.tokens_seen) == (4, 40)


def test_rank_zero_reports_its_last_heartbeat_when_it_closes():
    """A multi-device run's task learns its tokens from rank 0's heartbeat lines; a run that ended
    within the interval of its first beat recorded 0 tokens (seen in CI on a quiet machine)."""
    import io
    import json

    from trainer.training.sinks import JsonLinesSink

    out = io.StringIO()
    sink = JsonLinesSink(out, heartbeat_every_s=3600)
    sink.heartbeat(1, 64)
    sink.heartbeat(2, 128)
    sink.heartbeat(3, 192)
    sink.close()
    beats = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(b["step"], b["tokens_seen"]) for b in beats] == [(1, 64), (3, 192)]


def test_should_stop_reads_the_row_at_most_once_a_second(alice, django_assert_num_queries):
    from webapp.runs.sink import StopCheck

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    now = [0.0]
    check = StopCheck(run.id, claimed_by="me:1", clock=lambda: now[0])
    with django_assert_num_queries(1):
        assert check() is False
        assert check() is False
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    now[0] = 0.5
    assert check() is False  # cached
    now[0] = 1.2
    assert check() is True


# ---------------------------------------------------------------------------- pages
def test_new_run_page_is_generated_from_the_registry_with_tiny_defaults(alice, alice_client):
    corpus, tokenizer = make_data(alice)
    page = alice_client.get(reverse("runs:new") + f"?tokenizer={tokenizer.id}")
    assert page.status_code == 200
    html = page.content.decode()
    form = page.context["form"]
    assert form["tokenizer"].value() == tokenizer.id and form["corpus"].value() == corpus.id
    assert form["preset"].value() == "bert-tiny" and form["max_steps"].value() == 500
    assert form["batch_size"].value() == 16 and form["seq_len"].value() == 128
    assert 'data-family="bert"' in html and "L2 H128 A2" in html
    assert 'value="nsp"' in html and "Masked language modelling (MLM)" in html
    assert 'id="registry-data"' in html and 'max="10000000"' in html


def post_form(client, tokenizer, /, **changes):
    data = {"name": "from the form", "corpus": tokenizer.corpus_id, "tokenizer": tokenizer.id,
            "family": "bert", "preset": "bert-tiny", "objectives": ["mlm", "nsp"], "max_steps": 120,
            "batch_size": 16, "seq_len": 64, "lr": 1e-4, "warmup_steps": 10, "grad_accum": 1, "eval_every": 50,
            "checkpoint_every": 60, "masking": "dynamic", "seed": 3, "device": "cpu", "mask_prob": 0.15,
            "schedule": "linear", "weight_decay": 0.01, "clip_grad": 1.0, "eval_batches": 5, "log_every": 10,
            "precision": "auto", "num_threads": 0}
    data.update(changes)
    return client.post(reverse("runs:new"), {k: v for k, v in data.items() if v is not None})


def test_launching_from_the_form_creates_the_run_and_opens_its_dashboard(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[run.id])
    assert run.name == "from the form" and run.config["max_steps"] == 120 and run.config["seed"] == 3
    assert run.objectives == ["mlm", "nsp"] and run.queue == "cpu"


@pytest.mark.parametrize("changes, field, message", [
    ({"objectives": ["nsp"]}, "objectives", "BERT needs the Masked language modelling (MLM) objective."),
    ({"objectives": ["mlm", "sop"]}, "objectives", "BERT cannot be trained with Sentence order prediction (SOP)."),
    ({"objectives": ["mlm", "xyz"]}, "objectives", "xyz is not one of the available choices"),
    ({"preset": "bert-huge"}, "preset", "bert-huge is not one of the available choices"),
    ({"warmup_steps": 500}, "warmup_steps", "must not be larger than max_steps"),
    ({"seq_len": 4096}, "seq_len", "seq_len must be between 16 and the model's 512 positions"),
    ({"batch_size": 0}, "batch_size", "batch_size must be between 1 and 8,192, not 0."),  # the config's sentence
])
def test_the_form_refuses_what_the_trainer_cannot_run_with_a_clear_message(
        alice, alice_client, enqueued, changes, field, message):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer, **changes)
    assert response.status_code == 200
    errors = " ".join(response.context["form"].errors.get(field, []))
    assert message in errors
    assert message.split(" (")[0].replace("'", "&#x27;") in response.content.decode()
    assert not Run.objects.exists()


def test_the_form_reports_every_problem_at_once(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer, corpus=None, tokenizer=None, objectives=["nsp"])
    errors = response.context["form"].errors
    assert "This field is required." in errors["corpus"] and "This field is required." in errors["tokenizer"]
    assert "BERT needs the Masked language modelling (MLM) objective." in errors["objectives"]


def test_the_form_refuses_a_tokenizer_of_another_corpus(alice, alice_client, enqueued):
    corpus_a, _ = make_data(alice, name="a")
    _, tokenizer_b = make_data(alice, name="b")
    response = post_form(alice_client, tokenizer_b, corpus=corpus_a.id)
    assert "trained on another corpus" in " ".join(response.context["form"].errors["tokenizer"])


def test_the_form_only_offers_your_ready_tokenizers(alice, bob, alice_client, enqueued):
    _, bobs = make_data(bob)
    _, pending = make_data(alice, status=JobStatus.PROCESSING, name="pending")
    html = alice_client.get(reverse("runs:new")).content.decode()
    assert str(bobs.id) not in html and str(pending.id) not in html
    response = post_form(alice_client, bobs)
    assert "tokenizer" in response.context["form"].errors


def test_dashboard_shows_state_checkpoints_and_serves_plotly_locally(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING, current_step=10)
    ckpt = make_checkpoint(run, step=10)
    LogLine.objects.create(run=run, text="Validation at step 10: loss 7.2.")
    page = alice_client.get(reverse("runs:detail", args=[run.id]))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'class="badge running"' in html and "step 10 / 20" in html
    assert f"{reverse('explorer:index')}?checkpoint={ckpt.id}" in html
    assert "Validation at step 10" in html and "js/run_dashboard.js" in html
    assert reverse("runs:plotly-js") in html
    assert not re.search(r'<script[^>]*\bsrc="(?:https?:)?//', html)  # no script from another host (a CDN)
    for chart in ("loss", "mlm_acc", "nsp_acc", "lr", "grad_norm", "tokens_per_s", "mfu", "memory_mb"):
        assert f'id="chart-{chart}"' in html
    js = alice_client.get(reverse("runs:plotly-js"))
    assert js.status_code == 200 and js["Content-Type"].startswith("text/javascript")
    assert "max-age=31536000" in js["Cache-Control"]
    assert b"plotly" in b"".join(js.streaming_content)[:2000].lower()


def test_run_list_shows_status_and_progress(alice, alice_client):
    make_run(alice, name="half way", status=RunStatus.RUNNING, current_step=10, heartbeat_at=timezone.now())
    html = alice_client.get(reverse("runs:list")).content.decode()
    assert "half way" in html and 'class="badge running"' in html and "step 10 / 20" in html
    assert "width: 50.0%" in html


def test_cancel_resume_and_clone_buttons(alice, alice_client, enqueued):
    run = make_run(alice, status=RunStatus.RUNNING)
    alice_client.post(reverse("runs:cancel", args=[run.id]))
    run.refresh_from_db()
    assert run.cancel_requested
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    make_checkpoint(run, step=10)
    page = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="resume-form"' in page and 'id="resume-form" hidden' not in page.replace("\n", " ")
    response = alice_client.post(reverse("runs:resume", args=[run.id]), follow=True)
    assert "continues from its last checkpoint" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    response = alice_client.post(reverse("runs:clone", args=[run.id]))
    clone = Run.objects.exclude(pk=run.pk).get()
    assert response["Location"] == reverse("runs:detail", args=[clone.id]) and clone.cloned_from_id == run.id
    response = alice_client.post(reverse("runs:resume", args=[clone.id]), follow=True)
    assert "Only a cancelled, crashed or failed run can be resumed" in response.content.decode()


def test_export_yaml_then_import_it_on_the_new_run_page(alice, alice_client):
    run = make_run(alice, name="exported")
    response = alice_client.get(reverse("runs:config-yaml", args=[run.id]))
    assert response.status_code == 200 and 'filename="exported.yaml"' in response["Content-Disposition"]
    data = yaml.safe_load(response.content)
    assert data["max_steps"] == 20 and data["model_overrides"] == {"hidden_size": 64, "num_heads": 2}
    upload = io.BytesIO(response.content)
    upload.name = "exported.yaml"
    page = alice_client.post(reverse("runs:new"), {"config_file": upload})
    assert page.status_code == 200
    form = page.context["form"]
    assert form["max_steps"].value() == 20 and form["seq_len"].value() == 32 and form["device"].value() == "cpu"
    assert json.loads(form["extra_settings"].value()) == {"model_overrides": {"hidden_size": 64, "num_heads": 2}}
    assert "Settings loaded from exported.yaml" in page.content.decode()


def test_a_form_launch_keeps_settings_imported_from_yaml(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer, extra_settings='{"model_overrides": {"hidden_size": 64, "num_heads": 2}}')
    assert response.status_code == 302
    assert Run.objects.get().config["model_overrides"] == {"hidden_size": 64, "num_heads": 2}


@pytest.mark.parametrize("content, message", [
    (b"max_steps: [1, 2\n", "The file is not valid YAML"),
    (b"- just\n- a list\n", "must hold a mapping of settings"),
    (b"max_steps: 100\nwarp_factor: 9\n", "Unknown config field: warp_factor."),
    (b"\xff\xfe\x00binary", "not UTF-8 text"),
])
def test_importing_a_bad_yaml_says_what_is_wrong(alice_client, content, message):
    upload = io.BytesIO(content)
    upload.name = "bad.yaml"
    page = alice_client.post(reverse("runs:new"), {"config_file": upload})
    assert page.status_code == 200
    assert message in " ".join(page.context["import_form"].errors["config_file"])


# ---------------------------------------------------------------------------- API
def test_api_launch_with_defaults_and_with_fields(alice, alice_api, enqueued):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["config"]["max_steps"] == 500 and body["config"]["preset"] == "bert-tiny"
    assert body["config"]["objectives"] == ["mlm", "nsp"] and body["dashboard_url"] == f"/runs/{body['id']}/"
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "name": "api run", "max_steps": 77,
                                             "objectives": ["mlm"], "lr": 3e-4, "masking": "static"}, format="json")
    assert response.status_code == 201
    config = response.json()["config"]
    assert (config["max_steps"], config["objectives"], config["lr"], config["masking"]) == (77, ["mlm"], 3e-4, "static")


def test_api_launch_from_yaml_with_field_overrides(alice, alice_api, enqueued):
    _, tokenizer = make_data(alice)
    text = "name: from yaml\nmax_steps: 42\nwarmup_steps: 4\nseq_len: 64\nmodel_overrides: {num_layers: 1}\ncorpus: /some/file.txt\n"
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "config_yaml": text, "seq_len": 48},
                              format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "from yaml"
    assert (body["config"]["max_steps"], body["config"]["seq_len"]) == (42, 48)
    assert body["config"]["model_overrides"] == {"num_layers": 1}


@pytest.mark.parametrize("payload, message", [
    ({"objectives": ["nsp"]}, "BERT needs the Masked language modelling (MLM) objective."),
    ({"preset": "bert-huge"}, "Unknown BERT preset 'bert-huge'"),
    ({"max_steps": 0}, "max_steps: max_steps must be between 1 and 10,000,000, not 0."),  # the config's sentence
    ({"config_yaml": "max_steps: [1,"}, "The file is not valid YAML"),
    ({"family": "gpt9"}, "Unknown family 'gpt9'"),
    ({"model_overrides": {"hidden_size": 10**9, "num_heads": 1}}, "model_overrides.hidden_size = 1,000,000,000 gives"),
])
def test_api_refuses_bad_launches_with_a_sentence(alice, alice_api, enqueued, payload, message):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), **payload}, format="json")
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert not Run.objects.exists()


def test_api_refuses_another_users_tokenizer(alice, bob, alice_api, enqueued):
    _, bobs = make_data(bob)
    response = alice_api.post("/api/runs/", {"tokenizer": str(bobs.id)}, format="json")
    assert response.status_code == 400 and "No tokenizer of yours" in response.json()["error"]


def test_api_run_detail_metrics_since_and_checkpoints(alice, alice_api):
    run = make_run(alice, status=RunStatus.RUNNING, current_step=30)
    for step in (10, 20, 30):
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": 1.0 / step})
    MetricPoint.objects.create(run=run, step=20, split="valid", values={"loss": 0.2})
    make_checkpoint(run, step=20)
    detail = alice_api.get(f"/api/runs/{run.id}/").json()
    assert detail["status"] == "running" and detail["current_step"] == 30 and detail["max_steps"] == 20
    assert detail["last_checkpoint"]["step"] == 20 and detail["config"]["seq_len"] == 32
    everything = alice_api.get(f"/api/runs/{run.id}/metrics/").json()
    assert [(p["step"], p["split"]) for p in everything["points"]] == [(10, "train"), (20, "train"),
                                                                        (20, "valid"), (30, "train")]
    since = alice_api.get(f"/api/runs/{run.id}/metrics/?since=10").json()
    assert [(p["step"], p["split"]) for p in since["points"]] == [(20, "train"), (20, "valid"), (30, "train")]
    assert since["last_step"] == 30
    assert alice_api.get(f"/api/runs/{run.id}/metrics/?since=30").json()["points"] == []
    assert alice_api.get(f"/api/runs/{run.id}/metrics/?since=soon").status_code == 400
    ckpts = alice_api.get(f"/api/runs/{run.id}/checkpoints/").json()
    assert [c["step"] for c in ckpts] == [20] and ckpts[0]["files_present"] is False
    listing = alice_api.get("/api/runs/").json()
    assert [r["id"] for r in listing] == [str(run.id)]


def test_api_log_after_an_id(alice, alice_api, bob_api):
    run = make_run(alice)
    lines = [LogLine.objects.create(run=run, text=f"line {i}") for i in range(3)]
    body = alice_api.get(f"/api/runs/{run.id}/log/?after={lines[0].id}").json()
    assert [line["text"] for line in body] == ["line 1", "line 2"] and body[0]["id"] == lines[1].id
    assert len(alice_api.get(f"/api/runs/{run.id}/log/").json()) == 3
    assert bob_api.get(f"/api/runs/{run.id}/log/").status_code == 404


def test_api_cancel_resume_clone_and_config_yaml(alice, alice_api, enqueued):
    run = make_run(alice)
    assert alice_api.post(f"/api/runs/{run.id}/cancel/").json()["status"] == "cancelled"
    response = alice_api.post(f"/api/runs/{run.id}/cancel/")
    assert response.status_code == 409 and "already finished" in response.json()["error"]
    response = alice_api.post(f"/api/runs/{run.id}/resume/")
    assert response.status_code == 409 and "no checkpoint to resume from" in response.json()["error"]
    make_checkpoint(run, step=10)
    assert alice_api.post(f"/api/runs/{run.id}/resume/").json()["status"] == "queued"
    clone = alice_api.post(f"/api/runs/{run.id}/clone/", {"name": "again"}, format="json")
    assert clone.status_code == 201 and clone.json()["name"] == "again"
    assert clone.json()["cloned_from"] == str(run.id)
    text = alice_api.get(f"/api/runs/{run.id}/config.yaml")
    assert text.status_code == 200 and text["Content-Type"].startswith("application/yaml")
    from trainer.config import RunConfig

    assert RunConfig.from_yaml(text.content.decode()).to_dict() == run.config


def test_api_registry_lists_architectures_presets_objectives_and_defaults(alice_api):
    body = alice_api.get("/api/registry/").json()
    bert = body["families"][0]
    assert bert["name"] == "bert" and "bert-tiny" in [p["name"] for p in bert["presets"]]
    assert bert["required_objectives"] == ["mlm"] and body["fields"]["max_steps"]["min"] == 1
    assert body["launch_defaults"]["max_steps"] == 500


# ---------------------------------------------------------------------------- ownership
def test_bob_gets_404_for_everything_of_alices_run(alice, bob_client, bob_api, enqueued):
    run = make_run(alice)
    make_checkpoint(run, step=10)
    for name in ("runs:detail", "runs:config-yaml"):
        assert bob_client.get(reverse(name, args=[run.id])).status_code == 404
    for name in ("runs:cancel", "runs:resume", "runs:clone"):
        assert bob_client.post(reverse(name, args=[run.id])).status_code == 404
    assert bob_client.get(reverse("runs:new") + f"?from={run.id}").status_code == 404
    for suffix in ("", "metrics/", "checkpoints/", "log/", "config.yaml"):
        response = bob_api.get(f"/api/runs/{run.id}/{suffix}")
        assert response.status_code == 404, suffix
        assert response.json() == {"error": "Not found. It does not exist, or it is not yours."}
    for action in ("cancel", "resume", "clone"):
        assert bob_api.post(f"/api/runs/{run.id}/{action}/").status_code == 404
    assert bob_api.get("/api/runs/").json() == []
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and Run.objects.count() == 1


def test_anonymous_visitors_are_sent_to_log_in_or_refused(alice, client, anon_api):
    run = make_run(alice)
    response = client.get(reverse("runs:detail", args=[run.id]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert client.get(reverse("runs:list")).status_code == 302
    assert anon_api.get(f"/api/runs/{run.id}/").status_code in (401, 403)
    assert anon_api.post("/api/runs/", {}, format="json").status_code in (401, 403)


def test_selectors_hide_other_users_runs(alice, bob):
    run = make_run(alice)
    assert list(selectors.runs_for(bob)) == []
    from django.http import Http404

    with pytest.raises(Http404):
        selectors.run_get(bob, run.id)
    with pytest.raises(Http404):
        selectors.run_get(alice, "not-a-uuid")
    ckpt = make_checkpoint(run)
    assert selectors.checkpoint_get(alice, ckpt.id) == ckpt
    with pytest.raises(Http404):
        selectors.checkpoint_get(bob, ckpt.id)
    assert list(selectors.checkpoints_for(bob)) == [] and list(selectors.checkpoints_for(alice)) == [ckpt]


def test_training_settings_roundtrip_through_build_config():
    config = services.build_config(family="bert", preset="bert-tiny", objectives=["mlm"],
                                   training=dict(TINY_TRAINING))
    assert services.training_settings(config)["model_overrides"] == {"hidden_size": 64, "num_heads": 2}


def test_admin_lists_runs_metric_points_and_checkpoints(alice, django_user_model, client):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")
    client.force_login(admin)
    run = make_run(alice)
    MetricPoint.objects.create(run=run, step=1, split="train", values={"loss": 1.0})
    make_checkpoint(run)
    for url in ("/admin/runs/run/", f"/admin/runs/run/{run.id}/change/", "/admin/runs/metricpoint/",
                "/admin/runs/checkpoint/", "/admin/runs/logline/"):
        assert client.get(url).status_code == 200, url
