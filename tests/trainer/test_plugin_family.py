"""Adding a model family takes its Family (trainer.families), its models (models_lib), its test and
one registration line on each side (trainer.families.REGISTRY, models_lib.checkpoint.register_family).

This file is all of that for a toy encoder, "toybert": BERT's backbone and MLM head under a new
name, with a FLOPs formula, an activation estimate and explorer sentences of its own. Registered,
it appears everywhere a family should: the launch form's schema, RunConfig validation, a short
training run whose checkpoint loads back as a toybert model, the run's MFU (its formula), the
memory check (its hook) and the explorer (its capabilities and sentences). Unregistered, none of
it is there.
"""
from __future__ import annotations

from typing import Any

import pytest

from models_lib import checkpoint
from models_lib.core.config import EncoderConfig
from models_lib.core.encoder import TransformerEncoder
from models_lib.families.bert import BertForPreTraining
from trainer import families
from trainer.catalog import schema, size
from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.families import Family, activations
from trainer.families.encoders import WORD_UNITS
from trainer.training import flops

# ---------------------------------------------------------------------------- the models (models_lib's side)
TOYBERT_PRESETS = {"toybert-tiny": {"family": "toybert", "num_layers": 2, "hidden_size": 64, "num_heads": 2,
                                    "use_pooler": False}}


class ToyBertForPreTraining(BertForPreTraining):
    """BERT's model (MLM; no pooler, so no NSP head) for toybert configs."""

    families = ("toybert",)


def register_models() -> None:
    """The one models_lib registration line."""
    checkpoint.register_family("toybert", EncoderConfig, ToyBertForPreTraining, TransformerEncoder, label="ToyBERT",
                               presets=TOYBERT_PRESETS)


# ---------------------------------------------------------------------------- the family (trainer's side)
def toy_flops(c: Any, w: flops.Workload) -> float:
    """Its own formula: an encoder's, counted twice (so that the test can tell it from BERT's)."""
    return 2 * flops.encoder_flops(c, w)


class ToyBertFamily(Family):
    def activation_bytes(self, model_cfg: Any, batch: size.Batch) -> int:
        """Its own estimate: three blocks' worth a layer."""
        return activations.transformer_activation_bytes(model_cfg, batch, factor=3.0)


TOYBERT = ToyBertFamily(
    name="toybert",
    label="ToyBERT",
    about="BERT's encoder under a test's name.",
    preset_table=f"{__name__}:TOYBERT_PRESETS",
    config_class="models_lib.core.config:EncoderConfig",
    model_class=f"{__name__}:ToyBertForPreTraining",
    flops_formula=f"{__name__}:toy_flops",
    objectives=("mlm",),
    required_objectives=("mlm",),
    default_objectives=("mlm",),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    default_preset="toybert-tiny",
    explorer_about="ToyBERT: fill in masks.",
    explorer_about_tuned="ToyBERT fine-tuned for {task}.",
)


@pytest.fixture
def toybert(monkeypatch):
    monkeypatch.setitem(families.REGISTRY, "toybert", f"{__name__}:TOYBERT")  # the one trainer registration line
    register_models()
    yield families.get("toybert")
    del checkpoint.FAMILIES["toybert"]


def toy_config(**changes: Any) -> RunConfig:
    base = dict(family="toybert", preset="toybert-tiny", objectives=["mlm"], max_steps=4, batch_size=4, seq_len=32,
                lr=1e-3, warmup_steps=1, eval_every=4, eval_batches=1, checkpoint_every=4, log_every=2, seed=0,
                device="cpu", num_threads=1)
    return RunConfig(**{**base, **changes})


# ---------------------------------------------------------------------------- registered
def test_it_is_listed_in_the_registry_and_the_launch_form_schema(toybert):
    assert toybert is TOYBERT and families.names()[-1] == "toybert"
    arch = schema.as_json()["families"][-1]
    assert (arch["name"], arch["label"], arch["about"]) == ("toybert", "ToyBERT", "BERT's encoder under a test's name.")
    assert [p["name"] for p in arch["presets"]] == ["toybert-tiny"]
    assert arch["presets"][0]["layers"] == 2 and arch["presets"][0]["hidden"] == 64
    assert arch["default_objectives"] == ["mlm"]


