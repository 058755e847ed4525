"""The run options compile and activation_checkpointing (trainer.training.speedups), end to end
on tiny runs: a compiled run trains, resumes and its checkpoint (clean keys) loads in the
explorer; a run that cannot compile stops with a sentence; activation checkpointing trains to the
same weights as a plain run; MFU is reported with the throughput."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from trainer.errors import ConfigError
from trainer.training.engine import train
from trainer.training.sinks import ListSink


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


def test_a_compiled_run_trains_resumes_and_its_checkpoint_loads_in_the_explorer(
        tokenizer_dir, tmp_path, make_config, monkeypatch, fresh_dynamo):
    from trainer.inference import loading, masked

    # inductor's C++ build of even a tiny model takes minutes on a busy 2-core machine, so the
    # suite compiles with AOTAutograd's eager backend (same capture, no code generation);
    # bench/train_throughput.py --compile measures inductor itself.
    monkeypatch.setenv("LMWB_COMPILE_BACKEND", "aot_eager")
    config = make_config(max_steps=4, log_every=1, eval_every=2, checkpoint_every=2, warmup_steps=1, eval_batches=2,
                         compile=True)
    sink, out = ListSink(), tmp_path / "run"
    stops = iter([False, False, True])
    first = train(config, data_dir=tokenizer_dir, out_dir=out, sink=sink, should_stop=lambda: next(stops))
    assert first.status == "cancelled" and first.final_step == 2
    assert fresh_dynamo["stats"]["unique_graphs"] > 0  # the forward went through torch.compile
    assert any(line.startswith("torch.compile (aot_eager)") for line in sink.lines)

    resumed = ListSink()
    result = train(config, data_dir=tokenizer_dir, out_dir=out, sink=resumed, resume=True)
    assert result.status == "succeeded" and result.final_step == 4
    assert [s for s, _ in resumed.split("train")] == [3, 4]
    with safe_open(str(result.last_checkpoint / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and not [k for k in keys if "_orig_mod" in k]
    loading.clear_cache()
    predictions = masked.fill_mask(result.last_checkpoint, "the [MASK] of the file", top_k=3)
    assert predictions and predictions[0]["predictions"]


def test_a_model_that_cannot_compile_stops_the_run_with_a_sentence(tokenizer_dir, tmp_path, make_config, monkeypatch,
                                                                    fresh_dynamo):
    import torch._inductor.config as inductor

    monkeypatch.delenv("LMWB_COMPILE_BACKEND", raising=False)
    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/g++",))  # a worker without a C++ compiler
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    sink = ListSink()
    with pytest.raises(ConfigError, match=r"^torch\.compile could not compile the model \(.*C\+\+ compiler.*\)\. "
                                          r"Turn compile off for this run"):
        train(make_config(max_steps=2, warmup_steps=1, compile=True), data_dir=tokenizer_dir, out_dir=tmp_path / "run", sink=sink)
    assert sink.closed


def test_activation_checkpointing_trains_to_the_same_weights(tokenizer_dir, tmp_path, make_config, monkeypatch):
    from models_lib.checkpoint import load_model
    from trainer.training import flops

    # 10 TFLOP/s: far above what a tiny CPU run does (an MFU above 100% is not reported)
    monkeypatch.setattr(flops, "peak_for", lambda device, precision: flops.Peak(1e13, "a test's 10 TFLOP/s"))
    weights = {}
    for on in (False, True):
        sink = ListSink()
        config = make_config(max_steps=3, log_every=1, eval_every=3, checkpoint_every=3, warmup_steps=1,
                             eval_batches=1, activation_checkpointing=on)
        result = train(config, data_dir=tokenizer_dir, out_dir=tmp_path / str(on), sink=sink)
        weights[on] = load_model(result.last_checkpoint).state_dict()
        assert any(line.startswith("Activation checkpointing") for line in sink.lines) == on
        # MFU = the family's FLOPs per token x tokens/s / the peak
        per_token = flops.training_flops_per_token(load_model(result.last_checkpoint).config, flops.Workload(
            seq_len=64, predicted=0.15, objectives=("mlm", "nsp")))
        assert all(v["mfu"] == pytest.approx(per_token * v["tokens_per_s"] / 1e13) for _, v in sink.split("train"))
        assert any("against a peak of 10.00 TFLOP/s (a test's 10 TFLOP/s)" in line for line in sink.lines)
    for name, value in weights[False].items():
        torch.testing.assert_close(weights[True][name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_the_options_are_runtime_settings_and_elmo_refuses_activation_checkpointing(make_config):
    from trainer.config import RunConfig

    config = make_config(compile=True, activation_checkpointing=True)
    assert config.runtime.compile and config.runtime.activation_checkpointing
    assert RunConfig.from_yaml(config.to_yaml()) == config
    with pytest.raises(ConfigError, match="compile must be one of 'auto', 'on', 'off', not 'yes'"):
        make_config(compile="yes")
    with pytest.raises(ConfigError, match="^activation_checkpointing recomputes transformer blocks .* ELMo's model does not offer it"):
        RunConfig(family="elmo", preset="elmo-tiny", objectives=["bilm"], activation_checkpointing=True)


def test_tf32_is_turned_on_where_the_run_picks_a_cuda_device(monkeypatch, make_config):
    from trainer.training import engine

    monkeypatch.setattr(engine, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(engine, "resolve_precision", lambda precision, device: "fp32")
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        assert engine.setup_runtime(make_config()) == ("cuda", "fp32")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32  # fp32 matmuls and convs
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("setting,device,compiled", [
    ("auto", "cuda", True), ("auto", "cpu", False), ("on", "cpu", True), ("off", "cuda", False),
    (True, "cpu", True), (False, "cuda", False),
])
def test_compile_auto_compiles_on_a_gpu_only_and_booleans_still_read(make_config, setting, device, compiled):
    from trainer.training.speedups import compiles

    config = make_config(compile=setting)
    assert config.compile in ("auto", "on", "off")
    assert compiles(config.runtime, device) is compiled


def test_compile_refuses_other_values(make_config):
    with pytest.raises(ConfigError, match="compile"):
        make_config(compile="sometimes")


@pytest.mark.parametrize("family", ["bert", "t5", "gpt"])
def test_compiling_block_by_block_compiles_one_graph_per_kind_of_block_and_trains_the_same(
        family, tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir, tmp_path, make_family_config, monkeypatch,
        fresh_dynamo):
    """LMWB_COMPILE_SCOPE=blocks: each transformer block is compiled on its own (identical blocks
    share a graph); the run's losses are the uncompiled run's."""
    data = {"bert": tokenizer_dir, "t5": sentinel_tokenizer_dir, "gpt": bpe_tokenizer_dir}[family]
    monkeypatch.setenv("LMWB_COMPILE_BACKEND", "aot_eager")
    losses = {}
    for setting in ("off", "on"):
        monkeypatch.setenv("LMWB_COMPILE_SCOPE", "blocks")
        extra = {"model_overrides": {}} if family == "t5" else {}
        config = make_family_config(family, max_steps=3, log_every=1, eval_every=3, checkpoint_every=3,
                                    warmup_steps=1, eval_batches=1, compile=setting, **extra)
        sink = ListSink()
        train(config, data_dir=data, out_dir=tmp_path / setting, sink=sink)
        losses[setting] = [v["loss"] for _, v in sink.split("train")]
        if setting == "on":
            assert any("torch.compile (aot_eager block by block)" in line for line in sink.lines)
    assert fresh_dynamo["stats"]["unique_graphs"] > 0
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-4)


def test_compile_scope_refuses_an_unknown_scope(monkeypatch):
    from trainer.training.speedups import compile_scope

    monkeypatch.setenv("LMWB_COMPILE_SCOPE", "everything")
    with pytest.raises(ConfigError, match="LMWB_COMPILE_SCOPE must be one of model, blocks"):
        compile_scope()
