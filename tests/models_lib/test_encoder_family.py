"""The encoder family without transformers: presets, one config, checkpoints, sharing, hidden states."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertConfig, BertForPreTraining
from models_lib.checkpoint import load_model, read_model_config, save_model
from models_lib.core.config import ElectraConfig, EncoderConfig, SpanBertConfig
from models_lib.families.distilbert import DistilBertForPreTraining
from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining, ElectraGenerator
from models_lib.core.encoder import TransformerEncoder
from models_lib.families.roberta import RobertaForPreTraining
from models_lib.families.spanbert import SpanBertForPreTraining
from models_lib.families.unilm import UniLMForPreTraining
from tests.models_lib.helpers import padded_batch

V = 101


def tiny(name: str, **fields) -> EncoderConfig:
    return presets.get(name, **{"vocab_size": V, "hidden_size": 64, "num_heads": 4, "max_position_embeddings": 40,
                                **fields})


# --- presets and config ------------------------------------------------------------------------

def test_every_family_has_presets_and_each_builds_its_config_class():
    from models_lib.families.elmo import ElmoConfig
    from models_lib.families.gpt import GPTConfig
    from models_lib.families.t5 import T5Config
    from models_lib.core.config import TinyBertConfig
    from models_lib.families.transfo_xl import TransfoXLConfig
    from models_lib.families.xlnet import XLNetConfig

    expected = {"bert": EncoderConfig, "roberta": EncoderConfig, "albert": EncoderConfig, "electra": ElectraConfig,
                "distilbert": EncoderConfig, "spanbert": SpanBertConfig, "unilm": EncoderConfig,
                "t5": T5Config, "gpt": GPTConfig, "elmo": ElmoConfig, "tinybert": TinyBertConfig,
                "xlnet": XLNetConfig, "transfo_xl": TransfoXLConfig}
    for family, cls in expected.items():
        names = presets.list_presets(family)
        # gpt2-small is GPT's; transfo-xl-tiny is transfo_xl's
        assert names and all(n.split("-")[0] in (family, "gpt2") or n.startswith(family.replace("_", "-"))
                             for n in names)
        for name in names:
            config = BertConfig.from_preset(name, vocab_size=1000)  # one from_preset for all families
            assert type(config) is cls and config.family == family and config.vocab_size == 1000
    assert len(presets.list_presets()) == sum(len(presets.list_presets(f)) for f in expected)


@pytest.mark.parametrize("name, L, H, A, extra", [
    ("roberta-base", 12, 768, 12, dict(max_positions=512, type_vocab_size=1, use_pooler=False, vocab_size=50265,
                                       pad_token_id=1, layer_norm_eps=1e-5)),
    ("roberta-tiny", 2, 128, 2, dict(position_offset=2)),
    ("albert-base", 12, 768, 12, dict(embedding_size=128, share_layers="all", hidden_act="gelu_new",
                                      hidden_dropout=0.0, vocab_size=30000)),
    ("electra-small", 12, 256, 4, dict(embedding_size=128, intermediate_size=1024, use_pooler=False)),
    ("distilbert-base", 6, 768, 12, dict(type_vocab_size=0, use_pooler=False)),
    ("spanbert-base", 12, 768, 12, dict(max_span_length=10, use_pooler=False)),
    ("unilm-large", 24, 1024, 16, dict(use_pooler=False, type_vocab_size=2)),
])
def test_presets_have_the_published_sizes(name, L, H, A, extra):
    c = presets.get(name)
    assert (c.num_layers, c.hidden_size, c.num_heads) == (L, H, A)
    for field, value in extra.items():
        assert getattr(c, field) == value, field


@pytest.mark.parametrize("name, hidden, heads, ffn, embedding", [
    ("electra-small", 64, 1, 256, 128),  # 1/4 of the discriminator, head size kept at 64
    ("electra-base", 256, 4, 1024, 768),  # 1/3
    ("electra-large", 256, 4, 1024, 1024),  # 1/4
])
def test_electra_generator_is_a_fraction_of_the_discriminator(name, hidden, heads, ffn, embedding):
    g = presets.get(name).generator_config()
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (hidden, heads, ffn, presets.get(name).num_layers)
    assert (g.embedding_size or g.hidden_size) == embedding


def test_roberta_positions_follow_the_pad_id_the_trainer_gives():
    assert presets.get("roberta-base").max_positions == 512  # 514 rows, pad 1
    c = presets.get("roberta-base", pad_token_id=0)  # our tokenizers put [PAD] at 0
    assert (c.position_offset, c.max_positions) == (1, 513)


@pytest.mark.parametrize("fields, message", [
    (dict(family="gpt"), "Unknown model family"),
    (dict(generator_size=0.0), "generator_size"),
    (dict(generator_size=0.7, hidden_size=256, num_heads=4), "do not divide"),  # 179 wide, 2 heads
])
def test_config_rejects_invalid_family_settings(fields, message):
    with pytest.raises(ValueError, match=message):
        ElectraConfig.from_dict({**tiny("electra-tiny").to_dict(), **fields})


def test_config_class_must_fit_the_family_and_presets_keep_their_family():
    with pytest.raises(ValueError, match="ElectraConfig"):
        EncoderConfig(family="electra")
    with pytest.raises(ValueError, match="family cannot be overridden"):
        presets.get("bert-tiny", family="roberta")
    with pytest.raises(ValueError, match="Unknown preset"):
        presets.get("roberta-huge")


@pytest.mark.parametrize("name", ["bert-tiny", "roberta-tiny", "albert-tiny", "electra-small", "distilbert-tiny",
                                  "spanbert-tiny", "unilm-tiny"])
def test_configs_round_trip_through_json_into_their_class(name):
    c = presets.get(name)
    again = EncoderConfig.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again == c and type(again) is type(c)


def test_wrappers_refuse_a_config_of_another_family():
    with pytest.raises(ValueError, match="BERT model.*RoBERTa"):
        BertForPreTraining(tiny("roberta-tiny"))
    with pytest.raises(ValueError, match="ELECTRA"):
        ElectraForPreTraining(tiny("bert-tiny"))


# --- checkpoints -----------------------------------------------------------------------------

MODELS = {
    "bert": lambda: BertForPreTraining(tiny("bert-tiny")),
    "roberta": lambda: RobertaForPreTraining(tiny("roberta-tiny")),
    "albert": lambda: AlbertForPreTraining(tiny("albert-tiny", embedding_size=32)),
    "albert-share-attention": lambda: AlbertForPreTraining(tiny("albert-tiny", share_layers="attention")),
    "electra": lambda: ElectraForPreTraining(tiny("electra-tiny", embedding_size=32)),
    "electra-discriminator": lambda: ElectraDiscriminator(tiny("electra-tiny")),
    "electra-generator": lambda: ElectraGenerator(tiny("electra-tiny").generator_config()),
    "distilbert": lambda: DistilBertForPreTraining(tiny("distilbert-tiny")),
    "spanbert": lambda: SpanBertForPreTraining(tiny("spanbert-tiny")),
    "unilm": lambda: UniLMForPreTraining(tiny("unilm-tiny")),
    "roberta-backbone": lambda: TransformerEncoder(tiny("roberta-tiny")),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_save_and_load_round_trip_every_family(name, tmp_path):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    save_model(model, tmp_path)
    meta = read_model_config(tmp_path)
    assert meta["family"] == model.config.family and meta["class"] == type(model).__name__
    again = load_model(tmp_path)
    assert type(again) is type(model) and again.config == model.config
    for (k, a), (k2, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k
    ids = torch.randint(5, V, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(again.encode(ids), model.encode(ids), rtol=0, atol=0)


def test_a_checkpoint_from_before_families_still_loads_as_bert(tmp_path):
    model = BertForPreTraining(tiny("bert-tiny"))
    save_model(model, tmp_path)
    meta = json.loads((tmp_path / "model_config.json").read_text())
    for field in ("family", "positions_from_padding"):
        del meta["config"][field]
    (tmp_path / "model_config.json").write_text(json.dumps(meta))
    assert load_model(tmp_path).config == model.config


# --- ALBERT sharing ----------------------------------------------------------------------------

@pytest.mark.parametrize("share", ["none", "all", "attention", "ffn"])
def test_albert_sharing_has_the_expected_parameter_count(share):
    L, H, I, E, P = 4, 64, 256, 32, 40
    config = tiny("albert-tiny", num_layers=L, embedding_size=E, share_layers=share, intermediate_size=I)
    attention = 4 * H * H + 4 * H  # fused QKV + output projection
    ffn = 2 * H * I + I + H
    norms = 4 * H  # two LayerNorms per block
    blocks = {"none": L * (attention + ffn + norms), "all": attention + ffn + norms,
              "attention": attention + L * (ffn + norms), "ffn": ffn + L * (attention + norms)}[share]
    # tables (the word table's rows padded to 64s), LayerNorm, E -> H projection
    embeddings = config.padded_vocab_size * E + P * E + 2 * E + 2 * E + (E * H + H)
    pooler = H * H + H
    backbone = TransformerEncoder(config)
    assert sum(p.numel() for p in backbone.parameters()) == embeddings + blocks + pooler
    if share in ("attention", "ffn"):
        layers = backbone.encoder.layers
        assert getattr(layers[0], share) is getattr(layers[3], share)
        assert layers[0].attn_norm is not layers[3].attn_norm


def test_albert_sop_loss_adds_to_mlm_and_needs_the_pooler():
    model = AlbertForPreTraining(tiny("albert-tiny")).eval()
    ids, mask, types = padded_batch(V)
    labels = torch.full_like(ids, -100)
    labels[0, 3] = ids[0, 3]
    out = model(ids, mask, types, mlm_labels=labels, sop_labels=torch.tensor([0, 1, 0]))
    assert out.sop_logits.shape == (3, 2) and out.nsp_logits is None
    torch.testing.assert_close(out.loss, out.mlm_loss + out.sop_loss)
    with pytest.raises(ValueError, match="no SOP head"):
        AlbertForPreTraining(tiny("albert-tiny", use_pooler=False))(ids, sop_labels=torch.tensor([0, 1, 0]))


# --- hidden states, positions ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bert", "albert", "electra", "distilbert", "unilm"])
def test_all_hidden_states_on_request(name):
    model = MODELS[name]().eval()
    ids = torch.randint(5, V, (2, 7))
    with torch.no_grad():
        states = model.encode(ids, output_hidden_states=True)
        final = model.encode(ids)
    assert len(states) == model.config.num_layers + 1
    assert all(s.shape == (2, 7, model.config.hidden_size) for s in states)
    torch.testing.assert_close(states[-1], final, rtol=0, atol=0)
    if name != "electra":
        out = model(ids, output_hidden_states=True)
        assert len(out.hidden_states) == len(states)


def test_roberta_left_padding_leaves_the_real_tokens_alone():
    model = RobertaForPreTraining(tiny("roberta-tiny", hidden_dropout=0.0)).eval()
    ids = torch.randint(5, V, (1, 6))
    padded = torch.cat([torch.full((1, 3), 1), ids], dim=1)  # pad id 1, on the left
    mask = (padded != 1).long()
    with torch.no_grad():
        torch.testing.assert_close(model.encode(padded, mask)[:, 3:], model.encode(ids), atol=1e-5, rtol=1e-5)
