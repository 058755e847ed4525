"""Document quality filters: Gopher's quality and repetition rules and FineWeb's own rules.

Each filter is called with one document's text (its lines joined by ``"\\n"``) and returns
``None`` to keep it or a reason key (in :data:`REASONS`) naming the first rule it fails. The
thresholds are dataclass fields with the published defaults; a field set to ``None`` (or, for
the n-gram rules, an empty tuple) switches that rule off.

Sources:

- :class:`GopherQuality` and :class:`GopherRepetition`: Rae et al. 2021, "Scaling Language
  Models: Methods, Analysis & Insights from Training Gopher", appendix A (MassiveText's quality
  filters and Table A1's repetition thresholds), with the definitions made concrete the way
  datatrove's ``GopherQualityFilter`` and ``GopherRepetitionFilter`` make them.
- :class:`FineWebQuality`: the three rules FineWeb added (Penedo et al. 2024), with the
  definitions of datatrove's ``FineWebQualityFilter``.

Differences from datatrove, on purpose:

- Words are the text split on whitespace (``str.split()``), not NLTK's tokenizer, which is
  ~100x slower and needs data files. For the word count and the mean word length, punctuation
  at either end of a word is stripped (``"end."`` is the 3-letter word ``end``) and words that
  are only punctuation (``"-"``, ``"..."``) are not words, much as the tokenizer splits them off.
- The '#' and ellipsis ratios are per word (as counted above); the share of words with a
  letter is over all whitespace-separated tokens, punctuation-only ones included.
- The stop words are matched without regard to case (``The`` counts as ``the``); each
  occurrence counts, as in datatrove (``the ... the`` is two).
- Bullets are ``•``, ``●``, ``◦``, ``‣``, ``▪``, ``-`` and ``*`` (datatrove: ``•`` and ``-``).
- The top 2/3/4-gram rules only look at an n-gram that occurs at least twice: one that occurs
  once is not repetition (datatrove's would remove any document of under about ten words).
- Duplicate 5..10-grams count the characters (spaces left out) of the words covered by the
  second and later occurrences of any repeated n-gram, each word once however many such
  n-grams overlap it: the paper's definition; datatrove approximates it by skipping ahead.
- FineWeb's duplicated-line threshold is 0.1, the value the FineWeb write-up gives;
  datatrove's code defaults to 0.01. Its fourth check (newlines per word over 0.3, "list
  ratio"), which is not among the three rules the write-up describes, is left out.

Speed: everything is str methods, ``collections.Counter`` over lines and paragraphs, and numpy
over one 64-bit hash per word for the n-grams; no Python loop over characters. The cheap rules
run first, and a filter returns at the first rule that fails.
"""

from __future__ import annotations

import operator
import re
import string
from collections import Counter
from dataclasses import dataclass
from itertools import compress, repeat

import numpy as np

from trainer.prep.minhash import word_hashes

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("•", "●", "◦", "‣", "▪", "-", "*")
ELLIPSES = ("...", "…")
# What FineWeb counts as a line ending in punctuation (datatrove's stop_chars).
FINEWEB_LINE_ENDS = (".", "'", '"', "!", "?")

REASONS: dict[str, str] = {
    # Gopher quality
    "gopher_word_count": "Fewer than 50 or more than 100,000 words.",
    "gopher_mean_word_length": "The mean word length is under 3 or over 10 characters.",
    "gopher_symbol_ratio": "More than one '#' or one ellipsis ('...', '…') for every 10 words.",
    "gopher_bullet_lines": "More than 90% of the lines start with a bullet point.",
    "gopher_ellipsis_lines": "More than 30% of the lines end with an ellipsis.",
    "gopher_alphabetic_words": "Fewer than 80% of the words contain a letter.",
    "gopher_stop_words": "Fewer than two of the common English words the, be, to, of, and, that, have, with.",
    # Gopher repetition
    "gopher_repeated_paragraphs": "More than 30% of the paragraphs are repeats of an earlier paragraph.",
    "gopher_repeated_paragraph_chars": "More than 20% of the characters are in repeated paragraphs.",
    "gopher_repeated_lines": "More than 30% of the lines are repeats of an earlier line.",
    "gopher_repeated_line_chars": "More than 20% of the characters are in repeated lines.",
    "gopher_top_ngram": "One 2-, 3- or 4-word phrase repeats so often that it makes up over 20%, 18% or 16% of the text.",
    "gopher_duplicate_ngrams": "Repeated runs of 5 to 10 words make up over 15% (5 words) to 10% (10 words) of the text.",
    # FineWeb
    "fineweb_line_punctuation": "At most 12% of the lines end in punctuation (. ! ? or a quote).",
    "fineweb_short_lines": "Lines of 30 characters or fewer make up 67% or more of the lines.",
    "fineweb_duplicate_lines": "Lines that repeat an earlier line hold 10% or more of the characters.",
}

