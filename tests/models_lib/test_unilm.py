"""UniLM: the four self-attention masks, what they let the encoder see, and seq2seq decoding."""
from __future__ import annotations

import pytest
import torch

from models_lib.core import masks
from models_lib.families import presets
from models_lib.families.unilm import UniLMForPreTraining, generate_seq2seq

V, MASK, SEP = 61, 4, 3

PAD = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # example 1 has one padding token at the end


def rows(*lines: str) -> list[list[bool]]:
    return [[c == "1" for c in line] for line in lines]


# Example 1's last row is padding: it sees only itself; its column is hidden from everyone.
EXPECTED = {
    "bidirectional": [rows("1111", "1111", "1111", "1111"), rows("1110", "1110", "1110", "0001")],
    "left_to_right": [rows("1000", "1100", "1110", "1111"), rows("1000", "1100", "1110", "0001")],
    "right_to_left": [rows("1111", "0111", "0011", "0001"), rows("1110", "0110", "0010", "0001")],
}


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_masks_have_exactly_the_expected_shape(mode):
    got = masks.unilm_mask(mode, PAD)
    assert got.dtype == torch.bool and got.shape == (2, 4, 4)
    assert got.tolist() == EXPECTED[mode]


def test_seq2seq_mask_shows_the_source_to_all_and_the_target_causally():
    pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    got = masks.seq2seq(pad, torch.tensor([2, 3]))  # sources: 2 and 3 tokens
    assert got.tolist() == [
        rows("11000",   # source rows see the source only
             "11000",
             "11100",   # target rows: the source + the target up to themselves
             "11110",
             "11111"),
        rows("11100",
             "11100",
             "11100",
             "11110",
             "00001"),  # padding: only itself
    ]
    assert masks.seq2seq_token_type_ids(pad, torch.tensor([2, 3])).tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 1, 0]]


def test_unknown_mode_and_missing_source_lengths_are_refused():
    with pytest.raises(ValueError, match="Unknown UniLM mask mode"):
        masks.unilm_mask("diagonal", PAD)
    with pytest.raises(ValueError, match="source_lengths"):
        masks.unilm_mask("seq2seq", PAD)


def unilm(seed: int = 0) -> UniLMForPreTraining:
    torch.manual_seed(seed)
    config = presets.get("unilm-tiny", vocab_size=V, hidden_size=32, num_heads=2, max_position_embeddings=24)
    return UniLMForPreTraining(config).eval()


@pytest.mark.parametrize("mode, sees_future", [("left_to_right", False), ("right_to_left", True)])
def test_a_directional_mask_hides_the_other_side(mode, sees_future):
    model = unilm()
    ids = torch.randint(5, V, (1, 10))
    t = 5
    changed = ids.clone()
    if sees_future:
        changed[0, :t] = torch.randint(5, V, (t,))  # right-to-left: position t must not see < t
    else:
        changed[0, t + 1:] = torch.randint(5, V, (10 - t - 1,))  # left-to-right: must not see > t
    mask = masks.unilm_mask(mode, torch.ones(1, 10, dtype=torch.long))
    with torch.no_grad():
        a, b = model(ids, mask).mlm_logits, model(changed, mask).mlm_logits
    kept = slice(t, None) if sees_future else slice(0, t + 1)
    torch.testing.assert_close(a[0, kept], b[0, kept], rtol=0, atol=1e-6)
    assert not torch.allclose(a, b)  # the other side did change


def test_seq2seq_source_is_independent_of_the_target():
    model = unilm()
    ids = torch.randint(5, V, (1, 10))
    changed = ids.clone()
    changed[0, 7] = (ids[0, 7] + 1 - 5) % (V - 5) + 5
    mask = masks.seq2seq(torch.ones(1, 10, dtype=torch.long), torch.tensor([4]))
    with torch.no_grad():
        a, b = model(ids, mask).mlm_logits, model(changed, mask).mlm_logits
    torch.testing.assert_close(a[0, :7], b[0, :7], rtol=0, atol=1e-6)  # source and earlier target
    assert not torch.allclose(a[0, 7:], b[0, 7:])


def test_mlm_loss_under_a_full_mask():
    model = unilm()
    ids = torch.randint(5, V, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[:, 6] = ids[:, 6]
    ids[:, 6] = MASK
    mask = masks.seq2seq(torch.ones(2, 8, dtype=torch.long), torch.tensor([4, 5]))
    out = model(ids, mask, masks.seq2seq_token_type_ids(torch.ones(2, 8), torch.tensor([4, 5])), mlm_labels=labels)
    assert out.mlm_logits.shape == (2, V) and torch.isfinite(out.loss)


def test_greedy_seq2seq_decoding_predicts_each_mask_in_turn():
    model = unilm()
    source = torch.tensor([[2, 11, 12, 13, SEP]])
    generated = generate_seq2seq(model, source, max_new_tokens=4, mask_id=MASK, eos_id=SEP)
    assert generated.shape[0] == 1 and 1 <= generated.shape[1] <= 4
    tokens = generated[0].tolist()
    for k, token in enumerate(tokens):  # each token is the argmax at the [MASK] after the previous ones
        ids = torch.cat([source[0], torch.tensor(tokens[:k] + [MASK])])[None]
        T = ids.shape[1]
        mask = masks.seq2seq(torch.ones(1, T, dtype=torch.long), torch.tensor([5]))
        types = (torch.arange(T) >= 5).long()[None]
        with torch.no_grad():
            assert int(model(ids, mask, types).mlm_logits[0, -1].argmax()) == token


def test_decoding_stops_at_eos_and_handles_padded_sources():
    model = unilm()
    with torch.no_grad():
        model.mlm_head.bias[SEP] = 1e4  # the model now always ends at once
    sources = torch.tensor([[2, 11, 12, SEP, 0], [2, 11, 12, 13, SEP]])
    got = generate_seq2seq(model, sources, source_mask=torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
                           max_new_tokens=5, mask_id=MASK, eos_id=SEP)
    assert got.tolist() == [[SEP], [SEP]]
