"""Parity with transformers' BERT on tiny random weights: same weights, same numbers."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402
from models_lib.core import vocab  # noqa: E402
from models_lib.families.bert import BertConfig, BertForPreTraining, BertModel  # noqa: E402

TOL = dict(atol=1e-4, rtol=1e-4)
VOCAB, T = 97, 12


def hf_config(hidden: int = 64, heads: int = 4) -> "transformers.BertConfig":
    return transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=heads,
        intermediate_size=2 * hidden, max_position_embeddings=32, type_vocab_size=2)


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Non-trivial values everywhere (LayerNorm weights away from 1, biases away from 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "LayerNorm.weight" in name or "norm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)
    vocab.zero_padding(model)  # our models' vocabulary padding rows stay zero (models_lib.core.vocab)
    return model.eval()


def batch(padded: bool):
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, VOCAB, (3, T), generator=g)
    token_type_ids = torch.zeros(3, T, dtype=torch.long)
    token_type_ids[:, T // 2:] = 1
    attention_mask = torch.ones(3, T, dtype=torch.long)
    if padded:
        attention_mask[1, 8:] = 0
        attention_mask[2, 5:] = 0
        input_ids[attention_mask == 0] = 0
        token_type_ids[attention_mask == 0] = 0
    return input_ids, attention_mask, token_type_ids


@pytest.fixture(scope="module", params=[64, 128], ids=["h64", "h128"])
def pretraining_pair(request, tmp_path_factory):
    hidden = request.param
    theirs = randomise(transformers.BertForPreTraining(hf_config(hidden, heads=hidden // 32)), seed=hidden)
    folder = tmp_path_factory.mktemp(f"hf_pretraining_{hidden}")
    theirs.save_pretrained(folder)
    ours = hf.from_pretrained(folder)
    return ours, theirs


def valid(mask: torch.Tensor) -> torch.Tensor:
    return mask.bool()


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_outputs_match_transformers(pretraining_pair, padded):
    ours, theirs = pretraining_pair
    input_ids, attention_mask, token_type_ids = batch(padded)
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     output_hidden_states=True)
        hidden = ours.encode(input_ids, attention_mask, token_type_ids)
        out = ours(input_ids, attention_mask, token_type_ids)
    keep = valid(attention_mask)  # padded positions are garbage in both libraries
    torch.testing.assert_close(hidden[keep], ref.hidden_states[-1][keep], **TOL)
    torch.testing.assert_close(out.mlm_logits[keep], ref.prediction_logits[keep], **TOL)
    torch.testing.assert_close(out.nsp_logits, ref.seq_relationship_logits, **TOL)
    assert out.loss is None and out.mlm_targets is None


def test_loss_and_masked_logits_match_transformers(pretraining_pair):
    ours, theirs = pretraining_pair
    input_ids, attention_mask, token_type_ids = batch(padded=True)
    labels = torch.full_like(input_ids, -100)
    labels[0, [1, 4, 9]] = input_ids[0, [1, 4, 9]]
    labels[2, 2] = 7
    nsp = torch.tensor([0, 1, 1])
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     labels=labels, next_sentence_label=nsp)
        out = ours(input_ids, attention_mask, token_type_ids, mlm_labels=labels, nsp_labels=nsp)
    selected = labels != -100
    assert out.mlm_logits.shape == (4, VOCAB)
    torch.testing.assert_close(out.mlm_logits, ref.prediction_logits[selected], **TOL)
    assert out.mlm_targets.tolist() == labels[selected].tolist()
    torch.testing.assert_close(out.loss, ref.loss, **TOL)
    torch.testing.assert_close(out.mlm_loss + out.nsp_loss, out.loss)


def test_from_pretrained_reads_a_masked_lm_folder(tmp_path):
    theirs = randomise(transformers.BertForMaskedLM(hf_config()), seed=3)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert sorted(ours.missing_keys) == sorted(["bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                                 "nsp_head.classifier.weight", "nsp_head.classifier.bias"])
    input_ids, attention_mask, token_type_ids = batch(padded=True)
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        got = ours(input_ids, attention_mask, token_type_ids).mlm_logits
    keep = valid(attention_mask)
    torch.testing.assert_close(got[keep], ref[keep], **TOL)


def test_from_pretrained_reads_a_bert_model_folder(tmp_path):
    theirs = randomise(transformers.BertModel(hf_config()), seed=4)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert {k.split(".")[0] for k in ours.missing_keys} == {"mlm_head", "nsp_head"}
    input_ids, attention_mask, token_type_ids = batch(padded=True)
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        hidden, pooled = ours.bert(input_ids, attention_mask, token_type_ids)
    keep = valid(attention_mask)
    torch.testing.assert_close(hidden[keep], ref.last_hidden_state[keep], **TOL)
    torch.testing.assert_close(pooled, ref.pooler_output, **TOL)


def test_from_pretrained_reads_pytorch_model_bin(tmp_path):
    theirs = randomise(transformers.BertForPreTraining(hf_config()), seed=5)
    theirs.config.save_pretrained(tmp_path)
    torch.save(theirs.state_dict(), tmp_path / "pytorch_model.bin")  # includes the tied decoder copy
    ours = hf.from_pretrained(tmp_path)
    assert ours.missing_keys == [] and ours.unexpected_keys == []
    input_ids, _, token_type_ids = batch(padded=False)
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, token_type_ids=token_type_ids)
        out = ours(input_ids, token_type_ids=token_type_ids)
    torch.testing.assert_close(out.mlm_logits, ref.prediction_logits, **TOL)


def test_from_pretrained_rejects_a_folder_without_weights(tmp_path):
    hf_config().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no weights"):
        hf.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="config.json"):
        hf.from_pretrained(tmp_path / "nowhere")


def ours_random(seed: int) -> BertForPreTraining:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4,
                        max_position_embeddings=32)
    return randomise(BertForPreTraining(config), seed)


def test_to_pretrained_loads_in_transformers_with_equal_logits(tmp_path):
    ours = ours_random(6)
    hf.to_pretrained(ours, tmp_path)
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    theirs.eval()
    input_ids, attention_mask, token_type_ids = batch(padded=True)
    with torch.no_grad():
        ref = theirs(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        out = ours(input_ids, attention_mask, token_type_ids)
    keep = valid(attention_mask)
    torch.testing.assert_close(out.mlm_logits[keep], ref.prediction_logits[keep], **TOL)
    torch.testing.assert_close(out.nsp_logits, ref.seq_relationship_logits, **TOL)
    # and back again: our import of our export is exact
    again = hf.from_pretrained(tmp_path)
    for (k, a), b in zip(ours.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), k


def test_to_pretrained_exports_a_bare_backbone(tmp_path):
    backbone = ours_random(7).bert
    hf.to_pretrained(backbone, tmp_path)
    theirs, info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    input_ids, attention_mask, token_type_ids = batch(padded=True)
    with torch.no_grad():
        ref = theirs.eval()(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        hidden, pooled = backbone(input_ids, attention_mask, token_type_ids)
    keep = valid(attention_mask)
    torch.testing.assert_close(hidden[keep], ref.last_hidden_state[keep], **TOL)
    torch.testing.assert_close(pooled, ref.pooler_output, **TOL)


@pytest.mark.parametrize("override", [dict(embedding_size=32), dict(share_layers="all"),
                                      dict(norm_placement="pre"), dict(type_vocab_size=0)])
def test_to_pretrained_refuses_what_transformers_bert_cannot_hold(tmp_path, override):
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, **override)
    with pytest.raises(ValueError, match="cannot represent"):
        hf.to_pretrained(BertModel(config), tmp_path)