def test_models_lib_knows_its_config_and_presets(toybert):
    from models_lib.families import presets

    cfg = toybert.preset_config("toybert-tiny", vocab_size=100)
    assert type(cfg) is EncoderConfig and cfg.family == "toybert" and cfg.label == "ToyBERT"
    assert presets.list_presets("toybert") == ["toybert-tiny"] and "toybert-tiny" in presets.list_presets()
    assert isinstance(toybert.build_model(cfg), ToyBertForPreTraining)


def test_a_run_config_of_it_validates(toybert):
    from trainer.catalog import validation

    config = toy_config()
    validation.validate(config)
    with pytest.raises(ConfigError, match="ToyBERT cannot be trained with"):
        toy_config(objectives=["mlm", "nsp"])


def test_it_trains_writes_a_checkpoint_that_loads_back_and_counts_its_flops(toybert, tokenizer_dir, tmp_path):
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    sink = ListSink()
    result = train(toy_config(), data_dir=tokenizer_dir, out_dir=tmp_path / "run", sink=sink)
    assert result.status == "succeeded" and result.last_checkpoint is not None
    assert checkpoint.read_model_config(result.last_checkpoint)["family"] == "toybert"
    model = checkpoint.load_model(result.last_checkpoint)
    assert type(model) is ToyBertForPreTraining and model.config.family == "toybert"

    # MFU is computed with its own formula (the run's log names the FLOPs per token it counts).
    work = flops.Workload(seq_len=32, predicted=toy_config().mask_prob, objectives=("mlm",), targets=32 // 6,
                          batch_size=4)
    per_token = flops.training_flops_per_token(model.config, work)
    assert per_token == 2 * flops.encoder_flops(model.config, work)
    assert f"MFU counts {per_token / 1e6:,.1f} MFLOP per token" in "\n".join(sink.lines)
    assert not any("MFU is not counted" in line for line in sink.lines)


def test_the_memory_check_uses_its_activation_hook(toybert):
    cfg = toybert.preset_config("toybert-tiny", vocab_size=100)
    batch = size.Batch(8, 32)
    generic = activations.transformer_activation_bytes(cfg, batch)
    assert size.activation_bytes(cfg, batch) == activations.transformer_activation_bytes(cfg, batch, factor=3.0) > generic
    weights = cfg.count_params(embeddings=True) * size.TRAIN_BYTES_PER_PARAM
    memory = weights + 2 * generic  # room for BERT's estimate, not for three blocks a layer
    with pytest.raises(ConfigError, match="keep about .* of activations for the backward pass"):
        size.check_model_size(cfg, training=True, fields={}, where="This run", memory=memory, batch=batch)


def test_the_explorer_reads_its_capabilities_and_sentences(toybert):
    from webapp.explorer import services

    assert services.family_kind("toybert") == "encoder" and services.embeds_sentences("toybert")
    assert services.checkpoint_about("toybert", "") == "ToyBERT: fill in masks."
    assert services.checkpoint_about("toybert", "token_classification").startswith("ToyBERT fine-tuned for ")
    assert toybert.masked_lm and not toybert.generates and not toybert.causal_lm and not toybert.permutation_fill


# ---------------------------------------------------------------------------- unregistered, and the rules
def test_unregistered_it_is_nowhere():
    from models_lib.families import presets

    assert "toybert" not in families.names() and families.find("toybert") is None
    assert "toybert" not in checkpoint.FAMILIES and "toybert-tiny" not in presets.list_presets()
    with pytest.raises(ValueError, match="Unknown model family 'toybert'"):
        EncoderConfig(family="toybert")
    with pytest.raises(ConfigError, match="Unknown family 'toybert'"):
        toy_config()


def test_a_family_without_a_flops_formula_must_say_why():
    from dataclasses import replace

    with pytest.raises(TypeError, match="names no flops_formula; give one, or say in no_flops why"):
        replace(TOYBERT, flops_formula="")
    silent = replace(TOYBERT, flops_formula="", no_flops="a toy's FLOPs are nobody's business.")
    assert silent.flops_per_token(None, flops.Workload(seq_len=8)) is None
