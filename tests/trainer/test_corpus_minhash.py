"""MinHash signatures and LSH bands for near-duplicate documents (trainer.prep.minhash)."""

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.prep import minhash
from trainer.prep.minhash import MERSENNE_61, MinHasher, estimate_jaccard

REPO = Path(__file__).resolve().parents[2]
MH = MinHasher()


def random_words(n: int, seed: int, vocab_size: int = 5000) -> list[str]:
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(vocab_size)]
    return [rng.choice(vocab) for _ in range(n)]


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """The 5-gram set, written independently of the module: lower-case, split on whitespace."""
    ws = text.lower().split()
    if len(ws) < n:
        return {tuple(ws)} if ws else set()
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def test_shape_and_type():
    sig = MH.signature("one two three four five six seven")
    assert sig.dtype == np.uint32 and sig.shape == (14 * 8,)
    bands = MH.band_hashes(sig)
    assert bands.dtype == np.uint64 and bands.shape == (14,)
    other = MinHasher(ngram=3, bands=4, rows=2)
    assert other.signature("a b c d").shape == (8,) and other.band_hashes(other.signature("a b")).shape == (4,)


def test_the_same_text_gives_the_same_signature_in_another_process():
    text = " ".join(random_words(300, seed=1))
    code = (
        "import sys; from trainer.prep.minhash import MinHasher; m = MinHasher(seed=3); "
        "s = m.signature(sys.stdin.read()); print(','.join(map(str, s)), ','.join(map(str, m.band_hashes(s))))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO))  # another str hash salt
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, env=env,
                         cwd=REPO, check=True).stdout.split()
    here = MinHasher(seed=3)
    sig = here.signature(text)
    assert out[0] == ",".join(map(str, sig))
    assert out[1] == ",".join(map(str, here.band_hashes(sig)))


def test_the_signature_is_the_minimum_of_the_permuted_shingle_hashes():
    # The vectorised arithmetic against Python integers: (a*h + b) mod (2**61 - 1), low 32 bits.
    text = " ".join(random_words(60, seed=2))
    hashes = [int(h) for h in MH.shingle_hashes(text)]
    assert len(hashes) == 56 and all(h < 2**32 for h in hashes)  # 60 - 5 + 1 distinct 5-grams
    assert max(hashes) >= 2**31  # all 32 bits in use (all 56 below 2**31: chance 2**-56)
    expected = [min(((int(a) * h + int(b)) % MERSENNE_61) & 0xFFFFFFFF for h in hashes)
                for a, b in zip(MH._a, MH._b)]
    assert MH.signature(text).tolist() == expected


def test_the_modular_arithmetic_is_exact_where_the_fold_reaches_p():
    # x = a*h + b = 7*2**61 - 7 + t (t = 0..6) is t mod 2**61 - 1, but folding the top bits in
    # gives (2**61 - 7 + t) + 6 = p + t: only the final subtraction of p makes it t.
    a = 2**32 - 1
    for t in range(7):
        x = 7 * 2**61 - 7 + t
        h, b = divmod(x, a)
        assert h < 2**32 and b < 2**32 and x % MERSENNE_61 == t
        got = minhash.min_permuted(np.array([h], np.uint64), np.array([a], np.uint64), np.array([b], np.uint64))
        assert got.tolist() == [t]
    # And random values against Python integers.
    rng = np.random.default_rng(0)
    hs, as_, bs = (rng.integers(0, 2**32, size=k, dtype=np.uint64) for k in (50, 16, 16))
    expected = [min(((int(a) * int(h) + int(b)) % MERSENNE_61) & 0xFFFFFFFF for h in hs) for a, b in zip(as_, bs)]
    assert minhash.min_permuted(hs, as_, bs).tolist() == expected


def test_long_documents_are_permuted_in_chunks_with_the_same_result(monkeypatch):
    text = " ".join(random_words(3000, seed=3))
    whole = MH.signature(text)
    monkeypatch.setattr(minhash, "_CHUNK_ELEMENTS", 7 * MH.num_perm)  # 7 shingles at a time
    assert np.array_equal(MH.signature(text), whole)


def test_a_near_duplicate_shares_a_band():
    a = random_words(200, seed=4)
    b = list(a)
    b[100] = "changed"
    text_a, text_b = " ".join(a), " ".join(b)
    # One word changed touches 5 of the 196 5-grams: J = 191/201 = 0.95.
    assert jaccard(text_a, text_b) == pytest.approx(191 / 201)
    sa, sb = MH.signature(text_a), MH.signature(text_b)
    assert np.any(MH.band_hashes(sa) == MH.band_hashes(sb))
    assert estimate_jaccard(sa, sb) > 0.85


