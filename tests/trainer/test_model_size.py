"""One size check before allocation (trainer/catalog/size.py): launching a run and importing a
Hugging Face model refuse a model that does not fit with a sentence naming the field."""
from __future__ import annotations

import json

import pytest

from trainer.catalog.size import available_memory, check_model_size
from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.inference.importing import ModelImportError, check_import_size


def test_an_absurd_override_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"model_overrides.hidden_size = 1,000,000,000 gives a model of "
                                          r"[\d,]+ parameters.*MAX_MODEL_PARAMS.*Use a smaller model_overrides.hidden_size"):
        RunConfig(model_overrides={"hidden_size": 10**9, "num_heads": 1})


def test_the_count_is_the_model_s_and_memory_is_checked_when_asked():
    from models_lib.families.bert import BertConfig, BertForPreTraining

    cfg = BertConfig.from_preset("bert-tiny", vocab_size=1000)
    params = sum(p.numel() for p in BertForPreTraining(cfg).parameters())
    assert check_model_size(cfg, training=True, fields={}, where="x", memory=False) == params
    assert check_model_size(cfg, training=True, fields={}, where="x", memory=16 * params) == params
    with pytest.raises(ConfigError, match="needs about .* to train, more than the .* of memory this machine has free"):
        check_model_size(cfg, training=True, fields={"num_layers": 2}, where="x", memory=16 * params - 1)
    assert check_model_size(cfg, training=False, fields={}, where="x", memory=4 * params) == params  # loading: 4 B
    with pytest.raises(ConfigError, match="more than the 1,000 this installation allows"):
        check_model_size(cfg, training=True, fields={}, where="x", memory=False, max_params=1000)
    assert available_memory() is None or available_memory() > 0


@pytest.mark.parametrize("hf, field", [
    ({"model_type": "bert", "hidden_size": 200_000, "num_hidden_layers": 2, "num_attention_heads": 2,
      "intermediate_size": 512, "vocab_size": 30522}, "config.json's hidden_size = 200,000"),
    ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 4_000_000_000, "n_positions": 64},
     "config.json's vocab_size = 4,000,000,000"),
])
def test_an_import_too_large_is_refused_before_loading_anything(hf, field):
    with pytest.raises(ModelImportError, match=f"This model: {field} gives a model of"):
        check_import_size(hf)


def test_a_plausible_import_passes_with_its_count():
    hf = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64}
    assert check_import_size(json.loads(json.dumps(hf))) > 0


def test_the_import_checks_the_size_before_it_loads_the_weights(tmp_path, monkeypatch):
    from tests.trainer.importing_helpers import write_tiny_hf_bert
    from trainer.inference import importing

    folder = write_tiny_hf_bert(tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 200_000, "intermediate_size": 512}))
    monkeypatch.setattr(importing, "_load_model", lambda src: pytest.fail("the weights were loaded"))
    with pytest.raises(ModelImportError, match="config.json's hidden_size = 200,000 gives a model of"):
        importing.import_hf_directory(folder, tmp_path / "out")


def test_activations_grow_with_the_batch_and_the_square_of_the_length_and_count_in_the_same_check():
    from models_lib.families.bert import BertConfig
    from trainer.catalog.size import Batch, activation_bytes

    cfg = BertConfig.from_preset("bert-tiny", vocab_size=1000)
    one = activation_bytes(cfg, Batch(8, 128))
    assert activation_bytes(cfg, Batch(16, 128)) == 2 * one
    assert activation_bytes(cfg, Batch(8, 256)) > 2 * one  # the attention scores: length squared
    assert activation_bytes(cfg, Batch(8, 128, recompute=True)) < one  # one layer live at a time
    weights = 16 * cfg.count_params(embeddings=True)
    batch = Batch(64, 512, "batch_size", "seq_len")
    assert check_model_size(cfg, training=True, fields={}, where="x", memory=weights, batch=None) > 0
    with pytest.raises(ConfigError, match=r"x: batch_size = 64 sequences of seq_len = 512 tokens keep about .* of "
                                          r"activations for the backward pass .* Use a smaller batch_size or seq_len"):
        check_model_size(cfg, training=True, fields={}, where="x", memory=weights + 1000, batch=batch)
    # loading (explorer, export) keeps no activations for a backward pass
    assert check_model_size(cfg, training=False, fields={}, where="x", memory=weights, batch=batch) > 0


@pytest.mark.parametrize("family, preset", [("t5", "t5-tiny"), ("gpt", "gpt-tiny"), ("elmo", "elmo-tiny"),
                                            ("xlnet", "xlnet-tiny"), ("electra", "electra-tiny"),
                                            ("transfo_xl", "transfo-xl-tiny")])
def test_every_family_has_an_activation_estimate(family, preset):
    from trainer import families
    from trainer.catalog.size import Batch, activation_bytes

    cfg = families.get(family).preset_config(preset, vocab_size=1000)
    assert activation_bytes(cfg, Batch(4, 64)) > 0
