"""train(): loss falls, checkpoints, cancel, exact resume, metrics stream."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.checkpoint import load_model
from trainer.training.checkpoints import list_checkpoints, read_optimizer_state
from trainer.training.engine import train
from trainer.errors import ConfigError
from trainer.training.sinks import ListSink
from tests.trainer.batch_workers_helpers import all_ended, wait_for_workers
from tests.trainer.conftest import tiny_config

TRAIN_KEYS = {"loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "grad_norm", "tokens_per_s",
              "mfu", "fill", "memory_mb", "progress", "eta_s"}
VALID_KEYS = {"loss", "mlm_loss", "nsp_loss", "perplexity", "mlm_acc", "nsp_acc"}


def test_loss_falls_and_metrics_are_reported(trained_run):
    result, sink, _ = trained_run
    assert result.status == "succeeded" and result.final_step == 40
    train_events = sink.split("train")
    assert [s for s, _ in train_events] == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    assert all(set(v) == TRAIN_KEYS for _, v in train_events)
    first, last = train_events[0][1], train_events[-1][1]
    # 40 steps of bert-tiny from a uniform guess (ln 2000 = 7.6). Calibrated on the stored tokenizers
    # (2026-12-02, two processes, identical): MLM loss 7.598 -> 6.392, a fall of 1.21; the bound 0.5
    # leaves a margin of 0.71 and still fails a model that does not learn (a fall of about 0).
    assert last["mlm_loss"] < first["mlm_loss"] - 0.5, (first, last)
    assert last["progress"] == 1.0 and last["eta_s"] == 0 and last["tokens_per_s"] > 0 and last["memory_mb"] > 0
    assert last["mfu"] > 0  # against a peak measured on this (shared) CPU: not bounded by 1 here
    valid = sink.split("valid")
    assert [s for s, _ in valid] == [20, 40] and all(set(v) == VALID_KEYS for _, v in valid)
    # validation MLM loss 6.566 (step 20) -> 6.315 (step 40), the same in both processes: a margin of 0.25
    assert valid[-1][1]["mlm_loss"] < valid[0][1]["mlm_loss"], valid
    assert abs(valid[-1][1]["perplexity"] - torch.tensor(valid[-1][1]["mlm_loss"]).exp().item()) < 1e-3
    assert [h[0] for h in sink.heartbeats] == list(range(1, 41))
    assert any(line.startswith("Training bert-tiny") for line in sink.lines)
    assert any("Validation at step 40" in line for line in sink.lines) and sink.lines[-1].startswith("Finished")
    assert sink.closed


def test_checkpoints_are_complete_and_load(trained_run, make_config):
    result, sink, out = trained_run
    assert [s for s, _ in list_checkpoints(out)] == [20, 40] and result.last_checkpoint == out / "checkpoints/step-00000040"
    assert [(s, p.name) for s, p, _ in sink.checkpoints] == [(20, "step-00000020"), (40, "step-00000040")]
    folder = result.last_checkpoint
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "model_config.json", "tokenizer.json",
                                                    "tokenizer_meta.json", "trainer_state.json", "optimizer.pt"}
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["step"] == 40 and state["tokens_seen"] > 0 and state["config"] == make_config().to_dict()
    assert set(state["data_position"]) == {"epoch", "index"} and state["metrics"]["valid"]["mlm_loss"] > 0
    opt = read_optimizer_state(folder)  # weights_only=True
    assert {"optimizer", "scheduler", "rng"} <= set(opt)
    model = load_model(folder)
    assert model.config.hidden_size == 64 and model.config.vocab_size == 2000
    assert not list(out.glob("checkpoints/*.tmp"))


@pytest.mark.parametrize("workers", [0, 2])
def test_cancel_then_resume_equals_an_uninterrupted_run(tokenizer_dir, tmp_path, make_config, workers, monkeypatch):
    """The stopped and resumed run collates on the training thread, or in 2 data worker processes
    (which then build every batch); the uninterrupted one on the training thread."""
    config = make_config(max_steps=16, log_every=1, eval_every=8, checkpoint_every=100, warmup_steps=2,
                         data_workers=0)
    whole = ListSink()
    train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "whole", sink=whole)

    opened = wait_for_workers(monkeypatch)
    config = config.replace(data_workers=workers)
    first = ListSink()
    stopped = train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "split", sink=first,
                    should_stop=lambda: len(first.heartbeats) >= 7)
    assert stopped.status == "cancelled" and stopped.final_step == 7
    assert stopped.last_checkpoint.name == "step-00000007" and stopped.last_checkpoint.is_dir()
    second = ListSink()
    resumed = train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "split", sink=second, resume=True)
    assert resumed.status == "succeeded" and resumed.final_step == 16
    assert len(opened) == (2 if workers else 0) and all(o.built_here == 0 for o in opened) and all_ended(opened)

    steps = [(s, sp) for s, sp, _ in first.events + second.events]
    assert len(steps) == len(set(steps)) and [s for s, _ in second.split("train")][0] == 8
    whole_train = dict(whole.split("train"))
    for step, values in first.split("train") + second.split("train"):
        assert abs(values["loss"] - whole_train[step]["loss"]) < 1e-5, step
    assert abs(whole.split("valid")[-1][1]["loss"] - second.split("valid")[-1][1]["loss"]) < 1e-5
    a = load_model(tmp_path / "whole/checkpoints/step-00000016").state_dict()
    b = load_model(tmp_path / "split/checkpoints/step-00000016").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [s for s, _ in list_checkpoints(tmp_path / "split")] == [7, 16]


def test_a_stop_just_after_a_checkpoint_keeps_it_and_adds_none_repeating_its_losses(tokenizer_dir, tmp_path,
                                                                                    make_config):
    """Issue 45, point 8: stopped one step after the checkpoint of step 4 (nothing logged since), the
    run saves no step-5 checkpoint with step 4's losses; the resume trains step 5 again. Stopped
    after a logged step (6), it saves one, with that step's losses."""
    config = make_config(max_steps=8, log_every=2, eval_every=100, checkpoint_every=4, warmup_steps=1, data_workers=0)
    first = ListSink()
    stopped = train(config, data_dir=tokenizer_dir, out_dir=tmp_path, sink=first,
                    should_stop=lambda: len(first.heartbeats) >= 5)
    assert stopped.status == "cancelled" and stopped.final_step == 5
    assert [s for s, _, _ in first.checkpoints] == [4] and stopped.last_checkpoint.name == "step-00000004"
    assert first.lines[-1] == ("Stopped at step 5; the last checkpoint is step-00000004 (1 step before, with the "
                               "losses logged last; a resume trains it again).")
    second = ListSink()
    stopped = train(config, data_dir=tokenizer_dir, out_dir=tmp_path, sink=second, resume=True,
                    should_stop=lambda: len(second.heartbeats) >= 3)  # steps 5, 6, 7
    assert stopped.final_step == 7 and [s for s, _, _ in second.checkpoints] == [7]
    assert [s for s, _ in second.split("train")] == [6]
    saved = json.loads((stopped.last_checkpoint / "trainer_state.json").read_text())["metrics"]["train"]
    assert saved["loss"] == second.split("train")[-1][1]["loss"]  # its own losses: those logged after step 4
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 7]