def test_unrelated_texts_share_no_band():
    for seed in range(5):
        a = " ".join(random_words(200, seed=10 + seed))
        b = " ".join(random_words(200, seed=20 + seed))
        assert jaccard(a, b) == 0
        sa, sb = MH.signature(a), MH.signature(b)
        assert not np.any(MH.band_hashes(sa) == MH.band_hashes(sb))
        assert estimate_jaccard(sa, sb) < 0.05


@pytest.mark.parametrize("keep", [0.2, 0.45, 0.6, 0.8, 0.95])
def test_the_jaccard_estimate_is_within_0_1_of_the_true_one(keep):
    # b keeps a's first `keep` share of 400 words and continues with other words.
    a = random_words(400, seed=5)
    cut = int(400 * keep)
    b = a[:cut] + random_words(400 - cut, seed=6)
    true = jaccard(" ".join(a), " ".join(b))
    assert 0 < true < 1
    # One signature's estimate has a standard error of sqrt(J(1-J)/112), up to 0.047, so "within
    # 0.1" is only a 2-sigma bound for one seed (with seed 0, J = 0.42 came out 0.11 off). The
    # mean of 4 seeds (error up to 0.024) must be within 0.1, each seed within 0.16 (3.4 sigma).
    estimates = []
    for seed in range(4):
        hasher = MinHasher(seed=seed)
        estimates.append(estimate_jaccard(hasher.signature(" ".join(a)), hasher.signature(" ".join(b))))
    assert abs(np.mean(estimates) - true) <= 0.1, (true, estimates)
    assert max(abs(e - true) for e in estimates) <= 0.16, (true, estimates)


def test_seeds_change_the_signature():
    text = " ".join(random_words(100, seed=7))
    s0, s1 = MinHasher(seed=0).signature(text), MinHasher(seed=1).signature(text)
    assert np.count_nonzero(s0 != s1) > 100  # of 112
    assert np.array_equal(MinHasher(seed=1).signature(text), s1)


def test_case_and_whitespace_do_not_matter():
    assert np.array_equal(MH.signature("The Cat sat on the mat today"),
                          MH.signature("  the cat\tsat on\n\nthe  MAT today "))
    assert not np.array_equal(MH.signature("the cat sat on the mat today"),
                              MH.signature("the cat sat on the mat tonight"))


def test_short_and_empty_documents():
    # Fewer than 5 words: one shingle of all the words.
    assert len(MH.shingle_hashes("a b c")) == 1
    assert np.array_equal(MH.signature("a b c"), MH.signature("A B  C"))
    assert not np.array_equal(MH.signature("a b c"), MH.signature("a c b"))  # the order counts
    # Empty (or only whitespace): the fixed signature, all 2**32 - 1.
    empty = MH.signature("")
    assert np.all(empty == 0xFFFFFFFF) and np.array_equal(MH.signature(" \n\t "), empty)
    # Exactly 5 words: one 5-gram.
    assert len(MH.shingle_hashes("a b c d e")) == 1 and len(MH.shingle_hashes("a b c d e f")) == 2


def test_band_hashes_follow_the_bands():
    sig = MH.signature(" ".join(random_words(100, seed=8)))
    changed = sig.copy()
    changed[8 * 3 + 5] ^= 1  # one entry of band 3
    h, hc = MH.band_hashes(sig), MH.band_hashes(changed)
    assert np.array_equal(h != hc, np.arange(14) == 3)
    # Equal rows in two bands still hash differently (the band's number is in the hash).
    same = np.tile(sig[:8], 14)
    assert len(set(MH.band_hashes(same).tolist())) == 14
    with pytest.raises(ValueError):
        MH.band_hashes(sig[:100])


def test_estimate_jaccard():
    sig = MH.signature("a b c d e f g")
    assert estimate_jaccard(sig, sig) == 1.0
    other = sig.copy()
    other[:28] += 1
    assert estimate_jaccard(sig, other) == 0.75  # 84 of 112 equal
    with pytest.raises(ValueError):
        estimate_jaccard(sig, sig[:10])


def test_band_probability_matches_the_documented_values():
    # 1 - (1 - s**8)**14, as in the module's docstring.
    for s, p in [(0.5, 0.053), (0.7, 0.565), (0.75, 0.772), (0.8, 0.924), (0.9, 0.9996)]:
        assert MH.band_probability(s) == pytest.approx(p, abs=5e-4)
        assert f"{s:.2f}       {p}" in minhash.__doc__


def test_bad_parameters_are_refused():
    for kwargs in ({"ngram": 0}, {"bands": 0}, {"rows": -1}, {"rows": 2.0}):
        with pytest.raises(ValueError):
            MinHasher(**kwargs)
