"""A checkpoint that cannot be written (a full disk) stops the run with a sentence, removes its
half-written folder and leaves the earlier checkpoints intact (issue 11, point 4)."""
from __future__ import annotations

import errno

import pytest

from models_lib import checkpoint as model_checkpoint
from tests.trainer.conftest import tiny_config
from trainer.training.checkpoints import CheckpointError, list_checkpoints
from trainer.training.engine import train
from trainer.training.sinks import ListSink


def test_a_full_disk_stops_the_run_with_a_sentence_and_keeps_the_earlier_checkpoints(tokenizer_dir, tmp_path,
                                                                                     monkeypatch):
    real_save = model_checkpoint.save_model
    saves = []

    def save_model(model, folder, **kwargs):
        saves.append(folder)
        if len(saves) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(model, folder, **kwargs)

    monkeypatch.setattr(model_checkpoint, "save_model", save_model)
    out = tmp_path / "run"
    config = tiny_config(max_steps=20, checkpoint_every=10, eval_every=100)
    with pytest.raises(CheckpointError, match=r"The disk is full: the checkpoint of step 20 could not be written\. "
                                              r"The run stopped there; its 1 earlier checkpoint is intact"):
        train(config, data_dir=tokenizer_dir, out_dir=out, sink=ListSink())
    assert [step for step, _ in list_checkpoints(out)] == [10]
    assert not list((out / "checkpoints").glob("*.tmp"))
    model_checkpoint.load_model(list_checkpoints(out)[0][1])  # the earlier one still loads
