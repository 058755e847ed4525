"""The encoder families in the registry and the config: what each accepts, what it refuses and
why, and what the launch form gets from as_json()."""
from __future__ import annotations

import json

import pytest

from trainer import families
from trainer.catalog import schema, validation
from trainer.config import RunConfig, choices
from trainer.errors import ConfigError

FAMILIES = ("bert", "roberta", "albert", "spanbert", "electra", "distilbert", "unilm")


def config(family: str = "bert", **changes) -> RunConfig:
    spec = families.get(family)
    base = dict(family=family, preset=spec.default_preset, objectives=list(spec.default_objectives))
    if family == "distilbert":
        base["teacher_checkpoint"] = "/nowhere/teacher"  # checked on disk only by the engine and the web app
    base.update(changes)
    return RunConfig(**base)


def test_every_encoder_family_is_in_the_table_with_its_papers_settings():
    assert tuple(families.names())[:len(FAMILIES)] == FAMILIES  # then T5, GPT, ELMo (test_families_seq.py)
    table = {spec.name: (spec.tokenizer_algorithms, spec.required_objectives, spec.default_objectives,
                         spec.default_masking_unit) for spec in families.all() if spec.name in FAMILIES}
    assert table == {
        "bert": (("wordpiece",), ("mlm",), ("mlm", "nsp"), "token"),
        "roberta": (("bpe",), ("mlm",), ("mlm",), "token"),
        "albert": (("unigram",), ("mlm",), ("mlm", "sop"), "ngram"),
        "spanbert": (("wordpiece",), ("mlm", "sbo"), ("mlm", "sbo"), "span"),
        "electra": (("wordpiece",), ("mlm", "rtd"), ("mlm", "rtd"), "token"),
        "distilbert": (("wordpiece",), ("mlm", "distill"), ("mlm", "distill"), "token"),
        "unilm": (("wordpiece",), ("mlm", "unilm"), ("mlm", "unilm"), "token"),
    }
    roberta = families.get("roberta").optimizer_defaults
    assert roberta["betas"] == [0.9, 0.98] and roberta["eps"] == 1e-6
    for name in FAMILIES:
        c = config(name)
        assert c.masking_unit == families.get(name).default_masking_unit
        assert all(p.startswith(name + "-") for p in families.get(name).presets)
        # whole-word and phrase masking are an option of every MLM-style family but SpanBERT
        if name != "spanbert":
            assert config(name, masking_unit="word").masking_unit == "word"
            assert config(name, masking_unit="phrase").masking_unit == "phrase"


def test_choices_come_from_the_data_layer():
    from trainer.objectives.examples import PACKINGS
    from trainer.objectives.masking import MASKING_UNITS

    assert choices()["masking_unit"] == tuple(MASKING_UNITS) and choices()["packing"] == tuple(PACKINGS)


@pytest.mark.parametrize("family, changes, message", [
    ("roberta", {"objectives": ["mlm", "nsp"]}, "RoBERTa is trained without next sentence prediction (NSP)"),
    ("albert", {"objectives": ["mlm", "nsp"]},
     "ALBERT replaces next sentence prediction (NSP) with sentence order prediction (SOP)"),
    ("spanbert", {"objectives": ["mlm", "nsp", "sbo"]}, "SpanBERT trains on single segments without next sentence"),
    ("bert", {"objectives": ["mlm", "sop"]}, "BERT cannot be trained with Sentence order prediction (SOP)."),
    ("spanbert", {"objectives": ["mlm"]}, "SpanBERT needs the Span boundary objective (SBO)."),
    ("electra", {"objectives": ["mlm"]}, "ELECTRA needs the Replaced token detection (RTD) objective."),
    ("bert", {"packing": "doc-sentences"},
     'packing "doc-sentences" applies to single-segment inputs, but Next sentence prediction (NSP) trains on'),
    ("albert", {"packing": "doc-sentences"}, "but Sentence order prediction (SOP) trains on sentence pairs"),
    ("bert", {"masking_unit": "span", "objectives": ["mlm"]},
     "Span masking (masking_unit \"span\") belongs to SpanBERT's span boundary objective (SBO)"),
    ("roberta", {"masking_unit": "span"}, "choose the SpanBERT family, or another masking unit for RoBERTa"),
    ("spanbert", {"masking_unit": "word"},
     "SpanBERT's span boundary objective (SBO) needs span masking: masking_unit must be \"span\", not 'word'."),
    ("bert", {"masking_unit": "syllable"}, "masking_unit must be one of 'token', 'word', 'phrase', 'ngram', 'span'"),
    ("roberta", {"packing": "shuffled"}, "packing must be one of 'full-sentences', 'doc-sentences'"),
    ("electra", {"model_overrides": {"generator_size": 0.1}}, "generator_size must be between 0.25 and 0.5 for ELECTRA"),
    ("electra", {"model_overrides": {"generator_size": 0.75}}, "generator_size must be between 0.25 and 0.5"),
    ("bert", {"model_overrides": {"generator_size": 0.25}}, "model_overrides do not fit the bert-tiny preset"),
    ("albert", {"model_overrides": {"share_layers": "some"}}, "share_layers must be"),
    ("bert", {"rtd_weight": 10.0}, "rtd_weight applies to ELECTRA only; leave it out for BERT."),
    ("electra", {"rtd_weight": -1.0}, "rtd_weight must be between 0 and 1,000"),
    ("bert", {"distill_temperature": 4.0}, "distill_temperature applies to DistilBERT only"),
    ("distilbert", {"teacher_checkpoint": ""}, "DistilBERT distils a trained BERT teacher: set teacher_checkpoint"),
    ("distilbert", {"distill_soft_weight": 0.0, "distill_mlm_weight": 0.0, "distill_cos_weight": 0.0},
     "cannot all be 0"),
    ("distilbert", {"distill_temperature": 0.0}, "distill_temperature must be between 0.5 and 20"),
    ("spanbert", {"model_overrides": {"max_span_length": 5}}, "max_span_length (the SBO head's position table) must be"),
    ("roberta", {"model_overrides": {"family": "bert"}}, "model_overrides cannot set family"),
])
def test_incompatible_combinations_are_refused_with_a_sentence(family, changes, message):
    with pytest.raises(ConfigError) as e:
        config(family, **changes)
    assert message in str(e.value)


