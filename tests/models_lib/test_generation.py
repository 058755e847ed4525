"""models_lib.core.generation on a toy model whose next-token logits are a fixed function of the
last token (a Markov chain), so the right answers can be worked out by hand or by brute force."""
import itertools

import pytest
import torch

from models_lib.core.generation import filter_logits, generate


class Markov(torch.nn.Module):
    """logits(next | last) = table[last]; the 'cache' is the number of tokens fed so far."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = table
        self.calls: list[int] = []

    def start_generation(self, input_ids, attention_mask):
        return {"fed": 0}, input_ids

    def generation_step(self, state, tokens):
        self.calls.append(tokens.shape[1])
        state["fed"] += tokens.shape[1]
        return self.table[tokens[:, -1]], state

    def reorder_generation_state(self, state, index):
        return state


def chain_table():
    # 0 -> 1 -> 2 -> 3 -> 3 ... greedily; token 3 is the end of sequence.
    t = torch.full((4, 4), -5.0)
    t[0, 1] = t[1, 2] = t[2, 3] = t[3, 3] = 5.0
    return t


def test_greedy_follows_the_argmax_and_feeds_one_token_per_step():
    model = Markov(chain_table())
    out = generate(model, torch.tensor([[0], [1]]), max_new_tokens=5, eos_token_id=3, pad_token_id=0)
    # Row 1 ends first (1 -> 2 -> 3) and is padded while row 0 finishes (0 -> 1 -> 2 -> 3).
    assert out.tolist() == [[0, 1, 2, 3], [1, 2, 3, 0]]
    assert model.calls == [1, 1, 1]  # the prompt once, then one token per step


def test_without_eos_it_runs_max_new_tokens():
    out = generate(Markov(chain_table()), torch.tensor([[0]]), max_new_tokens=6)
    assert out.tolist() == [[0, 1, 2, 3, 3, 3, 3]]


def test_beam_search_finds_the_most_likely_sequence():
    torch.manual_seed(3)
    table = torch.randn(3, 3) * 2
    logp = table.log_softmax(-1)
    best = max(itertools.product(range(3), repeat=3),
               key=lambda seq: sum(float(logp[a, b]) for a, b in zip((0, *seq[:-1]), seq)))
    out = generate(Markov(table), torch.tensor([[0]]), max_new_tokens=3, num_beams=9)
    assert out[0, 1:].tolist() == list(best)
    # One beam is greedy decoding.
    assert torch.equal(generate(Markov(table), torch.tensor([[0]]), max_new_tokens=3, num_beams=1),
                       generate(Markov(table), torch.tensor([[0]]), max_new_tokens=3))


def test_beam_search_stops_at_eos_and_prefers_the_better_finished_hypothesis():
    out = generate(Markov(chain_table()), torch.tensor([[0], [2]]), max_new_tokens=8, num_beams=2,
                   eos_token_id=3, pad_token_id=0)
    assert out.tolist() == [[0, 1, 2, 3], [2, 3, 0, 0]]


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda f: torch.isfinite(f).squeeze(0).tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.8)) == [True, True, False, False]  # 0.5 + 0.3 reaches 0.8
    assert kept(filter_logits(logits, top_p=0.81)) == [True, True, True, False]
    assert kept(filter_logits(logits, top_p=0.1)) == [True, False, False, False]  # the top token always stays
    assert torch.allclose(filter_logits(logits, temperature=2.0), logits / 2)


def test_sampling_is_reproducible_and_top_k_1_is_greedy():
    torch.manual_seed(0)
    table = torch.randn(5, 5)
    prompt = torch.tensor([[0], [4]])
    a = generate(Markov(table), prompt, max_new_tokens=10, do_sample=True, generator=torch.Generator().manual_seed(7))
    b = generate(Markov(table), prompt, max_new_tokens=10, do_sample=True, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    k1 = generate(Markov(table), prompt, max_new_tokens=10, do_sample=True, top_k=1,
                  generator=torch.Generator().manual_seed(1))
    assert torch.equal(k1, generate(Markov(table), prompt, max_new_tokens=10))


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(num_beams=0), "num_beams"),
    (dict(do_sample=True, num_beams=2), "not both"),
    (dict(do_sample=True, temperature=0.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=-1), "top_k"),
])
def test_bad_settings_are_refused_with_a_sentence(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(Markov(chain_table()), torch.tensor([[0]]), **kwargs)
