"""Bottleneck adapters (models_lib/core/adapters.py): one after every attention and feed-forward
sublayer of the encoders, GPT and T5, the identity when fresh, in the path once trained, kept by
native checkpoints (and by a new head on the encoder), refused by the transformers export."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.core import adapters
from models_lib.families.downstream import build_downstream, from_pretraining
from tests.models_lib.helpers import randomise

ENCODERS = ["bert", "roberta", "albert", "electra", "distilbert", "spanbert"]


def classifier(family: str = "bert", seed: int = 0, **changes):
    from models_lib.families import presets

    torch.manual_seed(seed)
    sizes = dict(vocab_size=120, hidden_size=32, num_heads=2, num_layers=2, intermediate_size=64, **changes)
    if family in ("albert", "electra"):
        sizes["embedding_size"] = 16
    return randomise(build_downstream(presets.get(f"{family}-tiny", **sizes), "sequence_classification", 3), seed)


def t5(seed: int = 0):
    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    return randomise(T5ForConditionalGeneration(T5Config.from_preset(
        "t5-tiny", vocab_size=61, d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2,
        pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)), seed)


def gpt(seed: int = 0):
    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel

    torch.manual_seed(seed)
    return randomise(GPTLMHeadModel(GPTConfig.from_preset("gpt-tiny", vocab_size=61, hidden_size=32, num_heads=2,
                                                          max_position_embeddings=40, pad_token_id=0,
                                                          eos_token_id=3)), seed)


def train_adapters(model, seed: int = 1):
    """Weights a few steps of training would give: the up-projections away from zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in adapters.adapter_parameters(model):
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def outputs(model, ids):
    from models_lib.families.t5 import T5ForConditionalGeneration

    with torch.no_grad():
        if isinstance(model, T5ForConditionalGeneration):
            return model(ids, decoder_input_ids=ids[:, :5]).logits
        return model(ids).logits


MODELS = {**{f: (lambda f=f: classifier(f)) for f in ENCODERS}, "gpt": gpt, "t5": t5}
# attention + feed-forward per layer; T5's decoder adds cross-attention; ALBERT's two layers share one block
SUBLAYERS = {**{f: 4 for f in ENCODERS}, "albert": 2, "gpt": 4, "t5": 2 * 2 + 2 * 3}


@pytest.mark.parametrize("family", list(MODELS))
def test_fresh_adapters_are_the_identity_and_trained_ones_change_the_outputs(family):
    model = MODELS[family]()
    ids = torch.randint(4, 61, (2, 9))
    before = outputs(model, ids)
    names = adapters.attach(model, size=8)
    assert len(names) == SUBLAYERS[family] and adapters.adapter_size(model) == 8
    assert torch.allclose(outputs(model, ids), before, atol=1e-6, rtol=0)  # up-projections at zero
    train_adapters(model)
    assert not torch.allclose(outputs(model, ids), before, atol=1e-3)  # the adapters are in the path


def test_an_adapter_follows_the_sublayers_output_before_the_residual_and_norm():
    """Houlsby's placement, in BERT's post-LN block: LN(x + adapter(attention(x)))."""
    model = classifier()
    block = model.bert.encoder.layers[0]
    adapters.attach(model, size=4)
    train_adapters(model)
    x = torch.randn(2, 5, 32)
    attention, ffn = block.attention, block.ffn
    with torch.no_grad():
        a_adapter, f_adapter = attention._modules.pop("adapter"), ffn._modules.pop("adapter")  # the bare sublayers
        bare_attention = attention(x)
        h = block.attn_norm(x + a_adapter(bare_attention))
        expected = block.ffn_norm(h + f_adapter(ffn(h)))
        attention.add_module("adapter", a_adapter)
        ffn.add_module("adapter", f_adapter)
        assert torch.allclose(block(x), expected, atol=1e-6)
        assert torch.allclose(a_adapter(bare_attention), bare_attention + a_adapter.up(a_adapter.down(bare_attention)
                                                                                          .relu()))


def test_attach_refuses_a_bad_size_a_second_set_and_a_model_without_such_layers():
    from models_lib.families.elmo import ElmoConfig, ElmoLanguageModel

    model = classifier()
    with pytest.raises(ValueError, match="bottleneck size must be a whole number of at least 1, not 0"):
        adapters.attach(model, size=0)
    adapters.attach(model, size=4)
    with pytest.raises(ValueError, match="already has adapters"):
        adapters.attach(model, size=4)
    elmo = ElmoLanguageModel(ElmoConfig.from_preset("elmo-tiny", vocab_size=50))
    with pytest.raises(ValueError, match="ElmoLanguageModel has no attention or feed-forward layer"):
        adapters.attach(elmo, size=4)


@pytest.mark.parametrize("family", ["bert", "albert", "gpt", "t5"])
def test_a_checkpoint_keeps_the_adapters_and_loads_with_the_same_outputs(tmp_path, family):
    from models_lib.checkpoint import CONFIG_NAME, load_model, save_model

    model = MODELS[family]()
    adapters.attach(model, size=6)
    train_adapters(model)
    ids = torch.randint(4, 61, (2, 9))
    save_model(model, tmp_path)
    assert json.loads((tmp_path / CONFIG_NAME).read_text())["adapters"] == {"size": 6}
    loaded = load_model(tmp_path)
    assert adapters.adapter_size(loaded) == 6
    assert torch.equal(outputs(loaded, ids), outputs(model, ids))


def test_a_new_head_on_an_adapted_encoder_keeps_its_adapters():
    """Fine-tuning a fine-tuned checkpoint again: its encoder, adapters included, under a fresh head."""
    model = classifier()
    adapters.attach(model, size=4)
    train_adapters(model)
    again = from_pretraining(model, "token_classification", 5).eval()
    assert adapters.adapter_size(again) == 4
    ids = torch.randint(4, 120, (2, 9))
    with torch.no_grad():
        assert torch.equal(again.bert.encode(ids), model.bert.encode(ids))


def test_gpt1s_classifier_on_an_adapted_gpt_keeps_its_adapters():
    from models_lib.families.downstream import TaskConfig
    from models_lib.families.gpt_tasks import GPTForSequenceClassification

    lm = gpt()
    adapters.attach(lm, size=4)
    train_adapters(lm)
    tuned = GPTForSequenceClassification.from_lm(lm, TaskConfig("sequence_classification", 2, ["no", "yes"])).eval()
    assert adapters.adapter_size(tuned) == 4
    ids = torch.randint(4, 61, (2, 9))
    with torch.no_grad():
        assert torch.equal(tuned.encode(ids), lm.encode(ids))


def test_the_transformers_export_refuses_a_model_with_adapters(tmp_path):
    from models_lib import hf

    model = classifier()
    adapters.attach(model, size=4)
    with pytest.raises(ValueError, match=r"it carries bottleneck adapters \(size 4\) after its attention and "
                                         r"feed-forward layers, which transformers' classes do not have"):
        hf.to_pretrained(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
