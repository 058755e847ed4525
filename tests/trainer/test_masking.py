"""Masking units (whole word, phrase, n-gram, span) and UniLM attention masks: exact rules and
statistics over >= 100k tokens."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.objectives.examples import SpecialIds
from trainer.objectives.masking import (
    BIDIRECTIONAL, IGNORE_INDEX, KEEP, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ, TO_MASK, TO_RANDOM, UNILM_MODE_PROBS,
    UNILM_MODES, Masker, find_words, ngram_probs, phrase_break_table, phrase_units, span_length_probs,
    unilm_attention_masks,
)

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000, special=(0, 1, 2, 3, 4))


def corpus(seq_len: int, n_tokens: int, seed: int = 0, pair: bool = False):
    """Random sequences `[CLS] x [SEP]` (or `[CLS] a [SEP] b [SEP]`) with ~1.35 tokens per word."""
    rng = np.random.default_rng(seed)
    out, n = [], 0
    while n < n_tokens:
        body = rng.integers(5, 1000, seq_len - 2)
        if pair:
            body[rng.integers(10, seq_len - 12)] = SPECIAL.sep
        ids = np.concatenate([[SPECIAL.cls], body, [SPECIAL.sep]])
        starts = (rng.random(seq_len) < 0.74).astype(np.uint8)
        out.append((ids, starts))
        n += seq_len - 2
    return out


def run(unit: str, seqs, seed: int = 1, **kw):
    masker = Masker(SPECIAL, unit, **kw)
    rng = np.random.default_rng(seed)
    return [masker(ids, rng, word_starts=starts) for ids, starts in seqs]


def word_table(ids, starts):
    words = find_words(starts, ~SPECIAL.is_special(ids))
    word_of = np.full(len(ids), -1)
    for k, (s, e) in enumerate(zip(words.start, words.end)):
        word_of[s:e] = k
    return words, word_of


def test_words_group_pieces_and_stop_at_special_tokens():
    ids = np.array([2, 10, 11, 12, 3, 13, 14, 3])
    starts = np.array([1, 1, 0, 1, 1, 0, 0, 1])  # 13 continues a word across [SEP]: cut there
    w = find_words(starts, ~SPECIAL.is_special(ids))
    assert w.start.tolist() == [1, 3, 5] and w.end.tolist() == [3, 4, 7]
    assert w.run[0] == w.run[1] != w.run[2]


@pytest.mark.parametrize("unit", ["word", "phrase", "ngram", "span"])
def test_units_are_whole_words_inside_a_segment_and_never_special(unit):
    seqs = corpus(128, 40_000, seed=3, pair=True)
    breaks = np.arange(1000) % 6 == 0
    for (ids, starts), m in zip(seqs, run(unit, seqs, phrase_breaks=breaks if unit == "phrase" else None)):
        chosen = m.labels != IGNORE_INDEX
        assert not (chosen & SPECIAL.is_special(ids)).any()
        assert (m.inputs[~chosen] == ids[~chosen]).all() and (m.labels[chosen] == ids[chosen]).all()
        words, word_of = word_table(ids, starts)
        for w in np.unique(word_of[chosen]):  # a word is masked with all its pieces or not at all
            assert chosen[words.start[w]:words.end[w]].all()
        for lo, hi, n_words, _ in m.units:
            assert not SPECIAL.is_special(ids[lo:hi]).any()  # inside one segment
            assert word_of[lo] != word_of[lo - 1] and word_of[hi] != word_of[hi - 1]  # word boundaries
            assert len(np.unique(word_of[lo:hi])) == n_words


@pytest.mark.parametrize("unit,seq_len", [("word", 128), ("phrase", 512), ("ngram", 128), ("span", 128),
                                          ("span", 512)])
def test_budget_is_15_percent_of_tokens_and_80_10_10_is_per_unit(unit, seq_len):
    seqs = corpus(seq_len, 150_000)
    results = run(unit, seqs, phrase_breaks=np.arange(1000) % 6 == 0 if unit == "phrase" else None)
    ids = np.concatenate([s[0] for s in seqs])
    inputs = np.concatenate([m.inputs for m in results])
    labels = np.concatenate([m.labels for m in results])
    ordinary = ~SPECIAL.is_special(ids)
    assert abs((labels != IGNORE_INDEX).sum() / ordinary.sum() - 0.15) < 0.01
    treat = []
    for m in results:
        for lo, hi, _, how in m.units:
            x, y = m.inputs[lo:hi], m.labels[lo:hi]
            if how == TO_MASK:
                assert (x == SPECIAL.mask).all()
            elif how == KEEP:
                assert (x == y).all()
            else:  # random ordinary tokens, drawn one by one
                assert how == TO_RANDOM and not SPECIAL.is_special(x).any() and (x != SPECIAL.mask).all()
            treat.append(how)
    share = np.bincount(treat, minlength=3) / len(treat)
    assert len(treat) > 3000
    assert abs(share[TO_MASK] - 0.8) < 0.02 and abs(share[TO_RANDOM] - 0.1) < 0.02 and abs(share[KEEP] - 0.1) < 0.02
    assert (inputs == SPECIAL.mask).sum() > 0.75 * (labels != IGNORE_INDEX).sum()


def test_span_length_distribution_is_geometric_0_2_truncated_at_10():
    p = span_length_probs()
    n = np.arange(1, 11)
    assert len(p) == 10 and abs(p.sum() - 1) < 1e-12 and np.allclose(p[1:] / p[:-1], 0.8)
    assert abs((n * p).sum() - 3.8) < 0.01  # the paper's mean; clipping at 10 would give 4.46

    seqs = corpus(512, 150_000, seed=5)
    lengths = np.concatenate([m.units[:, 2] for m in run("span", seqs)])
    assert len(lengths) > 4000
    assert lengths.max() <= 10 and lengths.min() >= 1
    assert abs(lengths.mean() - 3.8) < 0.2
    observed = np.bincount(lengths, minlength=11)[1:] / len(lengths)
    assert 0.5 * np.abs(observed - p).sum() < 0.06  # total variation: only the budget cut of each
    # sequence's last span shortens it


def test_spans_never_touch_so_their_boundaries_are_visible():
    seqs = corpus(256, 60_000, seed=6)
    for (ids, _), m in zip(seqs, run("span", seqs)):
        chosen = m.labels != IGNORE_INDEX
        runs = np.flatnonzero(np.diff(np.concatenate([[0], chosen.astype(int), [0]])) != 0).reshape(-1, 2)
        assert runs.tolist() == m.units[:, :2].tolist()  # every masked run is exactly one span
        assert not chosen[m.units[:, 0] - 1].any() and not chosen[m.units[:, 1]].any()


def test_ngram_lengths_are_proportional_to_one_over_n():
    assert np.allclose(ngram_probs(), [6 / 11, 3 / 11, 2 / 11])
    seqs = corpus(512, 150_000, seed=7)
    n = np.concatenate([m.units[:, 2] for m in run("ngram", seqs)])
    share = np.bincount(n, minlength=4)[1:] / len(n)
    assert n.max() == 3 and len(n) > 10_000
    assert np.abs(share - ngram_probs()).max() < 0.04, share
    assert share[0] > share[1] > share[2]


def test_phrases_are_two_to_four_words_between_breaks():
    # words: one token each except 21+22; 7 and 8 are breaks (punctuation / stopwords)
    ids = np.array([2, 10, 11, 7, 12, 13, 14, 15, 16, 17, 8, 18, 8, 19, 20, 21, 22, 3, 23, 24, 3])
    starts = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1])
    breaks = np.zeros(1000, dtype=bool)
    breaks[[7, 8]] = True
    words = find_words(starts, ~SPECIAL.is_special(ids))
    units = phrase_units(words, ids, breaks)
    tokens = [ids[words.start[lo]:words.end[hi - 1]].tolist() for lo, hi in units]
    # [10 11] | 7 | [12..17] = 6 words -> 3 + 3 | 8 | [18] alone | 8 | [19 20 21+22] | [SEP] | [23 24]
    assert tokens == [[10, 11], [12, 13, 14], [15, 16, 17], [19, 20, 21, 22], [23, 24]]


def test_phrase_masking_units_are_multi_word_phrases():
    breaks = np.arange(1000) % 6 == 0
    seqs = corpus(256, 100_000, seed=8)
    results = run("phrase", seqs, phrase_breaks=breaks)
    n_words = np.concatenate([m.units[:, 2] for m in results])
    assert n_words.min() >= 2 and n_words.max() <= 4 and len(n_words) > 3000
    for (ids, starts), m in zip(seqs, results):
        words, word_of = word_table(ids, starts)
        for lo, hi, _, _ in m.units:
            inside = np.unique(word_of[lo:hi])
            one_token = inside[words.lengths[inside] == 1]
            assert not breaks[ids[words.start[one_token]]].any()  # a phrase never contains a break word


def test_phrase_break_table_marks_punctuation_and_stopwords():
    vocab = ["[PAD]", "the", "##the", ",", "cat", "Ġof", "▁and", "的", "苹", "--", "x1"]
    assert phrase_break_table(vocab).tolist() == [False, True, False, True, False, True, True, True, False,
                                                  True, False]


def test_masks_depend_only_on_the_generator():
    seqs = corpus(128, 5_000)
    for unit in ("word", "phrase", "ngram", "span"):
        a, b = run(unit, seqs, seed=11), run(unit, seqs, seed=11)
        assert all((x.inputs == y.inputs).all() and (x.labels == y.labels).all() for x, y in zip(a, b))
        c = run(unit, seqs, seed=12)
        assert any((x.labels != y.labels).any() for x, y in zip(a, c))


def test_word_masking_needs_word_starts():
    with pytest.raises(ValueError, match="word boundaries"):
        Masker(SPECIAL, "word")(np.array([2, 10, 11, 3]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown masking unit"):
        Masker(SPECIAL, "sentence")


def test_token_unit_with_a_maskable_region_masks_only_there():
    ids = np.concatenate([[2], np.arange(10, 40), [3], np.arange(40, 70), [3]])
    region = np.arange(len(ids)) > 31
    for seed in range(50):
        m = Masker(SPECIAL, "token")(ids, np.random.default_rng(seed), maskable=region)
        chosen = m.labels != IGNORE_INDEX
        assert chosen.sum() == 5 and not chosen[~region].any()  # round(0.15 * 30), in the target only


# ---------------------------------------------------------------------------- UniLM masks
def test_unilm_masks_are_the_four_published_shapes():
    from models_lib.core import masks

    assert UNILM_MODES == masks.MODES  # mode ids mean the same on both sides
    assert abs(sum(UNILM_MODE_PROBS) - 1) < 1e-12
    assert dict(zip(UNILM_MODES, UNILM_MODE_PROBS)) == {"bidirectional": 1 / 3, "seq2seq": 1 / 3,
                                                        "left_to_right": 1 / 6, "right_to_left": 1 / 6}
    # 5 real tokens ([CLS] a [SEP] b [SEP], source = the first 3), padded to 7
    t, f = True, False
    pad_rows = [[f, f, f, f, f, t, f], [f, f, f, f, f, f, t]]  # a padding query sees only itself
    bidirectional = [[t, t, t, t, t, f, f]] * 5 + pad_rows
    left_to_right = [[t, f, f, f, f, f, f],
                     [t, t, f, f, f, f, f],
                     [t, t, t, f, f, f, f],
                     [t, t, t, t, f, f, f],
                     [t, t, t, t, t, f, f]] + pad_rows
    right_to_left = [[t, t, t, t, t, f, f],
                     [f, t, t, t, t, f, f],
                     [f, f, t, t, t, f, f],
                     [f, f, f, t, t, f, f],
                     [f, f, f, f, t, f, f]] + pad_rows
    seq2seq = [[t, t, t, f, f, f, f],   # the source sees the source only
               [t, t, t, f, f, f, f],
               [t, t, t, f, f, f, f],
               [t, t, t, t, f, f, f],   # a target token sees the source and the target up to itself
               [t, t, t, t, t, f, f]] + pad_rows
    modes = torch.tensor([SEQ2SEQ, RIGHT_TO_LEFT, BIDIRECTIONAL, LEFT_TO_RIGHT])
    padding = torch.tensor([[1, 1, 1, 1, 1, 0, 0]] * 4)
    got = unilm_attention_masks(modes, padding, torch.tensor([3, 3, 3, 3]))
    assert got.dtype == torch.bool and got.shape == (4, 7, 7)
    for row, expected in enumerate((seq2seq, right_to_left, bidirectional, left_to_right)):
        assert torch.equal(got[row], torch.tensor(expected)), UNILM_MODES[int(modes[row])]