def test_static_masking_mlm_only_with_grad_accum(tokenizer_dir, tmp_path, make_config):
    config = make_config(objectives=["mlm"], masking="static", max_steps=3, warmup_steps=1, grad_accum=2, log_every=1,
                         schedule="cosine", checkpoint_every=3, eval_every=3)
    sink = ListSink()
    result = train(config, data_dir=tokenizer_dir, out_dir=tmp_path, sink=sink)
    assert result.final_step == 3
    assert all("nsp_loss" not in v for _, v in sink.split("train"))
    assert set(sink.split("valid")[0][1]) == {"loss", "mlm_loss", "perplexity", "mlm_acc"}


def test_resume_without_checkpoint_starts_fresh_and_fresh_start_refuses_used_folder(trained_run, tokenizer_dir,
                                                                                   tmp_path, make_config):
    sink = ListSink()
    result = train(make_config(max_steps=1, warmup_steps=0), data_dir=tokenizer_dir, out_dir=tmp_path, sink=sink, resume=True)
    assert result.final_step == 1 and "starting from step 0" in sink.lines[0]
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        train(make_config(max_steps=1, warmup_steps=0), data_dir=tokenizer_dir, out_dir=tmp_path, sink=ListSink())
    done = ListSink()  # resuming a finished run does nothing more
    _, _, out = trained_run
    assert train(make_config(), data_dir=tokenizer_dir, out_dir=out, sink=done, resume=True).final_step == 40
    assert done.events == []


