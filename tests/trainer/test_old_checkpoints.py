"""Checkpoints written before the restructure still load, explore and resume: their
trainer_state.json names the family "architecture" (the field's old name)."""
from __future__ import annotations

import json
import shutil

from tests.trainer.conftest import tiny_config
from trainer.config import RunConfig
from trainer.inference import masked
from trainer.training.checkpoints import list_checkpoints, read_state
from trainer.training.engine import train
from trainer.training.sinks import ListSink


def _as_before_the_rename(run_folder):
    for _, folder in list_checkpoints(run_folder):
        path = folder / "trainer_state.json"
        state = json.loads(path.read_text(encoding="utf-8"))
        state["config"] = {("architecture" if k == "family" else k): v for k, v in state["config"].items()}
        path.write_text(json.dumps(state), encoding="utf-8")


def test_an_old_checkpoint_explores_and_resumes(trained_run, tokenizer_dir, tmp_path):
    _, _, run_folder = trained_run
    old = tmp_path / "old-run"
    shutil.copytree(run_folder, old)
    _as_before_the_rename(old)
    step, last = list_checkpoints(old)[-1]
    saved = read_state(last)["config"]
    assert "architecture" in saved and RunConfig.from_dict(saved).family == "bert"
    assert masked.fill_mask(last, "return the [MASK].", top_k=3)[0]["predictions"]
    sink = ListSink()
    result = train(tiny_config(max_steps=step + 4), data_dir=tokenizer_dir, out_dir=old, sink=sink, resume=True)
    assert result.status == "succeeded" and result.final_step == step + 4
    assert any(f"Resuming from {last.name}" in line for line in sink.lines)
