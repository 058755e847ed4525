"""MinHash signatures for finding near-duplicate documents (locality-sensitive hashing).

A document is the set of its word 5-grams ("shingles") taken from the lower-cased text with its
whitespace normalised (``text.lower().split()``; punctuation stays part of the words). A document
of fewer than five words is one shingle of all its words; an empty one has a fixed signature
(every entry 2**32 - 1), so empty documents all look alike.

Hashing, all of it reproducible in any process and on any machine (no use of Python's salted
``hash()``):

- each word is hashed once, ``xxh3_64`` of its UTF-8 bytes;
- a window of ``ngram`` word hashes is combined with numpy (a polynomial over the window, mod
  2**64, then the splitmix64 finaliser) and reduced to a 32-bit shingle hash ``h``;
- ``bands * rows`` permutations ``h -> (a*h + b) mod (2**61 - 1)``, keeping the low 32 bits; the
  signature holds, for each permutation, the minimum over the document's shingles. ``a`` (in
  [1, 2**32)) and ``b`` (in [0, 2**32)) come from ``numpy.random.default_rng(seed)``. Drawing them
  below 2**32 keeps ``a*h + b`` under 2**64, so the arithmetic is exact in uint64 (with ``a`` up to
  2**61, as some libraries draw it, the product silently wraps).

The probability that two signatures agree on one entry is the Jaccard similarity ``s`` of the
two shingle sets, so :func:`estimate_jaccard` (the fraction of equal entries) estimates it.
The signature is cut into ``bands`` bands of ``rows`` entries, and :meth:`MinHasher.band_hashes`
gives one 64-bit hash per band; two documents that share any band are candidate duplicates.
That happens with probability ``1 - (1 - s**rows)**bands``. With the defaults, FineWeb's
(5-grams, 14 bands x 8 rows = 112 permutations):

    =========  ==============================
    s          P(at least one shared band)
    =========  ==============================
    0.50       0.053
    0.60       0.211
    0.70       0.565
    0.75       0.772
    0.80       0.924
    0.85       0.988
    0.90       0.9996
    =========  ==============================

so the threshold (where the curve is steepest) lies around s = 0.72-0.75.
"""

from __future__ import annotations

import numpy as np
import xxhash

MERSENNE_61 = (1 << 61) - 1
_MASK32 = 0xFFFFFFFF
_EMPTY = np.uint32(_MASK32)
# Polynomial base for combining a window's word hashes (odd, so multiplying is a bijection mod 2**64).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# Rows of shingles permuted at once: bounds the temporary (rows x permutations) arrays to ~2 MB.
_CHUNK_ELEMENTS = 1 << 18


def word_hashes(words: list[bytes]) -> np.ndarray:
    """``xxh3_64`` of each word's bytes, as a uint64 array (one C call per word, no Python hashing)."""
    return np.fromiter(map(xxhash.xxh3_64_intdigest, words), dtype=np.uint64, count=len(words))


def window_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """One uint64 per window of ``n`` consecutive hashes (order matters), for every window start.

    A polynomial ``((h[i] * B + h[i+1]) * B + ...)`` mod 2**64, computed on whole arrays.
    ``len(hashes) - n + 1`` values; none when there are fewer than ``n`` hashes.
    """
    m = len(hashes) - n + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    out = hashes[:m].copy()
    for j in range(1, n):
        out *= _BASE
        out += hashes[j:j + m]
    return out


def _finalise(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit (in place, returns x)."""
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


def _words(text: str) -> list[bytes]:
    # Lower-case, split on any whitespace, then encode once: joining with single spaces and
    # splitting the bytes again gives the same words as str.split(), without a Python call per word.
    normal = " ".join(text.lower().split())
    if not normal:
        return []
    return normal.encode("utf-8", "surrogatepass").split(b" ")


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The fraction of equal entries of two signatures: an estimate of the Jaccard similarity.

    With k = 112 permutations its standard error is sqrt(s(1-s)/k), at most about 0.047.
    """
    a, b = np.asarray(sig_a), np.asarray(sig_b)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"signatures of different or empty shapes: {a.shape} and {b.shape}")
    return float(np.count_nonzero(a == b)) / len(a)


