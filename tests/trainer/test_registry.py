"""The family table: refusals of impossible combinations and the launch-form JSON."""
from __future__ import annotations

import json

import pytest

from trainer import families
import dataclasses

from trainer.catalog import schema, validation
from trainer.objectives import lm
from trainer.config import RunConfig
from trainer.errors import ConfigError


def test_bert_is_in_the_table_with_models_lib_presets():
    spec = families.get("bert")
    assert spec.label == "BERT" and spec.family == "bert"
    assert {"bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large"} <= set(spec.presets)
    assert spec.objectives == ("mlm", "nsp") and spec.required_objectives == ("mlm",)
    assert spec.tokenizer_algorithms == ("wordpiece",)
    assert spec.allowed_objective_sets() == [["mlm"], ["mlm", "nsp"]]


@pytest.mark.parametrize("changes, message", [
    ({"family": "bart"}, "Unknown family 'bart'; choose one of 'bert', 'roberta'"),
    ({"preset": "bert-huge"}, "Unknown BERT preset 'bert-huge'; choose one of bert-tiny"),
    ({"objectives": ["nsp"]}, "BERT needs the Masked language modelling (MLM) objective"),
    ({"objectives": ["mlm", "sop"]}, "BERT cannot be trained with Sentence order prediction (SOP)."),
    ({"objectives": ["mlm", "xyz"]}, "Unknown objective 'xyz'"),
])
def test_incompatible_combinations_are_refused(changes, message):
    with pytest.raises(ConfigError) as e:
        RunConfig(**changes)
    assert message in str(e.value)


def test_an_objective_the_architecture_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(lm, "CLM", dataclasses.replace(lm.CLM, label="Causal LM"))
    with pytest.raises(ConfigError, match="BERT cannot be trained with Causal LM"):
        RunConfig(objectives=["mlm", "clm"])


def test_tokenizer_algorithm_must_suit_the_architecture():
    validation.validate_tokenizer(RunConfig(), "wordpiece")
    with pytest.raises(ConfigError, match="BERT needs a wordpiece tokenizer; this one is bpe"):
        validation.validate_tokenizer(RunConfig(), "bpe")


def test_launch_form_json():
    data = schema.as_json()
    json.dumps(data)  # JSON-able
    bert = next(a for a in data["families"] if a["name"] == "bert")
    tiny = next(p for p in bert["presets"] if p["name"] == "bert-tiny")
    assert (tiny["layers"], tiny["hidden"], tiny["heads"], tiny["ffn"], tiny["max_positions"]) == (2, 128, 2, 512, 512)
    base = next(p for p in bert["presets"] if p["name"] == "bert-base")
    assert 84e6 < base["params_without_embeddings"] < 86e6  # BERT-base: 110M with its 30k x 768 embeddings
    assert bert["default_objectives"] == ["mlm", "nsp"] and bert["optimizer_defaults"]["lr"] == 1e-4
    assert set(data["objectives"]) >= {"mlm", "nsp", "sop", "sbo", "rtd", "distill", "unilm"}  # + T5, GPT, ELMo
    assert data["objectives"]["nsp"]["help"]
    fields = data["fields"]
    assert fields["seq_len"]["default"] == 128 and fields["seq_len"]["min"] == 16
    assert fields["masking"]["choices"] == [["dynamic", "Dynamic"], ["static", "Static"]]
    assert fields["lr"]["help"] and fields["betas"]["default"] == [0.9, 0.999]
