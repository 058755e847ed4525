"""The cleaning rules that look at one document at a time: C4's, Gopher's and FineWeb's.

``DocumentCleaner(options).clean(lines)`` gives a document's sentences, or None when a rule removed
it, and counts what each rule removed (with a few examples). The rules that compare documents
(exact and near duplicates, C4's repeated spans) are decided over the whole corpus afterwards, by
:mod:`trainer.prep.pipeline`; their switches are here too (CleaningOptions), as the upload form's
checkboxes come from RULES.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

from trainer.prep.sentences import count_words, split_sentences

PREVIEW_DOCUMENTS = 5
PREVIEW_SENTENCES = 8
PREVIEW_CHARS = 300

# --- the C4 rules --------------------------------------------------------------------------
C4_MIN_WORDS_PER_LINE = 5
C4_MIN_SENTENCES_PER_PAGE = 3
C4_SPAN_SENTENCES = 3
# A line "ends in terminal punctuation" (C4: . ? ! "), plus closing curly quotes and the CJK
# enders so that non-English text is not wiped out; a line ending in an ellipsis does not count.
TERMINAL_MARKS = (".", "?", "!", '"', "”", "’", "'", "。", "！", "？")
ELLIPSES = ("...", "…")

# A deliberately short, mild stand-in for C4's "List of Dirty, Naughty, Obscene or Otherwise
# Bad Words": terms that mark adult or spam pages. Matched as whole words, ignoring case.
BAD_WORDS: tuple[str, ...] = (
    "porn",
    "porno",
    "pornographic",
    "pornography",
    "xxx",
    "nsfw",
    "hentai",
    "camgirl",
    "camgirls",
    "webcam sex",
    "escort service",
    "viagra",
    "cialis",
)
_BAD_WORDS_RE = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in BAD_WORDS) + r")\b")

RULES: list[tuple[str, str, str]] = [
    (
        "terminal_punct",
        "Keep only lines that end in terminal punctuation",
        "Drops every line that does not end in . ! ? or a closing quote (or 。！？), and lines "
        "ending in an ellipsis. Removes menus, headings and boilerplate; also removes the "
        "continuation lines of hard-wrapped text.",
    ),
    (
        "min_words",
        f"Drop lines with fewer than {C4_MIN_WORDS_PER_LINE} words",
        "Short lines are mostly navigation, captions and buttons.",
    ),
    (
        "min_sentences",
        f"Drop documents with fewer than {C4_MIN_SENTENCES_PER_PAGE} sentences",
        "Applied after the line rules (and again after span de-duplication).",
    ),
    (
        "no_javascript",
        'Drop lines that mention "javascript"',
        'Removes "please enable JavaScript" warnings scraped from web pages.',
    ),
    (
        "no_lorem_or_braces",
        'Drop documents containing "lorem ipsum" or a curly brace',
        "Removes placeholder text and pages that contain program code.",
    ),
    (
        "dedup_spans",
        f"Remove repeated {C4_SPAN_SENTENCES}-sentence spans",
        "Keeps the first occurrence of any three consecutive sentences and removes the "
        "sentences of every later copy, across the whole corpus. Identical documents are "
        "always removed.",
    ),
    (
        "bad_words",
        "Drop documents containing words from a bad-word list",
        "Uses a short built-in list of adult and spam terms, matched as whole words.",
    ),
    (
        "minhash",
        "Remove near-duplicate documents (MinHash)",
        "As FineWeb does: word 5-grams, 14 bands of 8 hashes. A document sharing a band with an "
        "earlier one (about 75% or more of its 5-grams in common) is removed; the first is kept.",
    ),
    (
        "gopher_quality",
        "Gopher quality rules",
        "From DeepMind's MassiveText (Gopher): drops documents of under 50 or over 100,000 words, "
        "with a mean word length outside 3-10 characters, too many symbols, bullet or ellipsis "
        "lines, too few words with a letter, or fewer than two common English words.",
    ),
    (
        "gopher_repetition",
        "Gopher repetition rules",
        "Drops documents made of repeated lines, paragraphs or n-grams (Gopher's thresholds): "
        "boilerplate, spam and generated pages.",
    ),
    (
        "fineweb_quality",
        "FineWeb quality rules",
        "FineWeb's own: drops documents where few lines end in punctuation, many characters are in "
        "repeated lines, or most lines are very short (lists, menus).",
    ),
]

# Keys of IngestResult.removed: what was removed and whether it counts lines, pages or sentences.
REMOVED_KEYS = {
    "terminal_punct": "lines_without_terminal_punctuation",
    "min_words": f"lines_under_{C4_MIN_WORDS_PER_LINE}_words",
    "no_javascript": "lines_with_javascript",
    "no_lorem_or_braces": "pages_with_lorem_ipsum_or_braces",
    "bad_words": "pages_with_bad_words",
    "min_sentences": f"pages_under_{C4_MIN_SENTENCES_PER_PAGE}_sentences",
    "dedup_spans": "sentences_in_duplicate_spans",
    "minhash": "near_duplicate_pages",
    "gopher_quality": "pages_failing_gopher_quality",
    "gopher_repetition": "pages_failing_gopher_repetition",
    "fineweb_quality": "pages_failing_fineweb_quality",
}
MIN_SENTENCES_KEY = REMOVED_KEYS["min_sentences"]
ALWAYS_REMOVED_KEYS = ("duplicate_pages", "pages_left_empty")


@dataclass
class CleaningOptions:
    """The C4 cleaning rules, each switched on or off (all off: keep the text as it is)."""

    terminal_punct: bool = False
    min_words: bool = False
    min_sentences: bool = False
    no_javascript: bool = False
    no_lorem_or_braces: bool = False
    dedup_spans: bool = False
    bad_words: bool = False
    minhash: bool = False
    gopher_quality: bool = False
    gopher_repetition: bool = False
    fineweb_quality: bool = False

    @classmethod
    def from_dict(cls, data: dict | None) -> CleaningOptions:
        """Build from JSON or form data; accepts booleans and "on"/"true"/"1"/"yes"; ignores unknown keys."""
        data = data or {}
        values = {}
        for f in fields(cls):
            if f.name in data:
                value = data[f.name]
                if isinstance(value, str):
                    value = value.strip().lower() in ("1", "true", "on", "yes")
                values[f.name] = bool(value)
        return cls(**values)

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)

    @classmethod
    def all_on(cls) -> CleaningOptions:
        return cls(**{f.name: True for f in fields(cls)})


class DocumentCleaner:
    """Applies the chosen rules that look at one document at a time and counts what each removed.

    Order: line rules (terminal punctuation, minimum words, "javascript"), then page rules on
    the lines kept ("lorem ipsum"/braces, bad words, Gopher's quality and repetition rules,
    FineWeb's), sentence splitting and the minimum number of sentences. Each line or page is
    counted once, under the first rule that removed it; ``reasons`` counts which of a filter's
    rules removed a page, ``examples`` keeps the first few removed texts of every rule. The rules
    that compare documents (exact and near duplicates, repeated spans) run afterwards over the
    whole corpus (:mod:`trainer.prep.pipeline`).
    """

    def __init__(self, options: CleaningOptions):
        self.o = options
        self.removed = {key: 0 for rule, key in REMOVED_KEYS.items()
                        if getattr(options, rule) and rule not in _CORPUS_RULES}
        self.removed.update({key: 0 for key in ALWAYS_REMOVED_KEYS})
        self.reasons: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}
        self.filters = []
        for rule, name in (("gopher_quality", "GopherQuality"), ("gopher_repetition", "GopherRepetition"),
                           ("fineweb_quality", "FineWebQuality")):
            if getattr(options, rule):
                from trainer.prep import filters

                self.filters.append((REMOVED_KEYS[rule], getattr(filters, name)()))

    def _remove(self, key: str, text: str) -> None:
        self.removed[key] += 1
        kept = self.examples.setdefault(key, [])
        if len(kept) < _EXAMPLES:
            kept.append(_example(text))

    def clean(self, lines: list[str]) -> list[str] | None:
        o = self.o
        kept = []
        for line in lines:
            line = " ".join(line.split())
            if not line:
                continue
            if o.terminal_punct and (not line.endswith(TERMINAL_MARKS) or line.endswith(ELLIPSES)):
                self._remove("lines_without_terminal_punctuation", line)
            elif o.min_words and count_words(line) < C4_MIN_WORDS_PER_LINE:
                self._remove(REMOVED_KEYS["min_words"], line)
            elif o.no_javascript and "javascript" in line.lower():
                self._remove("lines_with_javascript", line)
            else:
                kept.append(line)
        if not kept:
            self.removed["pages_left_empty"] += 1
            return None
        text = " ".join(kept)
        lowered = text.lower()
        if o.no_lorem_or_braces and ("lorem ipsum" in lowered or "{" in text or "}" in text):
            self._remove("pages_with_lorem_ipsum_or_braces", text)
            return None
        if o.bad_words and _BAD_WORDS_RE.search(lowered):
            self._remove("pages_with_bad_words", text)
            return None
        if self.filters:
            page = "\n".join(kept)
            for key, rule in self.filters:
                reason = rule(page)
                if reason is not None:
                    self._remove(key, text)
                    self.reasons[reason] = self.reasons.get(reason, 0) + 1
                    return None
        sentences = split_sentences(text)
        if o.min_sentences and len(sentences) < C4_MIN_SENTENCES_PER_PAGE:
            self._remove(MIN_SENTENCES_KEY, text)
            return None
        return sentences


# The rules applied across documents by trainer.prep.pipeline, not by DocumentCleaner.
_CORPUS_RULES = ("dedup_spans", "minhash")
_EXAMPLES = 3


def _example(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1].rstrip() + "…"


def _preview(sentences: list[str]) -> list[str]:
    shown = [s if len(s) <= PREVIEW_CHARS else s[: PREVIEW_CHARS - 1].rstrip() + "…" for s in sentences]
    if len(shown) > PREVIEW_SENTENCES:
        shown = shown[:PREVIEW_SENTENCES] + [f"… ({len(sentences) - PREVIEW_SENTENCES} more sentences)"]
    return shown
