"""Checkpoint retention (trainer.training.retention): a run keeps its last keep_last checkpoints,
the best by validation loss and the pinned ones; only the newest keeps the optimizer state; a
removal never leaves a folder that looks whole, nor takes one that is being read."""
from __future__ import annotations

import json

import pytest

from trainer.errors import UserError
from trainer.export import export_checkpoint
from trainer.training import retention
from trainer.training.checkpoints import OPTIMIZER_NAME, list_checkpoints
from trainer.training.engine import train
from trainer.training.sinks import ListSink


class PinningSink(ListSink):
    """Pins a step as soon as it is reported, as a user does from the run page while the run trains."""

    def __init__(self, out, step):
        super().__init__()
        self.out, self.pin_step = out, step

    def checkpoint(self, step, path, metrics):
        super().checkpoint(step, path, metrics)
        if step == self.pin_step:
            retention.pin(self.out, step)


def steps_on_disk(out):
    return [s for s, _ in list_checkpoints(out)]


def with_optimizer(out):
    return [s for s, f in list_checkpoints(out) if (f / OPTIMIZER_NAME).is_file()]


def test_a_run_keeps_its_last_checkpoints_and_the_pinned_one_and_resumes_from_the_newest(
        make_config, tokenizer_dir, tmp_path):
    out = tmp_path / "run"
    sink = PinningSink(out, 2)
    config = make_config(max_steps=10, checkpoint_every=2, eval_every=100, keep_last=2, warmup_steps=1)
    train(config, data_dir=tokenizer_dir, out_dir=out, sink=sink)
    assert steps_on_disk(out) == [2, 8, 10]  # 2 pinned while it was the newest; no validation: no best
    assert sorted(sink.removed) == [4, 6]
    assert any(line == "Removed step-00000004 (keep_last 2; the best and pinned ones stay)." for line in sink.lines)
    assert with_optimizer(out) == [10]
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".removing-")]

    resumed = ListSink()
    train(make_config(max_steps=12, checkpoint_every=2, eval_every=100, keep_last=2, warmup_steps=1),
          data_dir=tokenizer_dir, out_dir=out, sink=resumed, resume=True)
    assert "Resuming from step-00000010 (step 10)." in resumed.lines
    assert steps_on_disk(out) == [2, 10, 12] and resumed.removed == [8]
    assert with_optimizer(out) == [12]

    # the pinned step exports; a step retention removed cannot be pinned any more
    result = export_checkpoint(out / "checkpoints" / "step-00000002", tmp_path / "export")
    assert (result.folder / "config.json").is_file()
    with pytest.raises(UserError, match=r"^The checkpoint of step 4 is no longer on disk: the run's retention "
                                        r"removed it .*so it cannot be pinned\.$"):
        retention.pin(out, 4)
    assert retention.read_pins(out) == {2}


def test_keep_last_0_keeps_every_checkpoint_whole(make_config, tokenizer_dir, tmp_path):
    out = tmp_path / "run"
    sink = ListSink()
    train(make_config(max_steps=6, checkpoint_every=2, eval_every=100, keep_last=0, warmup_steps=1),
          data_dir=tokenizer_dir, out_dir=out, sink=sink)
    assert steps_on_disk(out) == with_optimizer(out) == [2, 4, 6] and sink.removed == []


def fake_checkpoint(out, step, loss=None, *, valid_step=None, optimizer=True):
    folder = out / "checkpoints" / f"step-{step:08d}"
    folder.mkdir(parents=True)
    for name in retention.MODEL_FILES:
        (folder / name).write_text("{}")
    state = {"step": step, "metrics": {"train": {}, "valid": {} if loss is None else {"loss": loss}}}
    if valid_step is not None:
        state["valid_step"] = valid_step
    (folder / retention.STATE_NAME).write_text(json.dumps(state))
    if optimizer:
        (folder / OPTIMIZER_NAME).write_bytes(b"x" * 100)
    return folder


