"""Our BERT on its own: config, presets, masked-only logits, masks, variants, checkpoints."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.families.bert import BERT_PRESETS, BertConfig, BertForPreTraining, BertModel
from models_lib.checkpoint import load_model, save_model
from models_lib.core.layers import SelfAttention, build_attention_mask

V = 101


def tiny(**overrides) -> BertConfig:
    fields = dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=32)
    return BertConfig(**{**fields, **overrides})


def model(seed: int = 0, **overrides) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(tiny(**overrides)).eval()


def ids(B: int = 2, T: int = 10, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(seed))


# --- config ----------------------------------------------------------------------------------

def test_presets_have_the_published_sizes():
    expected = {"bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4), "bert-small": (4, 512, 8),
                "bert-medium": (8, 512, 8), "bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}
    assert list(BERT_PRESETS) == list(expected)
    for name, (L, H, A) in expected.items():
        c = BertConfig.from_preset(name)
        assert (c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size) == (L, H, A, 4 * H)
        assert c.vocab_size == 30522 and c.max_position_embeddings == 512 and c.layer_norm_eps == 1e-12


def test_from_preset_takes_overrides_and_derives_the_ffn_size():
    c = BertConfig.from_preset("bert-tiny", vocab_size=8000, hidden_size=256, num_heads=4)
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) == (8000, 256, 1024, 2)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="bert-tiny.*bert-large"):
        BertConfig.from_preset("bert-huge")


@pytest.mark.parametrize("fields, message", [
    (dict(hidden_size=100, num_heads=3), "divisible"),
    (dict(num_layers=0), "num_layers must be a positive"),
    (dict(hidden_dropout=1.5), "between 0 and 1"),
    (dict(hidden_act="swish"), "Unknown activation"),
    (dict(pad_token_id=500), "outside the vocabulary"),
    (dict(share_layers="some"), "share_layers"),
    (dict(norm_placement="middle"), "norm_placement"),
    (dict(position_offset=32), "position_offset"),
])
def test_config_rejects_invalid_values_with_a_sentence(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny(**fields)


def test_config_round_trips_through_json():
    c = tiny(embedding_size=32, share_layers="attention")
    assert BertConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ValueError, match="Unknown BERT config field"):
        BertConfig.from_dict({**c.to_dict(), "num_hidden_layers": 3})


def test_weights_start_as_bert_initialises_them():
    m = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=2000))
    assert abs(m.bert.embeddings.word.weight[1:].std().item() - 0.02) < 0.002
    assert m.bert.embeddings.word.weight[0].abs().sum() == 0  # padding row
    block = m.bert.encoder.layers[0]
    assert torch.all(block.attn_norm.weight == 1) and torch.all(block.attn_norm.bias == 0)
    assert torch.all(block.attention.qkv.bias == 0) and torch.all(m.mlm_head.bias == 0)
    assert abs(block.ffn.up.weight.std().item() - 0.02) < 0.002


# --- forward ---------------------------------------------------------------------------------

def test_mlm_logits_are_computed_only_at_labelled_positions():
    m = model()
    x = ids()
    labels = torch.full_like(x, -100)
    labels[0, 3], labels[1, 0], labels[1, 7] = 5, 6, 7
    out = m(x, mlm_labels=labels, nsp_labels=torch.tensor([0, 1]))
    assert out.mlm_logits.shape == (3, V) and out.mlm_targets.tolist() == [5, 6, 7]
    assert out.nsp_logits.shape == (2, 2)
    full = m(x).mlm_logits
    assert full.shape == (2, 10, V)
    torch.testing.assert_close(out.mlm_logits, full[labels != -100])
    expected = torch.nn.functional.cross_entropy(full[labels != -100], labels[labels != -100])
    torch.testing.assert_close(out.mlm_loss, expected)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)


def test_loss_with_nothing_to_predict_is_zero_and_backpropagates():
    m = model().train()
    out = m(ids(), mlm_labels=torch.full((2, 10), -100))
    assert out.loss.item() == 0.0 and out.mlm_logits.shape == (0, V)
    out.loss.backward()


def test_the_decoder_is_tied_to_the_word_embeddings():
    m = model().train()
    x = ids()
    labels = torch.full_like(x, -100)
    labels[0, 2] = 42
    m(x, mlm_labels=labels).loss.backward()
    grad = m.bert.embeddings.word.weight.grad
    assert grad[42].abs().sum() > 0  # the output row of the target word is trained
    assert "decoder" not in " ".join(n for n, _ in m.named_parameters())


def test_padding_tokens_do_not_change_the_other_positions():
    m = model()
    x = ids()
    mask = torch.ones_like(x)
    mask[1, 6:] = 0
    other = x.clone()
    other[1, 6:] = torch.randint(1, V, (4,))
    with torch.no_grad():
        a, b = m.encode(x, mask), m.encode(other, mask)
        unmasked = m.encode(other)
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()])
    assert not torch.allclose(a[1, :6], unmasked[1, :6], atol=1e-4)  # the mask did something


def test_a_full_mask_equals_the_same_padding_mask():
    m = model()
    x = ids()
    mask = torch.ones_like(x)
    mask[0, 7:] = 0
    full = mask[:, None, :].expand(2, 10, 10)  # (B, T, T): every query sees the unpadded keys
    with torch.no_grad():
        torch.testing.assert_close(m.encode(x, full), m.encode(x, mask))
        torch.testing.assert_close(m.encode(x, full[:, None]), m.encode(x, mask))


def test_causal_attention_does_not_see_the_future():
    torch.manual_seed(0)
    attn = SelfAttention(32, 4).eval()
    x = torch.randn(1, 6, 32)
    changed = x.clone()
    changed[0, 4:] = torch.randn(2, 32)
    mask = build_attention_mask(None, is_causal=True, seq_len=6)
    with torch.no_grad():
        a, b = attn(x, mask), attn(changed, mask)
    torch.testing.assert_close(a[0, :4], b[0, :4])
    assert not torch.allclose(a[0, 4:], b[0, 4:])


def test_too_long_input_is_refused():
    m = model()
    assert m.max_positions == 32
    with pytest.raises(ValueError, match="at most 32"):
        m(ids(T=33))


# --- variants --------------------------------------------------------------------------------

def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_factorised_embeddings_shrink_the_vocabulary_table():
    big, small = model(), model(embedding_size=16)
    assert small.bert.embeddings.word.weight.shape == (small.config.padded_vocab_size, 16)  # rows padded to 64s
    assert n_params(small) < n_params(big)
    assert small(ids()).mlm_logits.shape == (2, 10, V)


@pytest.mark.parametrize("share", ["all", "attention", "ffn"])
def test_shared_layers_store_one_copy(share):
    shared = model(share_layers=share, num_layers=3)
    base = model(num_layers=3)
    assert n_params(shared) < n_params(base)
    assert shared(ids()).mlm_logits.shape == (2, 10, V)


def test_variant_fields_run():
    m = model(norm_placement="pre", type_vocab_size=0, use_pooler=False, position_offset=2)
    assert m.max_positions == 30 and m.nsp_head is None and m.bert.encoder.final_norm is not None
    out = m(ids(), mlm_labels=ids())
    assert out.nsp_logits is None and out.loss is not None
    with pytest.raises(ValueError, match="no NSP head"):
        m(ids(), nsp_labels=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="no token type"):
        m(ids(), token_type_ids=torch.zeros(2, 10, dtype=torch.long))


# --- checkpoints -----------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{}, dict(share_layers="attention", embedding_size=32)],
                         ids=["bert", "albert-like"])
def test_save_and_load_round_trip(tmp_path, overrides):
    m = model(seed=3, **overrides)
    save_model(m, tmp_path)
    meta = json.loads((tmp_path / "model_config.json").read_text())
    assert meta["family"] == "bert" and meta["config"] == m.config.to_dict()
    loaded = load_model(tmp_path)
    assert type(loaded) is BertForPreTraining and not loaded.training
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).mlm_logits, m(x).mlm_logits, rtol=0, atol=0)
    if overrides:  # sharing survives loading: still one tensor
        layers = loaded.bert.encoder.layers
        assert layers[0].attention.qkv.weight is layers[1].attention.qkv.weight


def test_save_and_load_a_backbone(tmp_path):
    torch.manual_seed(0)
    backbone = BertModel(tiny()).eval()
    save_model(backbone, tmp_path)
    loaded = load_model(tmp_path)
    assert type(loaded) is BertModel
    torch.testing.assert_close(loaded.encode(ids()), backbone.encode(ids()))


def test_load_model_explains_a_missing_or_broken_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="model_config.json and model.safetensors missing"):
        load_model(tmp_path)
    save_model(model(), tmp_path)
    (tmp_path / "model_config.json").write_text('{"family": "bart", "config": {}}')
    with pytest.raises(ValueError, match="known model family"):
        load_model(tmp_path)
    (tmp_path / "model_config.json").write_text(json.dumps({"family": "bert", "config": tiny(num_layers=3).to_dict()}))
    with pytest.raises(ValueError, match="do not fit"):
        load_model(tmp_path)
