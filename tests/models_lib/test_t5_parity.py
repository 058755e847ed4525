"""Parity with transformers' T5ForConditionalGeneration on tiny random weights, for both
versions: v1.0 (ReLU, tied embeddings, output scaled by d_model^-0.5) and v1.1 (gated-GELU, a
separate lm_head). A transformers folder imports with equal logits and loss, greedy generation
is token for token the same, and our export loads back into transformers with no missing or
unexpected keys and the same logits."""
from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import safetensors.torch  # noqa: E402

from models_lib import hf  # noqa: E402
from models_lib.hf import t5 as hf_t5  # noqa: E402
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration, relative_position_bucket  # noqa: E402
from tests.models_lib.helpers import randomise  # noqa: E402

T5Attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention

V = 83
PAD, EOS = 0, 1
TOL = 1e-4
SIZE = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD)
# v1.0 with the published bucket settings; v1.1 with fewer buckets and a shorter max distance so
# that the short test sequences reach the logarithmic buckets of the causal decoder too.
VERSIONS = {
    "1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, relative_attention_num_buckets=8,
                relative_attention_max_distance=16),
}


def hf_model(version: str, seed: int = 0):
    """A random transformers T5ForConditionalGeneration in eval mode; v1.1 gets its own lm_head
    (transformers 5 would otherwise keep it tied to the shared table).

    Projections get std 0.4 and the position tables std 4: with small random weights a tied
    model's greedy output mostly repeats one token, which would make generation parity a
    weak test; position-dependent attention makes each step's choice differ."""
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**SIZE, **VERSIONS[version]))
    if version == "1.1":
        model.lm_head.weight = torch.nn.Parameter(torch.empty(V, SIZE["d_model"]))
    randomise(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.mul_(40.0)
            elif "layer_norm" not in name and name not in ("shared.weight", "lm_head.weight"):
                p.mul_(4.0)
    if version == "1.1":
        assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
    return model


def inputs(seed: int = 1):
    """Two prompts, the second right-padded; decoder inputs with padding at the end of row 1."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(2, V, (2, 14), generator=g)
    mask = torch.ones_like(input_ids)
    mask[1, 9:] = 0
    input_ids[mask == 0] = PAD
    decoder_ids = torch.randint(2, V, (2, 11), generator=g)
    decoder_ids[:, 0] = PAD
    decoder_mask = torch.ones_like(decoder_ids)
    decoder_mask[1, 8:] = 0
    return input_ids, mask, decoder_ids, decoder_mask


def hf_logits(model, input_ids, mask, decoder_ids, decoder_mask=None):
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                     decoder_attention_mask=decoder_mask).logits


def our_logits(model, input_ids, mask, decoder_ids, decoder_mask=None):
    with torch.no_grad():
        return model(input_ids, mask, decoder_ids, decoder_mask).logits


def test_buckets_match_transformers():
    rel = torch.arange(-300, 301)[None, :] - torch.arange(0, 5)[:, None]
    for bidirectional in (True, False):
        for buckets, distance in ((32, 128), (8, 16), (16, 40)):
            ours = relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=buckets,
                                            max_distance=distance)
            theirs = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=buckets,
                                                           max_distance=distance)
            assert torch.equal(ours, theirs), (bidirectional, buckets, distance)


@pytest.mark.parametrize("version", list(VERSIONS))
def test_import_logits_loss_and_generation(tmp_path, version):
    theirs = hf_model(version)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert isinstance(ours, T5ForConditionalGeneration) and not ours.training
    cfg = ours.config
    assert (cfg.version, cfg.feed_forward_proj, cfg.tie_word_embeddings) == (
        version, VERSIONS[version]["feed_forward_proj"], version == "1.0")
    assert (cfg.d_model, cfg.d_kv, cfg.num_heads, cfg.relative_attention_num_buckets) == (
        32, 8, 4, VERSIONS[version].get("relative_attention_num_buckets", 32))
    assert ours.unexpected_keys == []

    input_ids, mask, decoder_ids, decoder_mask = inputs()
    for dmask in (None, decoder_mask):
        expected = hf_logits(theirs, input_ids, mask, decoder_ids, dmask)
        got = our_logits(ours, input_ids, mask, decoder_ids, dmask)
        assert (got - expected).abs().max().item() < TOL
    with torch.no_grad():
        encoder = theirs.get_encoder()(input_ids=input_ids, attention_mask=mask).last_hidden_state
        assert (ours.encode(input_ids, mask) - encoder).abs().max().item() < TOL

    labels = decoder_ids.roll(-1, dims=1)
    labels[1, 6:] = -100
    with torch.no_grad():
        expected_loss = theirs(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        assert abs(ours(input_ids, mask, labels=labels).loss.item() - expected_loss.item()) < TOL

    # Greedy generation, token for token; eos is a token row 0 produces, so rows finish at
    # different steps and the finished row is padded.
    free = ours.generate(input_ids, mask, max_new_tokens=8, eos_token_id=-1)
    with torch.no_grad():
        free_hf = theirs.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                  num_beams=1, eos_token_id=None, pad_token_id=PAD)
    assert torch.equal(free, free_hf)
    eos = int(free[0, 4])
    got = ours.generate(input_ids, mask, max_new_tokens=8, eos_token_id=eos, pad_token_id=PAD)
    with torch.no_grad():
        expected = theirs.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                   num_beams=1, eos_token_id=eos, pad_token_id=PAD)
    assert got.shape == expected.shape and torch.equal(got, expected)
    assert got[:, 0].eq(PAD).all() and (got[0] == eos).any()
    assert len(set(free[:, 1:].flatten().tolist())) >= 6  # a varied sequence, not one token repeated


@pytest.mark.parametrize("version", list(VERSIONS))
def test_export_loads_in_transformers(tmp_path, version):
    theirs = hf_model(version, seed=3)
    theirs.save_pretrained(tmp_path / "hf")
    ours = hf.from_pretrained(tmp_path / "hf")
    hf.to_pretrained(ours, tmp_path / "export")
    written = json.loads((tmp_path / "export" / "config.json").read_text())
    assert written["model_type"] == "t5" and written["architectures"] == ["T5ForConditionalGeneration"]
    back, info = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "export",
                                                                         output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    back.eval()
    input_ids, mask, decoder_ids, decoder_mask = inputs(seed=4)
    expected = our_logits(ours, input_ids, mask, decoder_ids, decoder_mask)
    assert (hf_logits(back, input_ids, mask, decoder_ids, decoder_mask) - expected).abs().max().item() < TOL
    assert (hf_logits(theirs, input_ids, mask, decoder_ids, decoder_mask) - expected).abs().max().item() < TOL
    # and the round trip import -> export -> import changes no tensor
    again = hf.from_pretrained(tmp_path / "export")
    for key, tensor in ours.state_dict().items():
        assert torch.equal(again.state_dict()[key], tensor), key


@pytest.mark.parametrize("version", list(VERSIONS))
def test_our_fresh_model_exports(tmp_path, version):
    """A model built here (its own initialisation, a distinct lm_head in v1.1) is the same model in transformers."""
    torch.manual_seed(5)
    cfg = T5Config.from_preset("t5-tiny", vocab_size=V, version=version, eos_token_id=EOS)
    ours = T5ForConditionalGeneration(cfg).eval()
    hf.to_pretrained(ours, tmp_path)
    back, info = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    back.eval()
    input_ids, mask, decoder_ids, decoder_mask = inputs(seed=6)
    expected = our_logits(ours, input_ids, mask, decoder_ids, decoder_mask)
    assert (hf_logits(back, input_ids, mask, decoder_ids, decoder_mask) - expected).abs().max().item() < TOL
    got = ours.generate(input_ids, mask, max_new_tokens=6, eos_token_id=-1)
    with torch.no_grad():
        theirs = back.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                               num_beams=1, eos_token_id=None, pad_token_id=PAD)
    assert torch.equal(got, theirs)


def test_import_errors(tmp_path):
    theirs = hf_model("1.0")
    theirs.save_pretrained(tmp_path / "full")
    encoder_only = transformers.T5EncoderModel(theirs.config)
    encoder_only.save_pretrained(tmp_path / "encoder")
    with pytest.raises(ValueError, match="encoder only"):
        hf.from_pretrained(tmp_path / "encoder")
    # a folder whose weights lack the decoder
    state = safetensors.torch.load_file(str(tmp_path / "full" / "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("decoder.")}
    safetensors.torch.save_file(state, str(tmp_path / "full" / "model.safetensors"))
    with pytest.raises(ValueError, match="not a complete T5 checkpoint"):
        hf.from_pretrained(tmp_path / "full")
    with pytest.raises(TypeError, match="T5ForConditionalGeneration"):
        hf_t5.to_pretrained(torch.nn.Linear(2, 2), tmp_path / "bad")


def test_tied_table_without_scaling_imports_as_untied(tmp_path):
    """transformers 5 keeps lm_head tied to the shared table for T5Config(tie_word_embeddings=False)
    and only turns the d_model^-0.5 scaling off; the folder then has no lm_head tensor. That is
    our untied form with lm_head a copy of the table."""
    torch.manual_seed(7)
    config = transformers.T5Config(**SIZE, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    theirs = randomise(transformers.T5ForConditionalGeneration(config), 7)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert not ours.config.tie_word_embeddings and torch.equal(ours.lm_head.weight, ours.shared.weight)
    input_ids, mask, decoder_ids, decoder_mask = inputs(seed=8)
    expected = hf_logits(theirs, input_ids, mask, decoder_ids, decoder_mask)
    assert (our_logits(ours, input_ids, mask, decoder_ids, decoder_mask) - expected).abs().max().item() < TOL