def min_permuted(shingles: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each permutation k, ``min over h of ((a[k]*h + b[k]) mod (2**61 - 1)) & (2**32 - 1)``.

    ``shingles``: uint64 values below 2**32 (at least one); ``a``, ``b``: uint64 below 2**32.
    Returns uint32, one entry per permutation. The shingles are taken a few thousand at a time,
    so a long document never needs a (shingles x permutations) array of more than ~2 MB.
    """
    p = np.uint64(MERSENNE_61)
    best = np.full(len(a), _EMPTY, dtype=np.uint32)
    step = max(1, _CHUNK_ELEMENTS // len(a))
    for start in range(0, len(shingles), step):
        x = shingles[start:start + step, None] * a  # at most (2**32 - 1)**2: both are below 2**32
        x += b  # still below 2**64
        # x mod (2**61 - 1): fold the bits from bit 61 up back in (2**61 = 1 mod p), which leaves
        # x <= p + 7, then subtract p where x >= p.
        high = x >> np.uint64(61)
        x &= p
        x += high
        np.subtract(x, p, out=x, where=x >= p)
        # The low 32 bits (a truncating cast), then the minimum over the shingles.
        np.minimum(best, x.astype(np.uint32).min(axis=0), out=best)
    return best


class MinHasher:
    """MinHash signatures and LSH band hashes; see the module's docstring for the method.

    ``ngram`` words per shingle, ``bands`` x ``rows`` permutations, ``seed`` for the
    permutations' coefficients: the same arguments give the same signatures in any process.
    """

    def __init__(self, *, ngram: int = 5, bands: int = 14, rows: int = 8, seed: int = 0):
        for name, value in (("ngram", ngram), ("bands", bands), ("rows", rows)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MinHasher's {name} must be a positive integer, not {value!r}")
        self.ngram, self.bands, self.rows, self.seed = ngram, bands, rows, seed
        self.num_perm = bands * rows
        rng = np.random.default_rng(seed)
        self._a = rng.integers(1, 1 << 32, size=self.num_perm, dtype=np.uint64)
        self._b = rng.integers(0, 1 << 32, size=self.num_perm, dtype=np.uint64)

    def __repr__(self) -> str:
        return f"MinHasher(ngram={self.ngram}, bands={self.bands}, rows={self.rows}, seed={self.seed})"

    def band_probability(self, similarity: float) -> float:
        """The probability that two documents of Jaccard ``similarity`` share at least one band."""
        return 1.0 - (1.0 - similarity**self.rows) ** self.bands

    def shingle_hashes(self, text: str) -> np.ndarray:
        """The distinct 32-bit hashes (uint64 values below 2**32) of the text's shingles, sorted."""
        words = _words(text)
        if not words:
            return np.zeros(0, dtype=np.uint64)
        hashes = word_hashes(words)
        n = min(self.ngram, len(hashes))  # fewer words than ngram: one shingle of all of them
        shingles = _finalise(window_hashes(hashes, n))
        shingles >>= np.uint64(32)
        return np.unique(shingles)

    def signature(self, text: str) -> np.ndarray:
        """The MinHash signature: uint32, shape (bands*rows,)."""
        shingles = self.shingle_hashes(text)
        if not len(shingles):
            return np.full(self.num_perm, _EMPTY, dtype=np.uint32)
        return min_permuted(shingles, self._a, self._b)

    def band_hashes(self, signature: np.ndarray) -> np.ndarray:
        """One uint64 per band: ``xxh3_64`` of the band's entries (little-endian uint32 bytes),
        seeded with the band's number, so equal rows in two different bands hash differently."""
        sig = np.asarray(signature)
        if sig.shape != (self.num_perm,):
            raise ValueError(f"a signature of shape ({self.num_perm},) was expected, not {sig.shape}")
        raw = sig.astype("<u4", copy=False).tobytes()
        width = 4 * self.rows
        return np.array(
            [xxhash.xxh3_64_intdigest(raw[i * width:(i + 1) * width], seed=i) for i in range(self.bands)],
            dtype=np.uint64,
        )
