"""Learning-rate schedules, weight-decay groups, gradient clipping, sinks."""
from __future__ import annotations

import io
import json

import pytest
import torch

from models_lib.families.bert import BertConfig, BertForPreTraining
from trainer.training.optim import build_optimizer, clip_gradients, lr_factor, param_groups
from trainer.training.sinks import ConsoleSink, ListSink, MetricsSink, NullSink, TeeSink, format_duration


def test_linear_schedule_warms_up_then_decays():
    f = lr_factor("linear", warmup_steps=10, max_steps=110)
    assert [f(k) for k in (1, 5, 10)] == [0.1, 0.5, 1.0]
    assert f(11) == 1.0 and f(61) == pytest.approx(0.5) and f(110) == pytest.approx(0.01)
    assert all(f(k) > f(k + 1) for k in range(11, 110))


def test_cosine_and_constant_schedules():
    f = lr_factor("cosine", warmup_steps=0, max_steps=100)
    assert f(1) == 1.0 and f(51) == pytest.approx(0.5) and 0 < f(100) < 0.001
    g = lr_factor("constant", warmup_steps=4, max_steps=100)
    assert [g(k) for k in (1, 2, 4, 5, 100)] == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_scheduler_drives_the_optimizer(make_config):
    model = torch.nn.Linear(4, 4)
    opt, sched = build_optimizer(model, *_optim(make_config(lr=1e-3, warmup_steps=4, max_steps=8)))
    lrs = []
    for _ in range(8):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 7.5e-4, 5e-4, 2.5e-4])


def test_no_weight_decay_on_biases_and_norms():
    model = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=100, hidden_size=32, num_heads=2))
    decay, no_decay = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(not names[id(p)].endswith("bias") and "norm" not in names[id(p)] for p in decay["params"])
    assert all(names[id(p)].endswith("bias") or "norm" in names[id(p)] for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_t5s_relative_position_biases_take_no_weight_decay():
    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

    model = T5ForConditionalGeneration(T5Config.from_preset("t5-tiny", vocab_size=100, d_model=32, d_ff=64, d_kv=8,
                                                            num_heads=2, num_layers=1, num_decoder_layers=1))
    decay, no_decay = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    tables = [n for n in names.values() if "relative_attention_bias" in n]
    assert tables and set(tables) <= {names[id(p)] for p in no_decay["params"]}
    assert all("bias" not in names[id(p)] and "norm" not in names[id(p)] for p in decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_clipping_returns_the_norm_before_clipping():
    model = torch.nn.Linear(3, 1, bias=False)
    model.weight.grad = torch.tensor([[3.0, 4.0, 0.0]])
    assert float(clip_gradients(model, 1.0)) == pytest.approx(5.0)
    assert model.weight.grad.norm().item() == pytest.approx(1.0, rel=1e-4)
    model.weight.grad = torch.tensor([[3.0, 4.0, 0.0]])
    clip_gradients(model, 0.0)  # 0 = measure only
    assert model.weight.grad.norm().item() == pytest.approx(5.0)


def test_sinks(tmp_path):
    out = io.StringIO()
    console = ConsoleSink(tmp_path, stream=out, max_steps=100)
    listing = ListSink()
    sink = TeeSink(console, listing, NullSink())
    assert all(isinstance(s, MetricsSink) for s in (console, listing, NullSink(), sink))
    sink.metrics(10, "train", {"loss": 2.5, "lr": 1e-4, "tokens_per_s": 12345.0, "eta_s": 65.0})
    sink.metrics(10, "valid", {"loss": 2.4, "perplexity": 11.0})
    sink.log("hello")
    sink.heartbeat(10, 100)
    sink.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step     10/100 | loss 2.5000") and "12,345 tok/s" in lines[0] and "eta 1m05s" in lines[0]
    assert lines[1].startswith("valid @ 10") and lines[2] == "hello"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in records] == [(10, "train"), (10, "valid")]
    assert listing.split("valid") == [(10, {"loss": 2.4, "perplexity": 11.0})] and listing.closed
    assert format_duration(7300) == "2h01m"


def _optim(config):
    """build_optimizer's settings from a run config."""
    return config.optim, config.max_steps
