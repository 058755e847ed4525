"""The inverse-square-root schedule, PyTorch's Adafactor for T5 (AdamW for the others), what its
lr means, and its state through a checkpoint."""
from __future__ import annotations

import math

import pytest
import torch

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.training.optim import build_optimizer, lr_factor


def t5_config(**changes) -> RunConfig:
    base = dict(family="t5", preset="t5-tiny", objectives=["span_corruption"], lr=0.01, schedule="inverse_sqrt",
                weight_decay=0.0, warmup_steps=4, max_steps=100)
    base.update(changes)
    return RunConfig(**base)


def tiny_t5():
    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config.from_preset("t5-tiny", vocab_size=64, d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=1,
                               pad_token_id=0, eos_token_id=3, dropout_rate=0.0)
    return T5ForConditionalGeneration(cfg)


def t5_loss(model, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(5, 64, (2, 7), generator=g)
    labels = torch.randint(5, 64, (2, 5), generator=g)
    return model(inputs, torch.ones_like(inputs), labels=labels).loss


# ---------------------------------------------------------------------------- the schedule
def test_inverse_sqrt_is_constant_for_the_warmup_then_one_over_sqrt_meeting_one():
    f = lr_factor("inverse_sqrt", warmup_steps=4, max_steps=100)
    assert [f(k) for k in (1, 2, 3, 4)] == [1.0, 1.0, 1.0, 1.0]  # constant, no linear ramp
    assert f(16) == pytest.approx(0.5) and f(100) == pytest.approx(0.2) and f(400) == pytest.approx(0.1)
    assert all(f(k) > f(k + 1) for k in range(4, 100))
    g = lr_factor("inverse_sqrt", warmup_steps=0, max_steps=100)  # no constant phase: 1/sqrt(k) from the start
    assert [g(k) for k in (1, 4, 25)] == pytest.approx([1.0, 0.5, 0.2])


def test_lr_001_with_10k_warmup_is_t5s_schedule():
    f = lr_factor("inverse_sqrt", warmup_steps=10_000, max_steps=2**19)
    for k in (1, 5_000, 10_000, 10_001, 40_000, 2**19):
        assert 0.01 * f(k) == pytest.approx(1 / math.sqrt(max(k, 10_000)))


def test_the_scheduler_drives_adafactors_lr():
    model = torch.nn.Linear(4, 4)
    opt, sched = build_optimizer(model, *_optim(t5_config(warmup_steps=2, max_steps=8)))
    assert isinstance(opt, torch.optim.Adafactor)
    lrs = []
    for _ in range(8):
        lrs.append(sched.get_last_lr()[0])
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.01 * math.sqrt(2 / max(k, 2)) for k in range(1, 9)])


# ---------------------------------------------------------------------------- which optimizer
def test_adafactor_is_t5s_default_and_adamw_everyone_elses():
    assert t5_config().optimizer == "adafactor"
    assert isinstance(build_optimizer(tiny_t5(), *_optim(t5_config()))[0], torch.optim.Adafactor)
    assert isinstance(build_optimizer(tiny_t5(), *_optim(t5_config(optimizer="adamw")))[0], torch.optim.AdamW)
    for arch, preset, objectives in (("gpt", "gpt-tiny", ["clm"]), ("elmo", "elmo-tiny", ["bilm"]),
                                     ("bert", "bert-tiny", ["mlm", "nsp"]), ("roberta", "roberta-tiny", ["mlm"])):
        config = RunConfig(family=arch, preset=preset, objectives=objectives)
        assert config.optimizer == "adamw"
        assert isinstance(build_optimizer(torch.nn.Linear(2, 2), *_optim(config))[0], torch.optim.AdamW)
    bert = RunConfig(optimizer="adafactor")  # any family may choose it
    assert isinstance(build_optimizer(torch.nn.Linear(2, 2), *_optim(bert))[0], torch.optim.Adafactor)


def test_a_config_saved_before_the_optimizer_field_reads_as_adamw():
    old = RunConfig().to_dict()
    del old["optimizer"]
    config = RunConfig.from_dict(old)
    assert config.optimizer == "adamw" and config.to_dict()["optimizer"] == "adamw"
    assert RunConfig.from_yaml(t5_config().to_yaml()).optimizer == "adafactor"
    with pytest.raises(ConfigError, match="optimizer must be one of 'adamw', 'adafactor', not 'lamb'."):
        RunConfig(optimizer="lamb")


def test_adafactors_lr_caps_its_step_relative_to_the_weights_size_and_scales_weight_decay():
    # First step: beta2_1 = 0, so the update is grad / |grad| = 1 everywhere (RMS 1, not clipped);
    # the step is max(1e-3, RMS(weight)) * min(lr, 1/sqrt(1)) = RMS(weight) * lr.
    for scale, lr in ((1.0, 0.01), (3.0, 0.01), (1.0, 0.002)):
        w = torch.nn.Parameter(torch.full((4, 4), scale))
        w.grad = torch.ones(4, 4)
        opt, _ = build_optimizer(torch.nn.ParameterList([w]), *_optim(t5_config(lr=lr)))
        opt.step()
        assert torch.allclose(w.detach(), torch.full((4, 4), scale - scale * lr))
    w = torch.nn.Parameter(torch.ones(4, 4))
    w.grad = torch.zeros(4, 4)
    opt, _ = build_optimizer(torch.nn.ParameterList([w]), *_optim(t5_config(lr=0.01, weight_decay=0.5)))
    opt.step()  # decoupled decay, scaled by the lr: w * (1 - 0.01 * 0.5)
    assert torch.allclose(w.detach(), torch.full((4, 4), 1 - 0.005))


# ---------------------------------------------------------------------------- checkpoints
def test_adafactor_state_survives_a_checkpoint_and_resumes_exactly(tmp_path):
    config = t5_config(warmup_steps=2, max_steps=10)
    straight = tiny_t5()
    opt, sched = build_optimizer(straight, *_optim(config))
    resumed = tiny_t5()
    for step in range(6):
        if step == 3:  # save after 3 updates, as the engine does, and load into fresh objects
            torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp_path / "optimizer.pt")
            resumed.load_state_dict(straight.state_dict())
            saved = torch.load(tmp_path / "optimizer.pt", weights_only=True)
            opt2, sched2 = build_optimizer(resumed, *_optim(config))
            opt2.load_state_dict(saved["optimizer"])
            sched2.load_state_dict(saved["scheduler"])
            assert sched2.get_last_lr() == sched.get_last_lr()
            assert all(int(s["step"]) == 3 for s in opt2.state_dict()["state"].values())
        for model, o, s in ((straight, opt, sched),) + (((resumed, opt2, sched2),) if step >= 3 else ()):
            o.zero_grad()
            t5_loss(model, seed=step).backward()
            o.step()
            s.step()
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    row_vars = [s["row_var"] for s in opt2.state_dict()["state"].values() if s.get("row_var") is not None]
    assert row_vars and all(torch.isfinite(r).all() for r in row_vars)


def _optim(config):
    """build_optimizer's settings from a run config."""
    return config.optim, config.max_steps
