"""GPT (models_lib.families.gpt): config, causality, padding, KV-cached decoding, GPT-1 vs GPT-2, checkpoints, training."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from models_lib.checkpoint import load_model, save_model
from models_lib.families.gpt import GPT_PRESETS, CausalLMOutput, GPTConfig, GPTLMHeadModel
from models_lib.core.layers import recording_attention

from .helpers import randomise

V, PAD, EOS = 61, 0, 3


def tiny_config(**overrides) -> GPTConfig:
    fields = dict(vocab_size=V, hidden_size=32, num_heads=2, max_position_embeddings=40, pad_token_id=PAD,
                  eos_token_id=EOS)
    return GPTConfig.from_preset("gpt-tiny", **{**fields, **overrides})


def tiny_gpt(seed: int = 0, **overrides) -> GPTLMHeadModel:
    torch.manual_seed(seed)
    return randomise(GPTLMHeadModel(tiny_config(**overrides)), seed)


def left_padded(B: int = 3, T: int = 9, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0 full, rows 1 and 2 with 3 and 5 pads on the left."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, :5] = 0
    ids[mask == 0] = PAD
    return ids, mask


# --- config ----------------------------------------------------------------------------------

def test_presets_and_config_round_trip():
    small = GPTConfig.from_preset("gpt2-small")
    assert (small.num_layers, small.hidden_size, small.num_heads, small.intermediate_size) == (12, 768, 12, 3072)
    assert (small.max_position_embeddings, small.vocab_size, small.norm_placement) == (1024, 50257, "pre")
    assert small.hidden_act == "gelu_new" and small.layer_norm_eps == 1e-5 and small.tie_word_embeddings
    assert set(GPT_PRESETS) == {"gpt-tiny", "gpt-mini", "gpt2-small"}
    tiny = GPTConfig.from_preset("gpt-tiny", vocab_size=100, pad_token_id=0, eos_token_id=3, norm_placement="post")
    assert (tiny.num_layers, tiny.hidden_size, tiny.max_positions) == (2, 128, 256)
    assert tiny.label == "GPT-1" and small.label == "GPT-2" and tiny.family == "gpt"
    d = json.loads(json.dumps(tiny.to_dict()))
    assert GPTConfig.from_dict(d) == tiny


@pytest.mark.parametrize("fields, message", [
    (dict(norm_placement="middle"), "norm_placement"),
    (dict(hidden_size=30, num_heads=4), "divisible"),
    (dict(eos_token_id=500), "outside the vocabulary"),
    (dict(hidden_act="swish"), "Unknown activation"),
    (dict(embedding_dropout=1.5), "embedding_dropout"),
    (dict(num_layers=0), "num_layers"),
    (dict(family="bert"), "GPT family"),
])
def test_config_errors_are_clear_sentences(fields, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{"vocab_size": 100, **fields})


def test_unknown_preset_and_field_are_refused():
    with pytest.raises(ValueError, match="Unknown GPT preset"):
        GPTConfig.from_preset("gpt-huge")
    with pytest.raises(ValueError, match="Unknown GPT config field"):
        GPTConfig.from_dict({"vocab_size": 100, "type_vocab_size": 2})


# --- the model -------------------------------------------------------------------------------

def test_changing_a_token_changes_no_earlier_logits():
    model = tiny_gpt()
    ids = torch.randint(4, V, (2, 12))
    t = 6
    changed = ids.clone()
    changed[:, t] = (ids[:, t] - 4 + 1) % (V - 4) + 4
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert (a[:, t:] - b[:, t:]).abs().amax(-1).min() > 1e-4  # every later position did see it


def test_left_padding_changes_nothing_for_the_real_tokens():
    model = tiny_gpt()
    ids, mask = left_padded()
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).logits
        for b in range(ids.shape[0]):
            alone = model(ids[b: b + 1, mask[b].bool()]).logits[0]
            torch.testing.assert_close(batched[b, mask[b].bool()], alone, rtol=1e-5, atol=1e-5)


def test_loss_predicts_the_next_token_and_ignores_minus_100():
    model = tiny_gpt()
    ids = torch.randint(4, V, (2, 10))
    labels = ids.clone()
    labels[0, 4:] = -100
    out = model(ids, labels=labels)
    assert isinstance(out, CausalLMOutput) and out.logits.shape == (2, 10, V)
    keep = labels[:, 1:] != -100
    expected = F.cross_entropy(out.logits[:, :-1][keep], labels[:, 1:][keep])
    torch.testing.assert_close(out.loss, expected)
    nothing = model(ids, labels=torch.full_like(ids, -100)).loss
    assert nothing.item() == 0.0 and nothing.requires_grad


def test_attention_maps_are_causal_and_hide_padding():
    model = tiny_gpt()
    ids, mask = left_padded()
    with recording_attention(model) as layers, torch.no_grad():
        model(ids, attention_mask=mask)
    assert len(layers) == 2
    for _, module in layers:
        w = module.weights  # (B, N, T, T)
        assert w.shape == (3, 2, 9, 9)
        assert torch.equal(w.triu(1), torch.zeros_like(w))  # nothing above the diagonal
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, 9))
        real = mask.bool()
        hidden_keys = w.masked_select((real[:, None, :, None] & ~real[:, None, None, :]).expand_as(w))
        assert hidden_keys.abs().max() == 0  # real queries give padding keys no weight


def test_gpt1_and_gpt2_blocks_really_differ():
    gpt2 = GPTLMHeadModel(tiny_config(norm_placement="pre"))
    gpt1 = GPTLMHeadModel(tiny_config(norm_placement="post"))
    assert gpt2.encoder.final_norm is not None and gpt1.encoder.final_norm is None
    assert set(gpt2.state_dict()) - set(gpt1.state_dict()) == {"encoder.final_norm.weight", "encoder.final_norm.bias"}
    gpt1.load_state_dict(gpt2.state_dict(), strict=False)  # the same weights in both
    gpt1.eval(), gpt2.eval()
    ids = torch.randint(4, V, (2, 8))
    with torch.no_grad():
        post_states = gpt1(ids, output_hidden_states=True).hidden_states
        pre_states = gpt2(ids, output_hidden_states=True).hidden_states
    # Post-LN: every block's output is layer-normalised (unit LayerNorm weights at init).
    for h in post_states[1:]:
        torch.testing.assert_close(h.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
        torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(2, 8), atol=1e-3, rtol=0)
    # Pre-LN: the residual stream between blocks is not normalised.
    assert (pre_states[1].var(-1, unbiased=False) - 1).abs().max() > 0.1
    assert not torch.allclose(gpt1(ids).logits, gpt2(ids).logits)


def test_gpt2_initialisation_scales_the_residual_projections():
    torch.manual_seed(0)
    model = GPTLMHeadModel(tiny_config(hidden_size=128, num_layers=8, tie_word_embeddings=False))
    block = model.encoder.layers[0]
    assert abs(block.attention.qkv.weight.std().item() - 0.02) < 0.002
    assert abs(block.attention.out.weight.std().item() - 0.02 / 4) < 0.001  # 1/sqrt(2 * 8)
    assert abs(block.ffn.down.weight.std().item() - 0.02 / 4) < 0.001
    assert block.attention.qkv.bias.abs().max() == 0 and model.lm_head is not None


# --- generation ------------------------------------------------------------------------------

def recompute_greedy(model: GPTLMHeadModel, ids: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding without a cache: the whole sequence is re-read for every new token."""
    for _ in range(n):
        with torch.no_grad():
            nxt = model(ids, attention_mask=mask).logits[:, -1].argmax(-1)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids


def test_cached_greedy_equals_recomputing_the_prefix():
    model = tiny_gpt()
    ids, mask = left_padded()
    got = model.generate(ids, attention_mask=mask, max_new_tokens=7, eos_token_id=None)
    assert got.shape == (3, 16) and torch.equal(got[:, :9], ids)
    assert torch.equal(got, recompute_greedy(model, ids, mask, 7))
    # and every padded row continues exactly as it would alone
    for b in range(3):
        alone = model.generate(ids[b: b + 1, mask[b].bool()], max_new_tokens=7, eos_token_id=None)
        assert torch.equal(alone[0, -7:], got[b, -7:])


def test_beam_of_one_and_top_k_of_one_are_greedy():
    model = tiny_gpt()
    ids, mask = left_padded()
    greedy = model.generate(ids, mask, max_new_tokens=6, eos_token_id=None)
    assert torch.equal(model.generate(ids, mask, max_new_tokens=6, num_beams=1, eos_token_id=None), greedy)
    sampled = model.generate(ids, mask, max_new_tokens=6, do_sample=True, top_k=1, eos_token_id=None,
                             generator=torch.Generator().manual_seed(5))
    assert torch.equal(sampled, greedy)


def test_seeded_sampling_is_reproducible():
    model = tiny_gpt()
    ids, mask = left_padded()

    def sample(seed):
        return model.generate(ids, mask, max_new_tokens=10, do_sample=True, temperature=2.0, eos_token_id=None,
                              generator=torch.Generator().manual_seed(seed))

    a, b, c = sample(1), sample(1), sample(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(a[:, :9], ids)


def test_beam_search_returns_the_prompt_and_a_likely_continuation():
    model = tiny_gpt()
    ids = torch.randint(4, V, (2, 5))
    beams = model.generate(ids, max_new_tokens=4, num_beams=4, eos_token_id=None)
    greedy = model.generate(ids, max_new_tokens=4, eos_token_id=None)
    assert beams.shape == (2, 9) and torch.equal(beams[:, :5], ids)

    def log_prob(seq):
        with torch.no_grad():
            logp = model(seq).logits.log_softmax(-1)[:, 4:-1]
        return logp.gather(-1, seq[:, 5:, None]).sum((1, 2))

    assert (log_prob(beams) >= log_prob(greedy) - 1e-5).all()  # 4 beams find at least greedy's score here


def test_generation_stops_at_eos_and_pads_finished_rows():
    model = tiny_gpt()
    ids, mask = left_padded()
    free = model.generate(ids, mask, max_new_tokens=6, eos_token_id=None)
    stop = int(free[0, 9])  # row 0's first new token becomes the end token
    got = model.generate(ids, mask, max_new_tokens=6, eos_token_id=stop, pad_token_id=PAD)
    assert got[0, 9] == stop and (got[0, 10:] == PAD).all()
    for b in range(1, 3):  # the other rows follow greedy until they meet it too
        row, ref = got[b, 9:].tolist(), free[b, 9:].tolist()
        end = row.index(stop) + 1 if stop in row else len(row)
        assert row[:end] == ref[:end] and all(t == PAD for t in row[end:])


def test_generation_respects_the_context_length():
    model = tiny_gpt()  # 40 positions
    out = model.generate(torch.randint(4, V, (1, 35)), max_new_tokens=20, eos_token_id=None)
    assert out.shape == (1, 40)
    with pytest.raises(ValueError, match="no room to generate"):
        model.generate(torch.randint(4, V, (1, 40)), max_new_tokens=2)
    with pytest.raises(ValueError, match="at most 40"):
        model(torch.randint(4, V, (1, 41)))


# --- checkpoints and training ------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": False, "norm_placement": "post"}],
                         ids=["gpt2-tied", "gpt1-untied"])
