"""Parity with transformers for RoBERTa, ALBERT, ELECTRA and DistilBERT on tiny random weights.

For each transformers class: its folder loads into our model with equal hidden states and
logits (with padding); our export of that model loads back into the same class with no
missing or unexpected keys; and our own freshly built models export to the classes
transformers pre-trains with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402
from models_lib.families import presets  # noqa: E402
from models_lib.families.albert import AlbertForPreTraining  # noqa: E402
from models_lib.core.config import ElectraConfig, EncoderConfig, SpanBertConfig  # noqa: E402
from models_lib.families.distilbert import DistilBertForPreTraining  # noqa: E402
from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator  # noqa: E402
from models_lib.core.encoder import TransformerEncoder  # noqa: E402
from models_lib.families.roberta import RobertaForPreTraining  # noqa: E402
from models_lib.families.spanbert import SpanBertForPreTraining  # noqa: E402
from tests.models_lib.helpers import padded_batch, randomise  # noqa: E402

TOL = dict(atol=1e-4, rtol=1e-4)
V = 97
SIZE = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=40)


@dataclass(frozen=True)
class Case:
    hf_class: str
    hf_config: Callable[[], object]
    ours: type  # what from_pretrained must return
    pad_id: int = 0
    segments: bool = True  # the family has token types worth passing


CASES = {
    "roberta-mlm": Case("RobertaForMaskedLM", lambda: transformers.RobertaConfig(
        **SIZE, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5), RobertaForPreTraining, pad_id=1, segments=False),
    "roberta-model": Case("RobertaModel", lambda: transformers.RobertaConfig(
        **SIZE, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5), RobertaForPreTraining, pad_id=1, segments=False),
    "albert-pretraining": Case("AlbertForPreTraining", lambda: transformers.AlbertConfig(**SIZE, embedding_size=32),
                               AlbertForPreTraining),
    "albert-mlm-unshared": Case("AlbertForMaskedLM", lambda: transformers.AlbertConfig(
        **SIZE, embedding_size=32, num_hidden_groups=2), AlbertForPreTraining),
    "albert-model": Case("AlbertModel", lambda: transformers.AlbertConfig(**SIZE, embedding_size=32), AlbertForPreTraining),
    "electra-discriminator": Case("ElectraForPreTraining", lambda: transformers.ElectraConfig(**SIZE, embedding_size=32),
                                  ElectraDiscriminator),
    "electra-generator": Case("ElectraForMaskedLM", lambda: transformers.ElectraConfig(
        **{**SIZE, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}, embedding_size=48),
        ElectraGenerator),
    "electra-model-no-projection": Case("ElectraModel", lambda: transformers.ElectraConfig(**SIZE, embedding_size=64),
                                        ElectraDiscriminator),
    "distilbert-mlm": Case("DistilBertForMaskedLM", lambda: transformers.DistilBertConfig(
        vocab_size=V, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=40),
        DistilBertForPreTraining, segments=False),
    "distilbert-model": Case("DistilBertModel", lambda: transformers.DistilBertConfig(
        vocab_size=V, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=40),
        DistilBertForPreTraining, segments=False),
}


def theirs_outputs(model, input_ids, attention_mask, token_type_ids) -> dict[str, torch.Tensor]:
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    if token_type_ids is not None:
        kwargs["token_type_ids"] = token_type_ids
    with torch.no_grad():
        ref = model(**kwargs)
    out = {"hidden_states": ref.hidden_states}
    for ours_name, their_names in (("logits", ("logits", "prediction_logits")), ("sop", ("sop_logits",)),
                                   ("pooled", ("pooler_output",))):
        for name in their_names:
            if getattr(ref, name, None) is not None:
                out[ours_name] = getattr(ref, name)
    return out


def ours_outputs(model, input_ids, attention_mask, token_type_ids) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = {"hidden_states": model.encode(input_ids, attention_mask, token_type_ids, output_hidden_states=True)}
        if isinstance(model, ElectraDiscriminator):
            out["logits"] = model(input_ids, attention_mask, token_type_ids)
        else:
            res = model(input_ids, attention_mask, token_type_ids)
            out["logits"] = res.mlm_logits
            if res.sop_logits is not None:
                out["sop"] = res.sop_logits
        pooled = model.backbone(input_ids, attention_mask, token_type_ids).pooled
        if pooled is not None:
            out["pooled"] = pooled
    return out


def assert_same(ours: dict, theirs: dict, attention_mask: torch.Tensor) -> None:
    keep = attention_mask.bool()  # padded positions are garbage in both libraries
    assert len(ours["hidden_states"]) == len(theirs["hidden_states"])
    for a, b in zip(ours["hidden_states"], theirs["hidden_states"]):
        torch.testing.assert_close(a[keep], b[keep], **TOL)
    for name in theirs.keys() - {"hidden_states"}:
        a, b = ours[name], theirs[name]
        torch.testing.assert_close(a[keep] if name == "logits" else a, b[keep] if name == "logits" else b, **TOL)


@pytest.fixture(scope="module", params=list(CASES))
def imported(request, tmp_path_factory):
    """(case, their model with random weights, ours read from its folder)."""
    case = CASES[request.param]
    torch.manual_seed(0)
    theirs = randomise(getattr(transformers, case.hf_class)(case.hf_config()), seed=len(request.param))
    folder = tmp_path_factory.mktemp(request.param)
    theirs.save_pretrained(folder)
    return case, theirs, hf.from_pretrained(folder)


def test_from_pretrained_matches_transformers_with_padding(imported):
    case, theirs, ours = imported
    assert type(ours) is case.ours
    batch = padded_batch(V, pad_id=case.pad_id, segments=case.segments)
    assert_same(ours_outputs(ours, *batch), theirs_outputs(theirs, *batch), batch[1])
    assert ours.unexpected_keys == []
    if not case.hf_class.endswith("Model"):
        assert ours.missing_keys == []  # a head model's folder fills every tensor we have


def test_round_trip_through_our_export_gives_the_same_logits(imported, tmp_path):
    case, theirs, ours = imported
    bare = case.hf_class.endswith("Model")
    hf.to_pretrained(ours.backbone if bare else ours, tmp_path)
    back, info = getattr(transformers, case.hf_class).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    batch = padded_batch(V, pad_id=case.pad_id, segments=case.segments)
    expected = theirs_outputs(theirs, *batch)
    got = theirs_outputs(back.eval(), *batch)
    assert_same(got, expected, batch[1])


def test_roberta_positions_count_from_the_padding_like_transformers(tmp_path):
    """Left padding shifts nothing in RoBERTa: positions count the real tokens from pad+1."""
    theirs = randomise(transformers.RobertaForMaskedLM(CASES["roberta-mlm"].hf_config()), seed=11)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert ours.config.positions_from_padding and ours.config.position_offset == 2 and ours.max_positions == 38
    batch = padded_batch(V, pad_id=1, segments=False, left=True)
    assert_same(ours_outputs(ours, *batch), theirs_outputs(theirs, *batch), batch[1])
    # The left-padded example's real tokens get the same positions as when unpadded.
    ids = batch[0]
    assert ours.backbone.embeddings.position_ids(ids)[2, -5:].tolist() == [2, 3, 4, 5, 6]


# --- our models, exported ---------------------------------------------------------------------

def tiny(family: str, **fields) -> EncoderConfig:
    sizes = dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=40)
    return presets.get(f"{family}-tiny", **{**sizes, **fields})


EXPORTS = {
    # id: (build ours, part, transformers class, our logits)
    "roberta": (lambda: RobertaForPreTraining(tiny("roberta")), None, "RobertaForMaskedLM",
                lambda m, *b: m(*b).mlm_logits),
    "albert-share-all": (lambda: AlbertForPreTraining(tiny("albert", embedding_size=32)), None, "AlbertForPreTraining",
                         lambda m, *b: m(*b).mlm_logits),
    "albert-share-none": (lambda: AlbertForPreTraining(tiny("albert", embedding_size=32, share_layers="none")), None,
                          "AlbertForPreTraining", lambda m, *b: m(*b).mlm_logits),
    "electra-discriminator": (lambda: ElectraForPreTraining(tiny("electra", embedding_size=32)), "discriminator",
                              "ElectraForPreTraining", lambda m, *b: m.discriminator(*b)),
    "electra-generator": (lambda: ElectraForPreTraining(tiny("electra", embedding_size=32)), "generator",
                          "ElectraForMaskedLM", lambda m, *b: m.generator(*b).mlm_logits),
    "distilbert": (lambda: DistilBertForPreTraining(tiny("distilbert")), None, "DistilBertForMaskedLM",
                   lambda m, *b: m(*b).mlm_logits),
    "spanbert-as-bert": (lambda: SpanBertForPreTraining(tiny("spanbert")), None, "BertForMaskedLM",
                         lambda m, *b: m(*b).mlm_logits),
}


@pytest.mark.parametrize("name", list(EXPORTS))
def test_our_model_exports_to_what_transformers_pretrains_with(name, tmp_path):
    build, part, hf_class, our_logits = EXPORTS[name]
    torch.manual_seed(0)
    ours = randomise(build(), seed=5)
    hf.to_pretrained(ours, tmp_path, **({"part": part} if part else {}))
    theirs, info = getattr(transformers, hf_class).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    family = ours.config.family
    batch = padded_batch(V, pad_id=ours.config.pad_token_id, segments=family in ("albert", "electra", "spanbert"))
    keep = batch[1].bool()
    with torch.no_grad():
        got = our_logits(ours, *batch)
    ref = theirs_outputs(theirs.eval(), *batch)["logits"]
    torch.testing.assert_close(got[keep], ref[keep], **TOL)


def test_electra_generator_folder_reads_back_into_a_generator(tmp_path):
    ours = randomise(ElectraForPreTraining(tiny("electra", embedding_size=32)), seed=6)
    hf.to_pretrained(ours, tmp_path, part="generator")
    again = hf.from_pretrained(tmp_path)
    assert isinstance(again, ElectraGenerator) and again.missing_keys == [] and again.unexpected_keys == []
    for (k, a), b in zip(ours.generator.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), k


def test_bare_backbones_export_as_base_models(tmp_path):
    torch.manual_seed(0)
    backbone = randomise(TransformerEncoder(tiny("electra", embedding_size=32)), seed=7)
    hf.to_pretrained(backbone, tmp_path)
    theirs, info = transformers.ElectraModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask, types = padded_batch(V)
    with torch.no_grad():
        ref = theirs.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        got = backbone.encode(ids, mask, types)
    torch.testing.assert_close(got[mask.bool()], ref[mask.bool()], **TOL)


@pytest.mark.parametrize("config, message", ids=["albert-attention", "albert-ffn", "albert-unfactorised",
                                                  "roberta-plain-positions", "distilbert-eps", "electra-equal-widths"],
                         argvalues=[
    (tiny("albert", share_layers="attention"), "sharing only the attention"),
    (tiny("albert", share_layers="ffn"), "sharing only the ffn"),
    (tiny("albert", embedding_size=None), "without the E -> H projection"),
    (tiny("roberta", positions_from_padding=False), "not counted from the padding"),
    (tiny("distilbert", layer_norm_eps=1e-5), "eps other than 1e-12"),
    (tiny("electra", embedding_size=64), "same width"),
])
def test_to_pretrained_refuses_what_transformers_cannot_hold(config, message, tmp_path):
    model = {"albert": AlbertForPreTraining, "roberta": RobertaForPreTraining, "distilbert": DistilBertForPreTraining,
             "electra": ElectraForPreTraining}[config.family](config)
    with pytest.raises(ValueError, match=f"cannot represent .*{message}"):
        hf.to_pretrained(model, tmp_path)


def test_electra_part_must_name_a_model(tmp_path):
    with pytest.raises(ValueError, match="discriminator' or 'generator'"):
        hf.to_pretrained(ElectraForPreTraining(tiny("electra")), tmp_path, part="both")
    with pytest.raises(ValueError, match="only applies to ELECTRA"):
        hf.to_pretrained(RobertaForPreTraining(tiny("roberta")), tmp_path, part="generator")


def test_albert_groups_transformers_cannot_map_are_refused(tmp_path):
    config = transformers.AlbertConfig(**{**SIZE, "num_hidden_layers": 4}, embedding_size=32, num_hidden_groups=2)
    transformers.AlbertModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="num_hidden_groups=2"):
        hf.from_pretrained(tmp_path)


def test_config_helpers_cover_every_family():
    assert isinstance(hf.config_from_hf(transformers.ElectraConfig(**SIZE).to_dict()), ElectraConfig)
    assert hf.config_to_hf(tiny("spanbert"))["model_type"] == "bert"
    assert isinstance(tiny("spanbert"), SpanBertConfig)