# Stripped from both ends of a word before measuring it: ASCII and common Unicode punctuation.
_PUNCTUATION = string.punctuation + "“”‘’«»‹›„‚…–—―·•¡¿、。，！？：；（）【】《》「」『』"
_HAS_LETTER = re.compile(r"[^\W\d_]").search  # a letter: a word character that is not a digit or "_"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # one or more blank (empty or whitespace-only) lines
# n-gram keys: key(n) = key(n-1) * _BASE + hash(word n), mod 2**64 (odd base: no information lost).
_BASE = np.uint64(0x9E3779B97F4A7C15)


def _repeats(items: list[str]) -> tuple[int, int]:
    """How many items repeat an earlier one, and the characters of those repeats."""
    counts = Counter(items)
    n_repeats = len(items) - len(counts)
    if not n_repeats:
        return 0, 0
    return n_repeats, sum(len(item) * (c - 1) for item, c in counts.items() if c > 1)


@dataclass(frozen=True)
class GopherQuality:
    """MassiveText's quality rules (Rae et al. 2021, appendix A.1.1): keep a document with
    50..100,000 words, a mean word length of 3..10 characters, at most 0.1 '#' and at most 0.1
    ellipses per word, at most 90% of its lines starting with a bullet and 30% ending with an
    ellipsis, at least 80% of its words containing a letter, and at least 2 stop words."""

    min_words: int | None = 50
    max_words: int | None = 100_000
    min_mean_word_length: float | None = 3
    max_mean_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    min_alphabetic_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    stop_words: tuple[str, ...] = STOP_WORDS
    bullets: tuple[str, ...] = BULLETS

    def __call__(self, text: str) -> str | None:
        raw_words = text.split()
        if self.min_words is not None and len(raw_words) < self.min_words:
            return "gopher_word_count"  # fewer tokens than words needed: no need to look closer
        stripped = list(map(str.strip, raw_words, repeat(_PUNCTUATION)))
        n_words = len(stripped) - stripped.count("")  # words that are not only punctuation
        if (self.min_words is not None and n_words < self.min_words) or (
            self.max_words is not None and n_words > self.max_words
        ):
            return "gopher_word_count"
        if n_words == 0:
            return "gopher_word_count"
        mean_length = sum(map(len, stripped)) / n_words
        if (self.min_mean_word_length is not None and mean_length < self.min_mean_word_length) or (
            self.max_mean_word_length is not None and mean_length > self.max_mean_word_length
        ):
            return "gopher_mean_word_length"
        if self.max_symbol_word_ratio is not None:
            ellipses = text.count("...") + text.count("…")
            if max(text.count("#"), ellipses) / n_words > self.max_symbol_word_ratio:
                return "gopher_symbol_ratio"
        lines = text.split("\n")
        if self.max_bullet_lines_ratio is not None:
            bullets = self.bullets
            n_bullets = sum(1 for line in lines if line.lstrip().startswith(bullets))
            if n_bullets / len(lines) > self.max_bullet_lines_ratio:
                return "gopher_bullet_lines"
        if self.max_ellipsis_lines_ratio is not None:
            n_ellipsis = sum(1 for line in lines if line.rstrip().endswith(ELLIPSES))
            if n_ellipsis / len(lines) > self.max_ellipsis_lines_ratio:
                return "gopher_ellipsis_lines"
        if self.min_alphabetic_words_ratio is not None:
            # Fast path: a word that is all letters once stripped has one; search only the others.
            all_letters = list(map(str.isalpha, stripped))
            others = compress(raw_words, map(operator.not_, all_letters))
            with_letter = sum(all_letters) + sum(map(bool, map(_HAS_LETTER, others)))
            if with_letter / len(raw_words) < self.min_alphabetic_words_ratio:
                return "gopher_alphabetic_words"
        if self.min_stop_words is not None:
            wanted = self.min_stop_words
            stop = {w.lower() for w in self.stop_words}
            longest = max(map(len, stop), default=0)
            found = 0
            for word in stripped:
                if len(word) <= longest and word.lower() in stop:
                    found += 1
                    if found >= wanted:
                        break
            if found < wanted:
                return "gopher_stop_words"
        return None