def test_what_is_allowed():
    assert config("bert", objectives=["mlm"], packing="doc-sentences").packing == "doc-sentences"
    assert config("roberta", packing="doc-sentences", masking="dynamic").objectives == ["mlm"]
    assert config("albert", model_overrides={"share_layers": "attention"}).model_overrides["share_layers"] == "attention"
    assert config("albert", objectives=["mlm"]).objectives == ["mlm"]
    assert config("electra", model_overrides={"generator_size": 0.5}, rtd_weight=20.0).rtd_weight == 20.0
    assert config("bert", masking_unit="ngram").masking_unit == "ngram"
    assert config("electra", preset="electra-base").preset == "electra-base"  # generator_size 1/3 in range


@pytest.mark.parametrize("family, algorithm, message", [
    ("roberta", "wordpiece", "RoBERTa needs a bpe tokenizer; this one is wordpiece."),
    ("albert", "bpe", "ALBERT needs a unigram tokenizer; this one is bpe."),
    ("electra", "unigram", "ELECTRA needs a wordpiece tokenizer; this one is unigram."),
])
def test_tokenizer_algorithm_must_suit_the_family(family, algorithm, message):
    validation.validate_tokenizer(config(family), families.get(family).tokenizer_algorithms[0])
    with pytest.raises(ConfigError, match=message):
        validation.validate_tokenizer(config(family), algorithm)


def test_yaml_round_trip_keeps_the_family_fields():
    c = config("electra", model_overrides={"generator_size": 1 / 3}, rtd_weight=25.0, masking_unit="word",
               packing="doc-sentences")
    back = RunConfig.from_yaml(c.to_yaml())
    assert back == c and back.to_dict()["model_overrides"] == {"generator_size": 1 / 3}
    d = config("distilbert", distill_temperature=3.0, distill_cos_weight=0.5)
    assert RunConfig.from_yaml(d.to_yaml()) == d
    old = {k: v for k, v in config("bert").to_dict().items() if k not in ("masking_unit", "packing", "rtd_weight")}
    assert RunConfig.from_dict(old).masking_unit == "token"  # a config saved before these fields existed


def test_as_json_tells_the_form_everything_per_family():
    data = schema.as_json()
    json.dumps(data)
    archs = {a["name"]: a for a in data["families"]}
    assert list(archs)[:len(FAMILIES)] == list(FAMILIES)
    assert archs["roberta"]["default_tokenizer_algorithm"] == "bpe" and archs["roberta"]["objectives"] == ["mlm"]
    assert "RoBERTa is trained without" in archs["roberta"]["refusals"]["nsp"]
    assert archs["albert"]["masking_units"][0] == "ngram" and archs["albert"]["default_masking_unit"] == "ngram"
    share = archs["albert"]["model_fields"][0]
    assert share["name"] == "share_layers" and share["default"] == "all"
    assert [c[0] for c in share["choices"]] == ["all", "attention", "ffn", "none"]
    gen = archs["electra"]["model_fields"][0]
    assert (gen["name"], gen["default"], gen["min"], gen["max"]) == ("generator_size", 0.25, 0.25, 0.5)
    assert archs["electra"]["config_fields"] == ["rtd_weight"] and data["fields"]["rtd_weight"]["default"] == 50.0
    assert archs["distilbert"]["needs_teacher"] and "teacher_checkpoint" in archs["distilbert"]["config_fields"]
    assert [data["fields"][f]["default"] for f in ("distill_temperature", "distill_soft_weight", "distill_mlm_weight",
                                                   "distill_cos_weight")] == [2.0, 5.0, 2.0, 1.0]
    assert archs["spanbert"]["masking_units"] == ["span"]
    assert set(data["masking_units"]) == {"token", "word", "phrase", "ngram", "span"}
    assert set(data["packings"]) == {"full-sentences", "doc-sentences"}
    assert set(data["tokenizer_algorithms"]) == {"wordpiece", "bpe", "unigram"}
    assert data["fields"]["masking_unit"]["choices"][0] == ["token", "Tokens (BERT)"] and data["fields"]["masking_unit"]["help"]
    for name in ("sop", "sbo", "rtd", "distill", "unilm"):
        assert data["objectives"][name]["label"] and data["objectives"][name]["help"]
    assert data["objectives"]["rtd"]["metrics"] == ["rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"]
    albert_tiny = next(p for p in archs["albert"]["presets"] if p["name"] == "albert-tiny")
    bert_tiny = next(p for p in archs["bert"]["presets"] if p["name"] == "bert-tiny")
    assert albert_tiny["params_without_embeddings"] * 2 == bert_tiny["params_without_embeddings"]  # one shared block
