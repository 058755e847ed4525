"""RunConfig: defaults, validation messages, dict/YAML round trips."""
from __future__ import annotations

import pytest

from trainer import settings_schema
from trainer.config import RunConfig, resolve_device, resolve_precision
from trainer.finetune.config import FinetuneConfig
from trainer.errors import ConfigError, UserError


def test_defaults_match_the_contract():
    c = RunConfig()
    assert (c.family, c.preset, c.objectives, c.masking) == ("bert", "bert-tiny", ["mlm", "nsp"], "dynamic")
    assert (c.mask_prob, c.max_steps, c.batch_size, c.seq_len, c.grad_accum, c.lr) == (0.15, 1000, 32, 128, 1, 1e-4)
    assert (c.betas, c.eps, c.weight_decay, c.warmup_steps, c.schedule) == ((0.9, 0.999), 1e-6, 0.01, 100, "linear")
    assert (c.clip_grad, c.eval_every, c.eval_batches, c.checkpoint_every, c.log_every) == (1.0, 100, 20, 500, 10)
    assert (c.seed, c.device, c.precision, c.num_threads) == (0, "auto", "auto", 0)


def test_every_field_has_one_schema_entry_with_a_label_and_help():
    declared = [s.name for s in settings_schema.SETTINGS]
    assert len(declared) == len(set(declared))  # each setting once, whichever kinds take it
    pretraining = settings_schema.settings(settings_schema.PRETRAIN)
    assert {s.name for s in pretraining} == set(RunConfig().to_dict())
    finetuning = settings_schema.settings(settings_schema.FINETUNE)
    assert {s.name for s in finetuning} <= set(FinetuneConfig.__dataclass_fields__)
    assert set(settings_schema.TASK_BOUNDS) <= set(FinetuneConfig.__dataclass_fields__)
    assert all(s.label and len(s.help) > 10 for s in pretraining + finetuning)


def test_a_shared_setting_is_declared_once_and_says_where_the_kinds_differ():
    pre, fine = settings_schema.bounds(settings_schema.PRETRAIN), settings_schema.bounds(settings_schema.FINETUNE)
    assert (pre["lr"].low, fine["lr"].low) == (1e-7, 1e-8)
    assert pre["max_steps"] == fine["max_steps"] and "llrd" not in pre and fine["llrd"].min_exclusive


def test_dict_and_yaml_round_trip():
    c = RunConfig(max_steps=50, warmup_steps=5, betas=(0.9, 0.98), objectives=["mlm"], masking="static")
    assert RunConfig.from_dict(c.to_dict()) == c
    assert RunConfig.from_yaml(c.to_yaml()) == c
    assert isinstance(c.to_dict()["betas"], list)


def test_yaml_accepts_what_people_write():
    c = RunConfig.from_yaml("lr: 1e-4\nbetas: [0.9, 0.98]\nmax_steps: 10\nwarmup_steps: 2.0\n")
    assert c.lr == 1e-4 and c.betas == (0.9, 0.98) and c.warmup_steps == 2 and isinstance(c.warmup_steps, int)
    assert RunConfig.from_yaml("") == RunConfig()


@pytest.mark.parametrize("changes, message", [
    ({"seq_len": 1000}, "seq_len must be between 16 and the model's 512 positions"),
    ({"seq_len": 8}, "seq_len must be at least 16"),
    ({"batch_size": 0}, "batch_size must be between 1 and"),
    ({"lr": "fast"}, "lr must be a number"),
    ({"max_steps": 2.5}, "max_steps must be a whole number"),
    ({"masking": "sometimes"}, "masking must be one of 'dynamic', 'static'"),
    ({"schedule": "exp"}, "schedule must be one of"),
    ({"betas": [0.9]}, "betas must be two numbers"),
    ({"betas": [0.9, 1.5]}, "betas must be two numbers"),
    ({"mask_prob": 0.9}, "mask_prob must be between 0.01 and 0.5"),
    ({"warmup_steps": 2000}, "warmup_steps (2000) must not be larger than max_steps (1000)"),
    ({"objectives": []}, "at least one objective"),
    ({"objectives": ["mlm", "mlm"]}, "twice"),
    ({"precision": "bf16", "device": "cpu"}, "bf16 precision needs a CUDA GPU"),
    ({"model_overrides": {"num_heads": 3}}, "must be divisible by the number of attention heads"),
    ({"model_overrides": {"vocab_size": 10}}, "comes from the tokenizer"),
    ({"lr": float("nan")}, "finite"),
])
def test_bad_values_are_refused_with_a_sentence(changes, message):
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict(changes)
    assert message in str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_unknown_keys_are_named():
    with pytest.raises(ConfigError, match="Unknown config fields: bar, foo"):
        RunConfig.from_dict({"foo": 1, "bar": 2, "lr": 1e-3})
    with pytest.raises(ConfigError, match="Unknown config field: learning_rate"):
        RunConfig.from_yaml("learning_rate: 0.1")


def test_yaml_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match="mapping"):
        RunConfig.from_yaml("- a\n- b\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        RunConfig.from_yaml("lr: [1, 2\n")


def test_seq_len_may_grow_with_more_positions():
    assert RunConfig(seq_len=1024, model_overrides={"max_position_embeddings": 1024}).seq_len == 1024


def test_replace_validates():
    with pytest.raises(ConfigError):
        RunConfig().replace(batch_size=-1)


def test_device_and_precision_resolve_at_run_time():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    assert resolve_precision("auto", "cpu") == "fp32"
    with pytest.raises(ConfigError, match="CUDA"):
        resolve_precision("bf16", "cpu")


def test_a_config_saved_with_architecture_still_loads_as_its_family():
    """Runs, YAML exports and checkpoints from before the field was renamed name it "architecture"."""
    old = RunConfig.from_yaml("architecture: roberta\npreset: roberta-tiny\nobjectives: [mlm]\n")
    assert old.family == "roberta" and "architecture" not in old.to_dict()
    assert RunConfig.from_dict({"architecture": "bert", "family": "bert"}).family == "bert"
    with pytest.raises(ConfigError, match="names two families: architecture 'bert' and family 'roberta'"):
        RunConfig.from_dict({"architecture": "bert", "family": "roberta", "preset": "roberta-tiny",
                             "objectives": ["mlm"]})


def test_every_setting_is_in_exactly_one_group_and_the_yaml_is_grouped():
    import dataclasses

    from trainer.config import GROUPS, OptimArgs

    grouped = [f.name for cls in GROUPS.values() for f in dataclasses.fields(cls)]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(RunConfig))
    assert len(grouped) == len(set(grouped))
    c = RunConfig(lr=3e-4, warmup_steps=10, max_steps=50)
    assert c.optim == OptimArgs(optimizer="adamw", lr=3e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                warmup_steps=10, schedule="linear", clip_grad=1.0)
    assert c.train.max_steps == 50 and c.model.family == "bert" and c.objective.objectives == ("mlm", "nsp")
    text = c.to_yaml()
    assert [line.split(":")[0] for line in text.splitlines() if line.startswith("# ")] == [f"# {g}" for g in GROUPS]
    assert RunConfig.from_yaml(text) == c
