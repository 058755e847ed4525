"""The run page's side of checkpoint retention (webapp.runs.retention, trainer.training.retention):
what each checkpoint holds and its size, Pin / Unpin, and the rows of removed checkpoints going."""
from __future__ import annotations

import json
import shutil

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from trainer.training import retention
from trainer.training.sinks import JsonLinesSink
from webapp.runs.models import Checkpoint, CheckpointExport, RunStatus

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_what_each_checkpoint_holds_its_size_and_pins_it(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING)
    old, new = make_checkpoint(run, step=10, real=True), make_checkpoint(run, step=20, real=True)
    (old.folder / retention.OPTIMIZER_NAME).unlink()  # what retention leaves in an older checkpoint
    size = retention.human_size(retention.describe(new.folder)["size_bytes"])
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert "<th>Holds</th>" in html.replace(' title="What the folder holds: the weights, and in the newest the '
                                            'optimizer state a resume needs"', "")
    rows = {c: html[html.index(f'data-step="{c.step}"'):] for c in (old, new)}
    assert rows[old].index("<td class=\"small\" data-holds>weights</td>") < rows[old].index("</tr>")
    assert rows[new].index("weights + optimizer state") < rows[new].index("</tr>")
    assert f"data-size>{size}</td>" in rows[new]
    assert "The run keeps its last 3 checkpoints, the best by validation loss and the pinned ones" in html

    page = alice_client.post(reverse("runs:checkpoint-pin", args=[old.id]), {"pin": "1"}, follow=True)
    assert "Step 10 is pinned: it stays whatever keep_last says." in page.content.decode()
    assert retention.read_pins(run.folder) == {10}
    html = page.content.decode()
    assert "weights · <b data-pinned>pinned</b>" in html and ">Unpin</button>" in html

    alice_client.post(reverse("runs:checkpoint-pin", args=[old.id]), {"pin": "0"})
    assert retention.read_pins(run.folder) == set()


def test_a_pin_of_a_step_retention_removed_is_refused_with_a_sentence(alice, alice_client, bob_client):
    run = make_run(alice, status=RunStatus.RUNNING)
    gone = make_checkpoint(run, step=10, real=True)
    shutil.rmtree(gone.folder)  # removed by the trainer; its sink has not told the web app yet
    page = alice_client.post(reverse("runs:checkpoint-pin", args=[gone.id]), {"pin": "1"}, follow=True)
    assert ("The checkpoint of step 10 is no longer on disk: the run&#x27;s retention removed it (it keeps the last "
            "keep_last checkpoints, the best and the pinned ones), so it cannot be pinned.") in page.content.decode()
    assert retention.read_pins(run.folder) == set()
    assert bob_client.post(reverse("runs:checkpoint-pin", args=[gone.id]), {"pin": "1"}).status_code == 404


