"""run_execute for real, in-process: a tiny BERT trains on real shards, the sink fills the
database and the run's websocket group, and cancel/resume continue without duplicate steps."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from tests.webapp.runs_helpers import make_data, make_run
from webapp.runs import execution
from webapp.runs import services, sink as sink_module
from webapp.runs.models import LogLine, MetricPoint, Run, RunStatus


@pytest.fixture
def no_broker(monkeypatch):
    from webapp.runs import tasks

    calls = []
    monkeypatch.setattr(tasks.train_run, "apply_async", lambda *a, **kw: calls.append((a, kw)))
    return calls


def train_steps(run: Run) -> list[int]:
    return list(MetricPoint.objects.filter(run=run, split="train").order_by("step").values_list("step", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_real_run_fills_the_database_and_streams_to_the_websocket(alice, alice_client, no_broker):
    _, tokenizer = make_data(alice, real=True)
    run = make_run(alice, tokenizer=tokenizer)
    cookie = alice_client.cookies[settings.SESSION_COOKIE_NAME].value
    headers = [(b"origin", b"http://localhost"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())]

    async def go():
        comm = WebsocketCommunicator(application(), f"/ws/runs/{run.id}/", headers=headers)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        hello = await comm.receive_json_from(timeout=5)
        await database_sync_to_async(execution.run_execute)(run_id=run.id)
        received = []
        while True:
            message = await comm.receive_json_from(timeout=10)
            received.append(message)
            if message["type"] == "status" and message["finished"]:
                break
        await comm.disconnect()
        return hello, received

    hello, received = async_to_sync(go)()
    run.refresh_from_db()
    assert hello["status"] == "queued"
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.current_step == 20 and run.tokens_seen > 0 and run.finished_at and run.started_at

    # database: every logged step once, both splits, the checkpoints, the log
    assert train_steps(run) == [1, 5, 10, 15, 20]
    valid = list(MetricPoint.objects.filter(run=run, split="valid").values_list("step", flat=True))
    assert valid == [10, 20]
    first = MetricPoint.objects.get(run=run, split="train", step=1).values
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "grad_norm", "tokens_per_s", "mfu",
                "memory_mb", "progress", "eta_s"):
        assert key in first, key
    assert "perplexity" in MetricPoint.objects.get(run=run, split="valid", step=20).values
    ckpts = list(run.checkpoints.order_by("step"))
    assert [c.step for c in ckpts] == [10, 20]
    assert all((c.folder / "model.safetensors").is_file() for c in ckpts)
    assert ckpts[0].path == f"runs/{run.id}/checkpoints/step-00000010"
    assert ckpts[1].metrics["valid"]["loss"] > 0
    assert LogLine.objects.filter(run=run, text__startswith="Training bert-tiny").exists()

    # websocket: the sink's events, in order, as the dashboard reads them
    metrics = [(m["step"], m["split"]) for m in received if m["type"] == "metrics"]
    assert metrics == [(1, "train"), (5, "train"), (10, "train"), (10, "valid"), (15, "train"), (20, "train"),
                       (20, "valid")]
    assert [m["step"] for m in received if m["type"] == "checkpoint"] == [10, 20]
    assert any(m["type"] == "log" and "Finished at step 20" in m["text"] for m in received)
    statuses = [m["status"] for m in received if m["type"] == "status"]
    assert statuses[0] == "running" and statuses[-1] == "succeeded"
    loss = next(m for m in received if m["type"] == "metrics")["values"]["loss"]
    assert loss == MetricPoint.objects.get(run=run, split="train", step=1).values["loss"]


def application():
    from webapp.asgi import application as app

    return app


@pytest.mark.django_db
def test_cancel_stops_with_a_checkpoint_and_resume_continues_without_duplicate_steps(alice, monkeypatch, no_broker):
    _, tokenizer = make_data(alice, real=True)
    run = make_run(alice, tokenizer=tokenizer)
    monkeypatch.setattr(sink_module, "STOP_CHECK_EVERY_S", 0.0)  # read cancel_requested every step
    original = sink_module.DatabaseChannelsSink.heartbeat

    def heartbeat(self, step, tokens_seen):
        original(self, step, tokens_seen)
        if step == 7 and Run.objects.get(pk=self.run_id).status == RunStatus.RUNNING:
            services.run_cancel(run=Run.objects.get(pk=self.run_id))  # as if the Cancel button was pressed

    monkeypatch.setattr(sink_module.DatabaseChannelsSink, "heartbeat", heartbeat)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED, run.error
    assert not run.cancel_requested
    stopped_at = run.current_step
    assert 7 <= stopped_at <= 8
    assert list(run.checkpoints.values_list("step", flat=True)) == [stopped_at]
    assert (run.checkpoints.get().folder / "optimizer.pt").is_file()
    assert train_steps(run) == [1, 5]

    monkeypatch.setattr(sink_module.DatabaseChannelsSink, "heartbeat", original)
    services.run_resume(run=run)
    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.current_step == 20
    steps = train_steps(run)
    assert steps == [1, 5, 10, 15, 20] and len(steps) == len(set(steps))
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [stopped_at, 10, 20]
    assert LogLine.objects.filter(run=run, text__contains=f"from the checkpoint at step {stopped_at}").exists()
    assert LogLine.objects.filter(run=run, text__startswith=f"Resuming from step-{stopped_at:08d}").exists()
