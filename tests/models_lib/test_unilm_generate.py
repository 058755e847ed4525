"""UniLM's generate (the generation hooks): the same tokens as mask-by-mask decoding one example at a time,
for any padding; beam search and sampling through the shared decoder."""
from __future__ import annotations

import pytest
import torch

from models_lib.core import masks
from models_lib.families import presets
from models_lib.families.unilm import UniLMForPreTraining, generate_seq2seq

from .helpers import randomise

V, PAD, SEP, MASK = 61, 0, 3, 4


def unilm(seed: int = 0, **overrides) -> UniLMForPreTraining:
    torch.manual_seed(seed)
    config = presets.get("unilm-tiny", vocab_size=V, hidden_size=32, num_heads=2, max_position_embeddings=24,
                         **overrides)
    return randomise(UniLMForPreTraining(config), seed)


def reference(model: UniLMForPreTraining, source: list[int], n: int, eos: int | None) -> list[int]:
    """The seq2seq decoding of one unpadded source, written out step by step: append [MASK],
    encode under the seq2seq mask with segment 1 for the target (if the model has segments),
    take the argmax at the [MASK]."""
    target: list[int] = []
    for _ in range(n):
        ids = torch.tensor([source + target + [MASK]])
        T, S = ids.shape[1], len(source)
        mask = masks.seq2seq(torch.ones(1, T, dtype=torch.long), torch.tensor([S]))
        types = (torch.arange(T) >= S).long()[None] if model.config.type_vocab_size >= 2 else None
        with torch.no_grad():
            token = int(model(ids, mask, types).mlm_logits[0, -1].argmax())
        target.append(token)
        if token == eos:
            break
    return target


SOURCES = [[2, 11, 12, 13, 14, 15, SEP], [2, 21, 22, SEP], [2, 31, 32, 33, SEP]]


def batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, SOURCES))
    ids = torch.full((len(SOURCES), width), PAD)
    mask = torch.zeros(len(SOURCES), width, dtype=torch.long)
    for b, s in enumerate(SOURCES):
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[b, cols], mask[b, cols] = torch.tensor(s), 1
    return ids, mask


@pytest.mark.parametrize("side", ["right", "left"])
def test_greedy_generate_equals_one_example_at_a_time(side):
    model = unilm()
    ids, mask = batch(side)
    got = model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=6)
    assert got.shape == (3, ids.shape[1] + 6) and torch.equal(got[:, :ids.shape[1]], ids)  # source, then target
    for b, source in enumerate(SOURCES):
        assert got[b, ids.shape[1]:].tolist() == reference(model, source, 6, None)
    # generate_seq2seq (the explorer's entry point) returns the same target tokens
    assert torch.equal(generate_seq2seq(model, ids, source_mask=mask, max_new_tokens=6, mask_id=MASK, eos_id=-1),
                       got[:, ids.shape[1]:])


def test_rows_end_at_eos_and_are_padded_after():
    model = unilm()
    ids, mask = batch("right")
    free = model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=6)[:, ids.shape[1]:]
    eos = int(free[1, 1])  # row 1 stops after two tokens
    got = generate_seq2seq(model, ids, source_mask=mask, max_new_tokens=6, mask_id=MASK, eos_id=eos, pad_id=PAD)
    for b, source in enumerate(SOURCES):
        expected = reference(model, source, 6, eos)
        assert got[b, :len(expected)].tolist() == expected and (got[b, len(expected):] == PAD).all()
    assert got.shape[1] == max(len(reference(model, s, 6, eos)) for s in SOURCES)


def test_without_segment_embeddings_and_at_the_position_limit():
    model = unilm(type_vocab_size=1)
    ids = torch.tensor([[2] + list(range(5, 25)) + [SEP]])  # 22 of 24 positions: room for 2
    got = model.generate(ids, mask_token_id=MASK, eos_token_id=None, max_new_tokens=10)
    assert got.shape == (1, 24)
    assert got[0, 22:].tolist() == reference(model, ids[0].tolist(), 2, None)
    with pytest.raises(ValueError, match="no room for a target"):
        model.generate(torch.randint(5, V, (1, 24)), mask_token_id=MASK, eos_token_id=SEP)


def test_beam_search_and_sampling_run_through_the_hooks():
    model = unilm()
    ids, mask = batch("right")
    greedy = model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=5)
    one_beam = model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=5, num_beams=1)
    assert torch.equal(one_beam, greedy)
    beams = model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=5, num_beams=3)
    assert beams.shape == greedy.shape and torch.equal(beams[:, :ids.shape[1]], ids)

    def sample(seed: int, **kw) -> torch.Tensor:
        return model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=5, do_sample=True,
                              generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(1, temperature=3.0), sample(1, temperature=3.0))
    assert not torch.equal(sample(1, temperature=3.0), sample(2, temperature=3.0))
    assert torch.equal(sample(4, top_k=1), greedy)
    assert model.training is False  # generate leaves the mode as it found it (eval here)
    model.train()
    model.generate(ids, mask, mask_token_id=MASK, eos_token_id=None, max_new_tokens=2)
    assert model.training is True
