"""Each stored metric point has a cursor (issue 44, point 3): its place in the order the run's points
were stored, given as it is stored, never given twice in a run (not even after a resume dropped the
points past its checkpoint), on the points of the API and of the socket; old points are numbered by
the migration in the order they were written. The socket's `?after=` is tested in test_ws.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.webapp.runs_helpers import make_run
from webapp.runs.models import MetricPoint, Run, RunStatus


def _cursors(run) -> list[tuple[int, str, int]]:
    return list(MetricPoint.objects.filter(run=run).order_by("seq").values_list("step", "split", "seq"))


@pytest.mark.django_db
def test_the_sink_gives_each_point_the_next_cursor_and_publishes_it(alice, monkeypatch):
    from webapp.runs import sink as sink_module

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    other = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    published = []
    monkeypatch.setattr(sink_module, "send_run_event", lambda run_id, payload: published.append(payload))
    sink = sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1")
    sink.metrics(1, "train", {"loss": 3.0})
    sink_module.DatabaseChannelsSink(other.id, claimed_by="me:1").metrics(1, "train", {"loss": 9.0})
    sink.metrics(1, "valid", {"loss": 3.5})
    sink.metrics(2, "train", {"loss": 2.0})
    sink.metrics(1, "valid", {"loss": 99.0})  # a step reported again: kept as stored, with its cursor
    assert _cursors(run) == [(1, "train", 1), (1, "valid", 2), (2, "train", 3)]
    assert _cursors(other) == [(1, "train", 1)]  # one count per run
    assert [(p["step"], p["split"], p["cursor"], p["values"]) for p in published if p["type"] == "run.metrics"] == [
        (1, "train", 1, {"loss": 3.0}), (1, "train", 1, {"loss": 9.0}), (1, "valid", 2, {"loss": 3.5}),
        (2, "train", 3, {"loss": 2.0}), (1, "valid", 2, {"loss": 3.5})]
    assert Run.objects.get(pk=run.pk).metrics_cursor == 3


@pytest.mark.django_db
def test_a_resume_never_gives_a_cursor_twice(alice):
    """The points past the checkpoint are dropped and logged again: with new cursors, so a client
    that read the dropped ones and reconnects with ?after= still gets the new ones."""
    from webapp.runs.execution import _prepare_history

    run = make_run(alice, status=RunStatus.RUNNING)
    for step in range(1, 6):
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": 1.0})
    _prepare_history(run, (3, Path("checkpoint-3")))
    MetricPoint.objects.create(run=run, step=4, split="train", values={"loss": 0.5})
    assert _cursors(run) == [(1, "train", 1), (2, "train", 2), (3, "train", 3), (4, "train", 6)]


@pytest.mark.django_db
def test_the_api_points_carry_their_cursor(alice, alice_api):
    run = make_run(alice, status=RunStatus.RUNNING)
    MetricPoint.objects.create(run=run, step=1, split="train", values={"loss": 2.0})
    MetricPoint.objects.create(run=run, step=1, split="valid", values={"loss": 2.5})
    points = alice_api.get(f"/api/runs/{run.id}/metrics/").json()["points"]
    assert [(p["step"], p["split"], p["cursor"]) for p in points] == [(1, "train", 1), (1, "valid", 2)]


@pytest.mark.django_db(transaction=True)
def test_the_migration_numbers_old_points_in_the_order_they_were_written():
    """runs.0008 (and 0009): each run's points get 1, 2, ... by step, then the training point before the
    validation point of its step (and any other split after them), and the run's counter the last one."""
    from tests.webapp.test_migration_family import _newest_before

    new = ("runs", "0009_metricpoint_seq_required")
    executor = MigrationExecutor(connection)
    others = [_newest_before(executor.loader.graph, leaf, new)
              for leaf in executor.loader.graph.leaf_nodes() if leaf[0] != "runs"]
    before, after = [("runs", "0007_checkpointexport_formats"), *others], [new, *others]
    executor.migrate(before)
    apps = executor.loader.project_state([n for n in before if n[1] is not None]).apps
    owner = apps.get_model("auth", "User").objects.create(username="old")
    corpus = apps.get_model("corpora", "Corpus").objects.create(owner=owner, name="c", original_filename="c.txt")
    tokenizer = apps.get_model("corpora", "Tokenizer").objects.create(owner=owner, corpus=corpus, name="t")
    OldRun, OldPoint = apps.get_model("runs", "Run"), apps.get_model("runs", "MetricPoint")
    runs = [OldRun.objects.create(owner=owner, name=f"old {i}", corpus=corpus, tokenizer=tokenizer, family="bert",
                                  preset="bert-tiny", objectives=["mlm"], config={}) for i in range(3)]
    # Written out of step order (a batch of points from before the sink wrote each as it came).
    for step, split in ((2, "valid"), (1, "train"), (2, "train"), (3, "test"), (1, "valid"), (3, "train")):
        OldPoint.objects.create(run=runs[0], step=step, split=split, values={"loss": 1.0})
    OldPoint.objects.create(run=runs[1], step=5, split="train", values={"loss": 1.0})
    MigrationExecutor(connection).migrate(after)
    apps = MigrationExecutor(connection).loader.project_state([n for n in after if n[1] is not None]).apps
    NewRun, NewPoint = apps.get_model("runs", "Run"), apps.get_model("runs", "MetricPoint")
    numbered = [list(NewPoint.objects.filter(run_id=r.pk).order_by("seq").values_list("step", "split", "seq"))
                for r in runs]
    assert numbered == [[(1, "train", 1), (1, "valid", 2), (2, "train", 3), (2, "valid", 4), (3, "train", 5),
                         (3, "test", 6)], [(5, "train", 1)], []]
    assert [NewRun.objects.get(pk=r.pk).metrics_cursor for r in runs] == [6, 1, 0]
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_the_api_gives_the_points_after_a_cursor(alice, alice_api):
    """GET /api/runs/<id>/metrics/?after=<cursor>: what a client that read up to that point has not
    seen, as on the socket (since=1 would skip step 1's validation point, stored after its training one)."""
    run = make_run(alice, status=RunStatus.RUNNING)
    for step, split in ((1, "train"), (1, "valid"), (2, "train")):
        MetricPoint.objects.create(run=run, step=step, split=split, values={"loss": 1.0})
    after = alice_api.get(f"/api/runs/{run.id}/metrics/?after=1").json()["points"]
    assert [(p["step"], p["split"], p["cursor"]) for p in after] == [(1, "valid", 2), (2, "train", 3)]
    assert alice_api.get(f"/api/runs/{run.id}/metrics/?after=3&since=0").json()["points"] == []
    assert alice_api.get(f"/api/runs/{run.id}/metrics/?after=-1").status_code == 400
