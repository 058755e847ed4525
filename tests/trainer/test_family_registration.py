"""trainer.families: one registration table of lazy import strings, and a family needs nothing
but its own module and one line there. A toy family defined in this file (its config, presets
and model too) is registered by patching the table, and appears in the launch form's schema
and passes validation like any other."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainer import families
from trainer.catalog import schema, validation
from trainer.errors import ConfigError
from trainer.families import Family
from trainer.config import RunConfig

# ---------------------------------------------------------------------------- a toy family
TOY_PRESETS = {"toy-small": {"hidden": 8}, "toy-wide": {"hidden": 16}}


@dataclass
class ToyConfig:
    """A models_lib-like config: from_preset, max_positions, shape() and count_params()."""

    family: str = "toy"
    vocab_size: int = 10
    hidden: int = 8
    pad_token_id: int = 0
    max_positions: int = 64

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "ToyConfig":
        if name not in TOY_PRESETS:
            raise ValueError(f"Unknown toy preset {name!r}.")
        return cls(**{**TOY_PRESETS[name], **overrides})

    def shape(self) -> dict[str, Any]:
        return {"layers": 1, "hidden": self.hidden, "heads": 1, "ffn": 0, "label": f"L1 H{self.hidden}"}

    def count_params(self, embeddings: bool = False) -> int:
        return self.hidden * self.hidden + (self.vocab_size * self.hidden if embeddings else 0)


class ToyModel:
    def __init__(self, config: ToyConfig):
        self.config = config


TOY = Family(
    name="toy",
    label="Toy",
    preset_table=f"{__name__}:TOY_PRESETS",
    config_class=f"{__name__}:ToyConfig",
    model_class=f"{__name__}:ToyModel",
    flops_formula="",
    no_flops="a toy's one layer has no FLOPs formula.",
    objectives=("mlm",),
    required_objectives=("mlm",),
    default_objectives=("mlm",),
    tokenizer_algorithms=("wordpiece",),
    default_preset="toy-small",
    about="A one-layer toy.",
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(families.REGISTRY, "toy", f"{__name__}:TOY")  # the one registration line
    return families.get("toy")


def test_a_registered_family_appears_in_the_launch_form_schema(toy):
    assert toy is TOY and families.names()[-1] == "toy" and families.all()[-1] is TOY
    data = schema.as_json()
    arch = data["families"][-1]
    assert (arch["name"], arch["label"], arch["family"], arch["about"]) == ("toy", "Toy", "toy", "A one-layer toy.")
    assert arch["presets"] == [
        {"name": "toy-small", "layers": 1, "hidden": 8, "heads": 1, "ffn": 0, "max_positions": 64,
         "params_without_embeddings": 64, "label": "L1 H8"},
        {"name": "toy-wide", "layers": 1, "hidden": 16, "heads": 1, "ffn": 0, "max_positions": 64,
         "params_without_embeddings": 256, "label": "L1 H16"},
    ]
    assert arch["default_preset"] == "toy-small" and arch["default_objectives"] == ["mlm"]
    assert arch["allowed_objective_sets"] == [["mlm"]] and arch["default_masking_unit"] == "token"
    assert [a["name"] for a in data["families"][:-1]] == [n for n in families.names() if n != "toy"]


def test_a_registered_family_is_validated_like_any_other(toy):
    config = RunConfig(family="toy", preset="toy-wide", objectives=["mlm"], seq_len=64)
    validation.validate(config)
    validation.validate_tokenizer(config, "wordpiece")
    assert isinstance(toy.build_model(toy.preset_config("toy-small", vocab_size=5)), ToyModel)
    with pytest.raises(ConfigError, match="Toy cannot be trained with Next sentence prediction"):
        RunConfig(family="toy", preset="toy-small", objectives=["mlm", "nsp"])
    with pytest.raises(ConfigError, match="Unknown Toy preset 'toy-huge'; choose one of toy-small, toy-wide"):
        RunConfig(family="toy", preset="toy-huge", objectives=["mlm"])
    with pytest.raises(ConfigError, match="seq_len must be between 16 and the model's 64 positions"):
        RunConfig(family="toy", preset="toy-small", objectives=["mlm"], seq_len=128)
    with pytest.raises(ConfigError, match="Toy needs a wordpiece tokenizer; this one is bpe"):
        validation.validate_tokenizer(config, "bpe")
    with pytest.raises(ConfigError, match="rtd_weight applies to ELECTRA only; leave it out for Toy"):
        RunConfig(family="toy", preset="toy-small", objectives=["mlm"], rtd_weight=10.0)


def test_an_unregistered_family_is_unknown():
    with pytest.raises(ConfigError, match="Unknown family 'toy'; choose one of 'bert', 'roberta'"):
        families.get("toy")
    assert "toy" not in families.names() and families.find("toy") is None


# ---------------------------------------------------------------------------- the real table
# (Checked per family, so that adding one touches none of these tests.)
THE_NOTES = ("bert", "roberta", "albert", "spanbert", "electra", "distilbert", "unilm", "t5", "gpt", "elmo")


def test_every_family_is_registered_once_under_its_own_name():
    assert families.names()[:len(THE_NOTES)] == list(THE_NOTES)
    assert [f.name for f in families.all()] == families.names()
    assert all(families.REGISTRY[n] == f"trainer.families.{n}:FAMILY" for n in families.names())


def test_hugging_face_formats_are_what_models_lib_imports():
    from models_lib import hf

    from trainer.inference.importing import supported_model_types

    assert supported_model_types() == hf.supported_model_types()
    assert families.find("gpt2") is families.get("gpt") and families.find("T5") is families.get("t5")


def test_each_family_says_what_the_explorer_can_ask_it():
    kinds = {f.name: f.explorer_kind for f in families.all() if f.name in THE_NOTES}
    assert kinds == {"bert": "encoder", "roberta": "encoder", "albert": "encoder", "spanbert": "encoder",
                     "electra": "encoder", "distilbert": "encoder", "unilm": "unilm", "t5": "t5", "gpt": "gpt",
                     "elmo": "elmo"}
    ours = [families.get(n) for n in THE_NOTES]
    assert [f.name for f in ours if f.generates] == ["unilm", "t5", "gpt"]
    assert [f.name for f in ours if not f.masked_lm] == ["t5", "gpt", "elmo"]
    stacks = {f.name: f.attention_stacks for f in ours if f.attention_stacks != ("encoder",)}
    assert stacks == {"t5": ("encoder", "decoder", "cross"), "gpt": ("decoder",), "elmo": ()}
    assert families.get("elmo").no_attention and families.get("elmo").word_vectors
    assert [f.name for f in ours if f.needs_teacher] == ["distilbert"]


def test_importing_the_families_imports_no_torch():
    code = ("import sys; from trainer import families; from trainer.catalog import validation; "
            "families.all(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------- hooks
def test_elmo_prepares_its_character_table_from_the_tokenizer(tokenizer_dir):
    import torch

    from models_lib.families.elmo import char_table
    from trainer.prep.segmenter import vocab_strings
    from trainer.prep.tokenization import load_tokenizer

    elmo, tok = families.get("elmo"), load_tokenizer(tokenizer_dir)
    cfg = elmo.preset_config("elmo-tiny", vocab_size=tok.vocab_size, char_cnn=True)
    ours = elmo.build_model(cfg)
    elmo.prepare_model(ours, tok)
    expected = char_table([s or "" for s in vocab_strings(tok)], max_chars=cfg.max_chars)  # each id's spelling
    assert ours.char_table.any() and torch.equal(ours.char_table, expected)
    with pytest.raises(ConfigError, match="ELMo's character CNN spells every token of the vocabulary"):
        elmo.prepare_model(elmo.build_model(cfg), None)
    elmo.prepare_model(elmo.build_model(elmo.preset_config("elmo-tiny", vocab_size=50)), None)  # no CNN: nothing
    families.get("bert").prepare_model(object(), None)  # most families need nothing


def test_the_model_config_hooks_refuse_with_a_sentence():
    spanbert = families.get("spanbert")
    spanbert.check_model_config(spanbert.preset_config("spanbert-tiny", vocab_size=50))
    with pytest.raises(ConfigError, match="max_span_length .* must be at least 10, not 8"):
        spanbert.check_model_config(spanbert.preset_config("spanbert-tiny", vocab_size=50, max_span_length=8))
    with pytest.raises(ConfigError, match="BERT has no teacher to check: teacher_checkpoint is empty"):
        validation.validate_teacher(RunConfig())
    with pytest.raises(ConfigError, match="BERT trains without a teacher"):
        families.get("bert").student_overrides({"num_layers": 4})
    distilbert = families.get("distilbert")
    teacher = {"num_layers": 5, "hidden_size": 64, "num_heads": 2, "intermediate_size": None}
    assert distilbert.student_overrides(teacher) == {
        "num_layers": 3, "hidden_size": 64, "num_heads": 2, "intermediate_size": 256, "max_position_embeddings": 512}
    assert distilbert.teacher_families == ("bert",)


def test_prompt_ids_follow_each_familys_training_layout(tokenizer_dir):
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    plain = tok.tok.encode("the value", add_special_tokens=False).ids
    assert families.get("bert").prompt_ids(tok, "the value") == [tok.cls_id, *plain, tok.sep_id]
    assert families.get("t5").prompt_ids(tok, "the value") == [*plain, tok.sep_id]
    assert families.get("gpt").prompt_ids(tok, "the value") == plain
    assert families.get("unilm").generate_kwargs(tok) == {"mask_token_id": tok.mask_id}
    assert families.get("gpt").generate_kwargs(tok) == {}