@dataclass(frozen=True)
class GopherRepetition:
    """MassiveText's repetition rules (Rae et al. 2021, Table A1). Remove a document when, over
    the whole text's characters:

    - more than 30% of its paragraphs (split at blank lines) repeat an earlier paragraph, or the
      repeats hold more than 20% of the characters;
    - the same for its (non-blank) lines: 30% of the lines, 20% of the characters;
    - the most frequent 2-, 3- and 4-gram (occurring at least twice), all its occurrences
      counted, holds more than 20%, 18%, 16% of the characters;
    - the words covered by repeats of 5-, 6-, ..., 10-grams hold more than 15%, 14%, ..., 10%.

    Paragraph and line rules run first (cheap); the n-grams are found on one 64-bit hash per
    word with numpy, and an n-gram can only repeat where its (n-1)-word prefix does, so each
    longer n only looks at the places where the shorter one repeated and stops when none do.
    """

    max_repeated_paragraphs_ratio: float | None = 0.30
    max_repeated_paragraph_chars_ratio: float | None = 0.20
    max_repeated_lines_ratio: float | None = 0.30
    max_repeated_line_chars_ratio: float | None = 0.20
    top_ngrams: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    duplicate_ngrams: tuple[tuple[int, float], ...] = (
        (5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10),
    )

    def __call__(self, text: str) -> str | None:
        total = len(text)
        if not total:
            return None
        if self.max_repeated_paragraphs_ratio is not None or self.max_repeated_paragraph_chars_ratio is not None:
            paragraphs = _PARAGRAPH_BREAK.split(text.strip())
            n_repeats, chars = _repeats(paragraphs)
            if self.max_repeated_paragraphs_ratio is not None and (
                n_repeats / len(paragraphs) > self.max_repeated_paragraphs_ratio
            ):
                return "gopher_repeated_paragraphs"
            if self.max_repeated_paragraph_chars_ratio is not None and (
                chars / total > self.max_repeated_paragraph_chars_ratio
            ):
                return "gopher_repeated_paragraph_chars"
        if self.max_repeated_lines_ratio is not None or self.max_repeated_line_chars_ratio is not None:
            lines = [line for line in text.split("\n") if line.strip()]
            if lines:
                n_repeats, chars = _repeats(lines)
                if self.max_repeated_lines_ratio is not None and (
                    n_repeats / len(lines) > self.max_repeated_lines_ratio
                ):
                    return "gopher_repeated_lines"
                if self.max_repeated_line_chars_ratio is not None and (
                    chars / total > self.max_repeated_line_chars_ratio
                ):
                    return "gopher_repeated_line_chars"
        if self.top_ngrams or self.duplicate_ngrams:
            return self._ngram_rules(text.split(), total)
        return None

    def _ngram_rules(self, words: list[str], total: int) -> str | None:
        top, dup = dict(self.top_ngrams), dict(self.duplicate_ngrams)
        largest = max((*top, *dup))
        m = len(words)
        if m < 2:
            return None
        encoded = " ".join(words).encode("utf-8", "surrogatepass").split(b" ")
        hashes = word_hashes(encoded)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=m)
        ends = np.concatenate(([0], np.cumsum(lengths)))  # ends[i] = characters in words[:i]
        places = np.arange(m, dtype=np.int64)  # where the (n-1)-gram repeats: every place for n = 2
        keys_all = hashes  # the key of the n-gram starting at each place, for n = 1
        for n in range(2, largest + 1):
            count = m - n + 1  # n-grams start at 0 .. m-n
            if count < 2:
                break
            keys_all = keys_all[:count] * _BASE + hashes[n - 1:]
            places = places[places < count]
            if len(places) < 2:
                break  # nothing can repeat at n words, nor at any longer n
            keys = keys_all[places]
            _, first, group, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
            repeated = counts[group] >= 2
            if not repeated.any():
                break
            if n in top:
                most = counts.max()
                i = places[first[counts == most].min()]  # the most frequent n-gram (earliest if tied)
                chars = (ends[i + n] - ends[i] + n - 1) * most  # its words and the spaces between them
                if chars / total > top[n]:
                    return "gopher_top_ngram"
            if n in dup:
                later = places[first[group] < np.arange(len(places))]  # second and later occurrences
                cover = np.zeros(m + 1, dtype=np.int32)
                cover[later] += 1
                cover[later + n] -= 1
                covered = np.cumsum(cover[:m]) > 0
                if int(lengths[covered].sum()) / total > dup[n]:
                    return "gopher_duplicate_ngrams"
            places = places[repeated]
        return None


@dataclass(frozen=True)
class FineWebQuality:
    """FineWeb's own rules (datatrove's FineWebQualityFilter): remove a document when the
    fraction of its lines that end in ``. ' " ! ?`` is at most 0.12, when the fraction of its
    lines of at most 30 characters is 0.67 or more, or when the characters of the non-blank
    lines that repeat an earlier line are 10% or more of its characters (newlines not counted).
    Lines are ``text.split("\\n")``, blank ones included in the first two fractions."""

    min_punctuated_lines_ratio: float | None = 0.12  # removed at or below
    max_short_lines_ratio: float | None = 0.67  # removed at or above
    short_line_length: int = 30
    max_duplicate_line_chars_ratio: float | None = 0.1  # removed at or above
    line_ends: tuple[str, ...] = FINEWEB_LINE_ENDS

    def __call__(self, text: str) -> str | None:
        lines = text.split("\n")
        n_lines = len(lines)
        if self.min_punctuated_lines_ratio is not None:
            ends = self.line_ends
            punctuated = sum(1 for line in lines if line.endswith(ends))
            if punctuated / n_lines <= self.min_punctuated_lines_ratio:
                return "fineweb_line_punctuation"
        if self.max_short_lines_ratio is not None:
            limit = self.short_line_length
            short = sum(1 for line in lines if len(line) <= limit)
            if short / n_lines >= self.max_short_lines_ratio:
                return "fineweb_short_lines"
        if self.max_duplicate_line_chars_ratio is not None:
            chars = len(text) - (n_lines - 1)  # without the newlines
            if chars > 0:
                _, repeated = _repeats([line for line in lines if line.strip()])
                if repeated / chars >= self.max_duplicate_line_chars_ratio:
                    return "fineweb_duplicate_lines"
        return None