def test_checkpoint_round_trip_is_identical(tmp_path, overrides):
    model = tiny_gpt(**overrides)
    save_model(model, tmp_path)
    meta = json.loads((tmp_path / "model_config.json").read_text())
    assert meta["family"] == "gpt" and meta["class"] == "GPTLMHeadModel"
    loaded = load_model(tmp_path)
    assert isinstance(loaded, GPTLMHeadModel) and loaded.config == model.config
    ids, mask = left_padded()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask).logits, model(ids, mask).logits, rtol=0, atol=0)


def test_a_tiny_model_overfits_one_batch():
    torch.manual_seed(0)
    model = GPTLMHeadModel(tiny_config(hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0))
    ids = torch.randint(4, V, (4, 16))
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for step in range(60):
        loss = model(ids, labels=ids).loss
        first = loss.item() if first is None else first
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if loss.item() < first / 2:
            break
    # seeded, so the same every run (2026-12-02, two processes, identical): the loss halves at step 24
    # (last/first 0.490) of the 60 allowed, a margin of 36 steps.
    assert loss.item() < first / 2, f"loss went from {first:.3f} to {loss.item():.3f} in 60 steps"


def test_positions_past_the_table_are_a_sentence_whether_numbered_here_or_given():
    """Numbered by the model (checked on the host against the length) or given by the caller
    (checked on the device), a position past max_position_embeddings is a ValueError that says so."""
    model = GPTLMHeadModel(GPTConfig.from_preset("gpt-tiny", vocab_size=100, max_position_embeddings=8)).eval()
    with pytest.raises(ValueError, match="has 9 tokens, but this model reads at most 8"):
        model(torch.ones(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="reaches position 9, but this model reads at most 8"):
        model(torch.ones(1, 4, dtype=torch.long), position_ids=torch.arange(5, 9)[None])
    assert model(torch.ones(1, 8, dtype=torch.long)).logits.shape == (1, 8, 100)
