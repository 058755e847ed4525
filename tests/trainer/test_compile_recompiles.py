"""torch.compile after warm-up (trainer.training.speedups): packed encoder batches, whose rows,
row length and real tokens change every step, compile the model during warm-up only (their
varying dims are marked dynamic up front), and a compile after warm-up is written to the run's
log with dynamo's reason. On the CPU with the aot_eager backend: dynamo's capture, whose decision
a recompile is, without inductor's minutes of C++ build."""
from __future__ import annotations

import pytest

from trainer.training import engine, speedups
from trainer.training.sinks import ListSink


@pytest.fixture
def fresh_dynamo(monkeypatch):
    import torch._dynamo
    import torch.fx.experimental._config as fx_config

    monkeypatch.setenv("LMWB_COMPILE_BACKEND", "aot_eager")
    before = fx_config.backed_size_oblivious, torch._dynamo.config.recompile_limit
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    fx_config.backed_size_oblivious, torch._dynamo.config.recompile_limit = before


def run_recording_shapes(config, data, out, monkeypatch):
    """train(config) -> (sink, the input_ids shapes of its training batches). Warm-up is the first
    step only: the batches' sizes change from the second step on, which compiles the model once
    more without the dynamic marks."""
    monkeypatch.setattr(speedups, "WARM_UP_STEPS", 1)
    shapes = []
    original = engine.Loop.next_batch

    def next_batch(loop):
        batch, position = original(loop)
        shapes.append((tuple(batch.input_ids.shape), getattr(batch, "real_tokens", None) is not None and
                       tuple(batch.real_tokens.shape)))
        return batch, position

    monkeypatch.setattr(engine.Loop, "next_batch", next_batch)
    sink = ListSink()
    result = engine.train(config, data_dir=data, out_dir=out, sink=sink)
    assert result.status == "succeeded"
    return sink, shapes


def after_warm_up(sink):
    return [line for line in sink.lines if line.startswith("torch.compile") and "after warm-up" in line
            or line.startswith("torch.compile gave up")]


@pytest.mark.parametrize("family", ["bert", "roberta", "electra"])
def test_packed_batches_of_changing_shapes_compile_during_warm_up_only(
        family, tokenizer_dir, bpe_tokenizer_dir, tmp_path, make_family_config, monkeypatch, fresh_dynamo):
    """16 steps of packed MLM (+ NSP, + RTD) batches and two validations: the batches' shapes change
    (and with them the count of ELECTRA's uniforms, which its step draws), and the run's log says no
    compile after warm-up."""
    data = {"bert": tokenizer_dir, "roberta": bpe_tokenizer_dir, "electra": tokenizer_dir}[family]
    config = make_family_config(family, max_steps=16, batch_size=16, log_every=16, eval_every=8, eval_batches=2,
                                checkpoint_every=16, warmup_steps=2, compile="on")
    sink, shapes = run_recording_shapes(config, data, tmp_path / "run", monkeypatch)
    packed = [(rows, real) for rows, real in shapes if real]  # (a batch with no padding at all stays as it is)
    assert len(packed) > len(shapes) // 2
    assert len({rows for rows, _ in packed}) > 1 and len({real for _, real in packed}) > 4  # R and N change
    assert any("first training step and the first validation compile" in line for line in sink.lines)
    assert after_warm_up(sink) == []


def test_without_the_dynamic_marks_the_run_logs_its_recompiles(tokenizer_dir, tmp_path, make_family_config,
                                                              monkeypatch, fresh_dynamo):
    """The same run with mark_dynamic a no-op: the new sizes recompile after warm-up, and the log says why."""
    monkeypatch.setattr(speedups, "mark_dynamic", lambda batch: batch)
    config = make_family_config("bert", max_steps=16, batch_size=16, log_every=16, eval_every=8, eval_batches=2,
                                checkpoint_every=16, warmup_steps=2, compile="on")
    sink, _ = run_recording_shapes(config, tokenizer_dir, tmp_path / "run", monkeypatch)
    lines = after_warm_up(sink)
    assert lines and all(line.startswith("torch.compile recompiled ") for line in lines)
    assert any("size mismatch" in line for line in lines)  # dynamo's reason, its first line


def test_a_recompile_after_warm_up_is_logged_and_a_fall_back_to_eager_too(monkeypatch, fresh_dynamo):
    """CompileWatch on a small compiled module: the warm-up's compiles are not reported, a later one
    is (with its reason), and so is reaching the recompile limit (once)."""
    import torch._dynamo

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.linear(x).relu()

    net, sink = Net(), ListSink()
    speedups.compile_model(net, "aot_eager", "model")
    watch = speedups.watch(net, sink)
    assert watch is not None and speedups.watch(Net(), sink) is None
    net(torch.randn(3, 4))
    watch.check(1)
    with torch.no_grad():
        net(torch.randn(3, 4))
    watch.check(1, validation=True)
    net(torch.randn(3, 4))
    watch.check(3)
    assert sink.lines == []
    net(torch.randn(3, 4, dtype=torch.float64).float().view(3, 2, 2).flatten(1))  # same guards: nothing
    net(torch.randn(3, 5, 4))  # a new rank: dynamo compiles again
    watch.check(4)
    assert len(sink.lines) == 1
    assert sink.lines[0].startswith("torch.compile recompiled forward at step 4 (recompile 1 after warm-up), because ")
    torch._dynamo.config.recompile_limit = 3
    for rank in (3, 4, 5, 6):
        net(torch.randn(*[2] * rank, 4))
    watch.check(5)
    gave_up = [line for line in sink.lines if line.startswith("torch.compile gave up compiling forward at step 5")]
    assert len(gave_up) == 1 and "runs uncompiled (eager) from now on" in gave_up[0]