def test_resume_with_another_model_is_refused(trained_run, tokenizer_dir, make_config):
    _, _, out = trained_run
    with pytest.raises(ConfigError, match="different model"):
        train(make_config(model_overrides={"hidden_size": 32, "num_heads": 2}), data_dir=tokenizer_dir,
              out_dir=out, sink=ListSink(), resume=True)


def test_corpus_too_small_for_the_batch_is_a_user_error(tokenizer_dir, tmp_path, make_config):
    with pytest.raises(ConfigError, match="fewer than one batch"):
        train(make_config(batch_size=4096), data_dir=tokenizer_dir, out_dir=tmp_path, sink=ListSink())


def test_background_collation_gives_the_same_run(tokenizer_dir, tmp_path, make_config, monkeypatch):
    from trainer.training import engine

    config = make_config(max_steps=4, log_every=1, warmup_steps=1, checkpoint_every=100, data_workers=0)
    direct, threaded = ListSink(), ListSink()
    train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "a", sink=direct)
    monkeypatch.setattr(engine, "PREFETCH_DEVICES", ("cuda", "cpu"))
    train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "b", sink=threaded)
    assert [v["loss"] for _, v in direct.split("train")] == [v["loss"] for _, v in threaded.split("train")]
    a = json.loads((tmp_path / "a/checkpoints/step-00000004/trainer_state.json").read_text())
    b = json.loads((tmp_path / "b/checkpoints/step-00000004/trainer_state.json").read_text())
    assert a["data_position"] == b["data_position"]


def test_a_step_adds_whole_set_metrics_after_validation(tokenizer_dir, tmp_path, monkeypatch):
    """Step.finish_validation: metrics a step gathers over the whole validation set reach the
    validation values, once per evaluation, after start_validation."""
    from trainer.objectives.encoder import PreTrainingStep

    calls = []

    def start(self):
        calls.append("start")
        self.seen = 0

    def call(self, batch, *, train):
        if not train:
            self.seen += batch.size
        return original(self, batch, train=train)

    def finish(self):
        calls.append("finish")
        return {"examples_seen": float(self.seen)}

    original = PreTrainingStep.__call__
    monkeypatch.setattr(PreTrainingStep, "start_validation", start)
    monkeypatch.setattr(PreTrainingStep, "__call__", call)
    monkeypatch.setattr(PreTrainingStep, "finish_validation", finish)
    sink = ListSink()
    config = tiny_config(max_steps=4, eval_every=2, eval_batches=2, checkpoint_every=100)
    train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "run", sink=sink)
    valid = [values for _, split, values in sink.events if split == "valid"]
    assert len(valid) == 2 and all(v["examples_seen"] == 2 * config.batch_size for v in valid)
    assert calls == ["start", "finish"] * 2


def test_the_runs_clock_leaves_out_the_peak_measurement(tokenizer_dir, tmp_path, make_config, monkeypatch):
    """elapsed_s (what the ETA and every time derived from it read) starts after the set-up probe of
    the device's peak FLOP/s, which trainer_state.json records apart as probe_s (issue 46). The probe
    here moves the run's clock on by 1,000 s, which must all land in probe_s."""
    import time

    from trainer.training import engine

    clock = {"offset": 0.0}
    real_clock, real_peak = time.perf_counter, engine.flops.peak_for

    def probe(device, precision):
        clock["offset"] += 1000.0
        return real_peak(device, precision)

    monkeypatch.setattr(engine.time, "perf_counter", lambda: real_clock() + clock["offset"])
    monkeypatch.setattr(engine.flops, "peak_for", probe)
    result = train(make_config(max_steps=2, warmup_steps=0, data_workers=0), data_dir=tokenizer_dir, out_dir=tmp_path,
                   sink=ListSink())
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state["probe_s"] >= 1000
    assert state["elapsed_s"] < 1000
