"""Each config counts its own model's parameters: count_params(embeddings=True) is exactly what
the family's pre-training model holds (shared and tied tensors once), for a tiny model of every
family and the variants that change the count (shared layers, factorised embeddings, a pooler or
none, untied outputs, T5 v1.1, GPT-1, ELMo's character CNN, SpanBERT's SBO head, ELECTRA's
generator). Without embeddings it is the launch form's number: the layers only."""
from __future__ import annotations

import pytest

from models_lib.checkpoint import FAMILIES
from models_lib.families import presets

SMALL = {"hidden_size": 32, "num_heads": 2, "num_layers": 2, "intermediate_size": 48}

CASES = [
    ("bert-tiny", SMALL),
    ("bert-tiny", {**SMALL, "use_pooler": False}),
    ("roberta-tiny", SMALL),
    ("roberta-tiny", {**SMALL, "use_pooler": True}),  # a pooler, but RoBERTa has no pair head on it
    ("albert-tiny", {**SMALL, "embedding_size": 16}),
    ("albert-tiny", {**SMALL, "embedding_size": 16, "share_layers": "attention"}),
    ("albert-tiny", {**SMALL, "share_layers": "ffn", "embedding_size": None}),
    ("albert-tiny", {**SMALL, "share_layers": "none"}),
    ("spanbert-tiny", SMALL),
    ("spanbert-tiny", {**SMALL, "embedding_size": 16, "max_span_length": 12}),
    ("electra-tiny", SMALL),
    ("electra-tiny", {**SMALL, "embedding_size": 16, "generator_size": 0.5}),
    ("distilbert-tiny", SMALL),
    ("unilm-tiny", SMALL),
    ("t5-tiny", {"d_model": 32, "d_kv": 8, "d_ff": 48, "num_heads": 2, "num_layers": 2, "num_decoder_layers": 1}),
    ("t5-tiny", {"d_model": 32, "d_kv": 8, "d_ff": 48, "num_heads": 2, "version": "1.1"}),
    ("gpt-tiny", {**SMALL, "max_position_embeddings": 64}),
    ("gpt-tiny", {**SMALL, "norm_placement": "post", "tie_word_embeddings": False}),
    ("elmo-tiny", {"embedding_dim": 16, "hidden_size": 32}),
    ("elmo-tiny", {"embedding_dim": 16, "hidden_size": 16}),  # no projection when P = H
    ("elmo-tiny", {"embedding_dim": 16, "hidden_size": 32, "tie_embeddings": True}),
    ("elmo-tiny", {"embedding_dim": 16, "hidden_size": 32, "char_cnn": True, "highway_layers": 2}),
]


def pretraining_model(config):
    """The family's pre-training model (the first class models_lib.checkpoint registers for it)."""
    return FAMILIES[config.family].model_classes[0](config)


@pytest.mark.parametrize("preset, overrides", CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
def test_count_params_with_embeddings_is_every_parameter_of_the_model(preset, overrides):
    config = presets.get(preset, vocab_size=101, **overrides)
    model = pretraining_model(config)
    assert config.count_params(embeddings=True) == sum(p.numel() for p in model.parameters())
    assert 0 < config.count_params() < config.count_params(embeddings=True)


def test_without_embeddings_only_the_layers_count():
    bert = presets.get("bert-tiny", vocab_size=101, **SMALL)
    model = pretraining_model(bert)
    layers = sum(p.numel() for p in model.backbone.encoder.parameters())
    assert bert.count_params() == layers
    assert presets.get("bert-tiny", vocab_size=30_000, **SMALL).count_params() == layers  # the vocabulary does not count
    shared = presets.get("albert-tiny", vocab_size=101, **{**SMALL, "share_layers": "all"})
    assert shared.count_params() * 2 == bert.count_params()  # one block, applied twice


@pytest.mark.parametrize("preset, keys, label", [
    ("bert-tiny", ["layers", "hidden", "heads", "ffn", "label"], "L2 H128 A2"),
    ("gpt-tiny", ["layers", "hidden", "heads", "ffn", "label"], "L2 H128 A2"),
    ("t5-tiny", ["layers", "decoder_layers", "hidden", "heads", "ffn", "label"], "L2+2 H64 A4"),
    ("elmo-tiny", ["layers", "hidden", "projection", "heads", "ffn", "label"], "L2 H128 P64"),
])
def test_shape_describes_the_preset_for_the_form(preset, keys, label):
    shape = presets.get(preset, vocab_size=101).shape()
    assert list(shape) == keys and shape["label"] == label