def test_the_sink_drops_the_rows_and_exports_of_removed_checkpoints_and_tells_the_page(alice, monkeypatch):
    from webapp.runs import sink as sink_module

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    for step in (10, 20, 30):
        make_checkpoint(run, step=step)
    removed = Checkpoint.objects.get(run=run, step=10)
    CheckpointExport.objects.create(owner=alice, checkpoint=removed, path=f"{removed.path}/exports/hf")
    events = []
    monkeypatch.setattr(sink_module, "send_run_event", lambda run_id, payload: events.append(payload))
    sink = sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1", clock=lambda: 0.0)
    sink.checkpoints_removed([10, 99])
    assert sorted(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [20, 30]
    assert not CheckpointExport.objects.exists()
    assert events == [{"type": "run.checkpoints_removed", "steps": [10]}]


def test_a_multi_device_runs_removals_reach_the_sink_through_its_event_lines(alice):
    import io

    from webapp.runs.multiproc import _Relay

    lines = io.StringIO()
    JsonLinesSink(lines).checkpoints_removed([4, 6])

    class Recorder:
        removed: list = []

        def checkpoints_removed(self, steps):
            self.removed.extend(steps)

    relay = _Relay(Recorder(), step=0, tokens_seen=0)
    relay.line(lines.getvalue().strip())
    assert relay.sink.removed == [4, 6]
    assert json.loads(lines.getvalue()) == {"event": "checkpoints_removed", "steps": [4, 6]}


def test_a_live_checkpoint_event_says_what_it_holds_and_where_to_pin_it(alice):
    from webapp.runs.sink import checkpoint_event

    run = make_run(alice, status=RunStatus.RUNNING)
    ckpt = make_checkpoint(run, step=10, real=True)
    event = checkpoint_event(ckpt)
    assert event["holds"] == "weights + optimizer state"
    assert event["size"] == retention.human_size(retention.describe(ckpt.folder)["size_bytes"])
    assert event["pin_url"] == reverse("runs:checkpoint-pin", args=[ckpt.id])


def test_launching_a_fine_tuning_run_pins_its_base_checkpoint(alice, eager, enqueued,
                                                             django_capture_on_commit_callbacks):
    from webapp.datasets import services as dataset_services
    from webapp.runs import services

    with django_capture_on_commit_callbacks(execute=True):
        dataset = dataset_services.dataset_create_demo(owner=alice, name="classification")
    dataset.refresh_from_db()
    run = make_run(alice, status=RunStatus.SUCCEEDED)
    base = make_checkpoint(run, step=10, real=True)
    services.finetune_create(owner=alice, checkpoint=base, dataset=dataset,
                             training={"max_steps": 4, "batch_size": 4, "max_length": 32})
    assert retention.read_pins(run.folder) == {10}  # its run's retention never takes what this run reads


def test_retention_leaves_a_checkpoint_alone_while_it_is_exported(alice, monkeypatch):
    import trainer.export
    from trainer.errors import ExportError
    from webapp.runs import exports

    run = make_run(alice, status=RunStatus.RUNNING)
    old, _ = make_checkpoint(run, step=10, real=True), make_checkpoint(run, step=20, real=True)
    export = CheckpointExport.objects.create(owner=alice, checkpoint=old, path=f"{old.path}/exports/hf")
    during = []

    def writer(checkpoint_dir, out_dir, **kwargs):  # the trainer saves (and prunes) while the export writes
        during.append(retention.prune(run.folder, keep_last=1))
        raise ExportError("stopped here by the test")

    monkeypatch.setattr(trainer.export, "exporter", lambda fmt: writer)
    with pytest.raises(ExportError):
        exports.write_archive(export)
    assert during[0].busy == [10] and during[0].removed == [] and old.folder.is_dir()
    assert retention.prune(run.folder, keep_last=1).removed == [10]  # the next save after the export


def test_a_training_runs_removed_checkpoints_leave_the_database_and_the_page(alice, alice_client, monkeypatch):
    from tests.webapp.runs_helpers import TINY_TRAINING, prepared_data
    from trainer.config import RunConfig
    from trainer.training.engine import train
    from webapp.runs import sink as sink_module

    events = []
    monkeypatch.setattr(sink_module, "send_run_event", lambda run_id, payload: events.append(payload))
    config = RunConfig(**{**TINY_TRAINING, "max_steps": 6, "checkpoint_every": 2, "eval_every": 100,
                          "warmup_steps": 1, "keep_last": 1, "num_threads": 1})
    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1", config=config.to_dict())
    train(config, data_dir=prepared_data()[1], out_dir=run.folder,
          sink=sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1", clock=lambda: 0.0))
    assert list(run.checkpoints.values_list("step", flat=True)) == [6]
    assert [e["steps"] for e in events if e["type"] == "run.checkpoints_removed"] == [[2], [4]]
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'data-step="6"' in html and 'data-step="2"' not in html and 'data-step="4"' not in html
    assert "The run keeps its last 1 checkpoint, the best by validation loss and the pinned ones" in html


def test_the_run_socket_passes_removals_on_to_the_page():
    import asyncio

    from webapp.runs.consumers import RunConsumer

    sent = []
    consumer = RunConsumer()

    async def send_json(content, close=False):
        sent.append(content)

    consumer.send_json = send_json
    asyncio.run(consumer.run_checkpoints_removed({"type": "run.checkpoints_removed", "steps": [2, 4]}))
    assert sent == [{"type": "checkpoints_removed", "steps": [2, 4]}]