def test_the_best_by_validation_loss_stays_and_only_the_newest_keeps_its_optimizer_state(tmp_path):
    out = tmp_path / "run"
    for step, loss in ((1, 5.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 4.5)):
        fake_checkpoint(out, step, loss, valid_step=step)
    fake_checkpoint(out, 6, 1.0, valid_step=5)  # its valid metrics are step 5's validation: not a best
    done = retention.prune(out, keep_last=2)
    assert steps_on_disk(out) == [2, 5, 6]
    assert done.removed == [1, 3, 4] and done.kept == {2: "best"}
    assert with_optimizer(out) == [6] and sorted(done.slimmed) == [2, 5]


def test_a_half_removed_folder_is_never_listed_and_goes_at_the_next_prune(tmp_path):
    out = tmp_path / "run"
    fake_checkpoint(out, 1)
    crashed = out / "checkpoints" / ".removing-step-00000000-deadbeef"  # a crash between the rename and the delete
    crashed.mkdir()
    for name in retention.MODEL_FILES:
        (crashed / name).write_text("{}")
    assert steps_on_disk(out) == [1]
    retention.prune(out, keep_last=3)
    assert not crashed.exists() and steps_on_disk(out) == [1]


def test_a_crash_in_the_middle_of_a_removal_leaves_no_folder_that_looks_whole(tmp_path, monkeypatch):
    out = tmp_path / "run"
    for step in (1, 2):
        fake_checkpoint(out, step)
    monkeypatch.setattr(retention.shutil, "rmtree", lambda *a, **kw: None)  # the process dies before deleting
    assert retention.prune(out, keep_last=1).removed == [1]
    assert steps_on_disk(out) == [2]
    [hidden] = [p.name for p in (out / "checkpoints").iterdir() if p.name != "step-00000002"]
    assert hidden.startswith(".removing-step-00000001-")
    monkeypatch.undo()
    retention.prune(out, keep_last=1)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]


def test_a_checkpoint_being_read_is_removed_only_after_the_read(tmp_path):
    out = tmp_path / "run"
    old = fake_checkpoint(out, 1)
    fake_checkpoint(out, 2)
    with retention.reading(old):
        done = retention.prune(out, keep_last=1)
        assert done.busy == [1] and done.removed == [] and old.is_dir()
    assert retention.prune(out, keep_last=1).removed == [1]
    with pytest.raises(UserError, match=r"^The checkpoint step-00000001 is no longer on disk: the run's retention "
                                        r"removed it\.$"):
        with retention.reading(old):
            pass


def test_a_pin_keeps_a_step_and_an_unpin_lets_it_go(tmp_path):
    out = tmp_path / "run"
    for step in (1, 2, 3):
        fake_checkpoint(out, step)
    retention.pin(out, 1)
    assert retention.prune(out, keep_last=1).removed == [2]
    assert json.loads((out / retention.PINS_FILE).read_text()) == {"steps": [1]}
    retention.unpin(out, 1)
    assert retention.prune(out, keep_last=1).removed == [1] and steps_on_disk(out) == [3]


def test_describe_counts_a_checkpoints_files_and_whether_it_resumes(tmp_path):
    folder = fake_checkpoint(tmp_path / "run", 1)
    info = retention.describe(folder)
    assert info["resumable"] and info["exists"] and info["size_bytes"] == 100 + 4 * 2 + len(
        (folder / retention.STATE_NAME).read_text())
    assert retention.human_size(1_300_000_000) == "1.3 GB" and retention.human_size(420_000_000) == "420 MB"


def test_fine_tunings_early_stopping_best_stays_whatever_keep_last_says(tmp_path):
    from types import SimpleNamespace

    from trainer.finetune.techniques import FinetuneLoop

    out = tmp_path / "run"
    for step in (10, 20, 30):
        fake_checkpoint(out, step)
    loop = SimpleNamespace(early=SimpleNamespace(best_step=10))
    also = FinetuneLoop.kept_besides(loop)
    assert also == {10} and FinetuneLoop.kept_besides(SimpleNamespace(early=None)) == set()
    done = retention.prune(out, keep_last=1, also=also)
    assert done.removed == [20] and done.kept == {10: "best"} and steps_on_disk(out) == [10, 30]
