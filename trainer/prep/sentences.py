"""A rule-based sentence splitter and word counter.

Good enough for NSP/SOP pairs and for corpus statistics, with no model and no data files:

- ends a sentence at ``.``, ``!``, ``?``, ``…`` (and runs of them, ``?!``, ``...``), followed
  by optional closing quotes or brackets, then whitespace;
- ends a sentence at the CJK enders ``。！？`` even without whitespace after them;
- does not end one inside numbers (``3.14``), dotted names (``example.com``), after titles
  and Latin abbreviations (``Dr.``, ``e.g.``, ``i.e.``), after ``No.``/``Fig.``/``p.`` when
  a number follows, after single-letter initials (``J. R. R. Tolkien``), after list
  numbers (``1. First``), or when the next word starts with a lowercase letter in text
  that uses capitals at all (``"Why?" he asked``; ``etc. and so on``).

Overlong "sentences" (a list or a table flattened into one line) are cut into pieces of
at most :data:`MAX_SENTENCE_WORDS` words / :data:`MAX_SENTENCE_CHARS` characters, so that
one bad line cannot fill a whole training sequence.
"""

from __future__ import annotations

import re

MAX_SENTENCE_WORDS = 200
MAX_SENTENCE_CHARS = 1500

# Never the end of a sentence: titles before a name and Latin abbreviations mid-sentence.
NEVER_END = frozenset(
    """mr mrs ms messrs mme mlle dr prof sr jr st mt rev fr gen col capt cmdr lt sgt hon gov
    pres sen rep supt vs v e.g i.e eg ie cf viz approx ca resp incl""".split()
)
# Not an end when a number follows: "No. 5", "Fig. 3", "p. 12", "Vol. 2".
BEFORE_NUMBER = frozenset("no nos vol vols pp p fig figs ch chap sec art eq eqs op ex nr".split())
# May end a sentence: an end only when the next word is capitalised ("... etc. The").
MAY_END = frozenset(
    """etc al inc ltd co corp bros llc plc dept univ assn jan feb mar apr jun jul aug sep
    sept oct nov dec a.m p.m u.s u.k u.n""".split()
)

_CJK_ENDERS = "。！？｡"
_CLOSERS = "\"'”’»)]}」』）】〕〉》›"
_OPENERS = "\"'“‘«([{「『（【〔〈《‹¿¡"

_TERMINATOR = re.compile(
    rf"(?P<punct>[.!?…؟।]+|[{_CJK_ENDERS}]+)(?P<close>[{re.escape(_CLOSERS)}]*)(?P<space>\s*)"
)
_NEXT_CHAR = re.compile(rf"[{re.escape(_OPENERS)}]*(.)", re.S)
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # u.s, e.g, a.m (the final dot is the match)
_LIST_NUMBER = re.compile(r"\d{1,3}|[ivxIVX]{1,4}|[a-zA-Z]")

# BERT's definition of a CJK ideograph (each counts as one word, as the tokenizer splits them).
_CJK_RANGES = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0002a6df\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f"
)
# CJK punctuation (、。「」 and the fullwidth ！？，：；（）...) is not a word of its own.
_CJK_PUNCT = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
_WORD = re.compile(rf"[{_CJK_RANGES}]|[^\s{_CJK_RANGES}{_CJK_PUNCT}]+")


def count_words(text: str) -> int:
    """Whitespace-separated words, where every CJK ideograph counts as a word of its own
    (as BERT's tokenizer splits them apart) and CJK punctuation does not count."""
    if text.isascii():
        return len(text.split())
    return len(_WORD.findall(text))


def split_sentences(text: str) -> list[str]:
    """Split ``text`` (any whitespace, including newlines, counts as a space) into sentences."""
    text = " ".join(text.split())
    if not text:
        return []
    cased = text != text.lower()  # all-lowercase text gives no capitalisation signal
    sentences: list[str] = []
    start = 0
    for m in _TERMINATOR.finditer(text):
        end = m.end()
        if end >= len(text):
            break
        if _is_boundary(text, m, cased):
            sentences.extend(_cap_length(text[start:end].strip()))
            start = end
    rest = text[start:].strip()
    if rest:
        sentences.extend(_cap_length(rest))
    return sentences


def _is_boundary(text: str, m: re.Match, cased: bool) -> bool:
    punct = m["punct"]
    if punct[0] in _CJK_ENDERS:
        return True
    if not m["space"]:
        return False  # "3.14", "example.com", "e.g.,", "Hi!!x"
    nxt_match = _NEXT_CHAR.match(text, m.end())
    nxt = nxt_match.group(1) if nxt_match else ""
    next_lower = cased and nxt.islower()
    if punct == ".":
        prev_start = text.rfind(" ", 0, m.start()) + 1  # text has single spaces only
        prev = text[prev_start : m.start()].lstrip(_OPENERS)
        low = prev.lower()
        if low in NEVER_END:
            return False
        if low in BEFORE_NUMBER and nxt.isdigit():
            return False
        if len(prev) == 1 and prev.isupper():
            return False  # an initial: "J. Smith"
        if low in MAY_END or _DOTTED.fullmatch(low):
            return cased and nxt.isupper()
        if _LIST_NUMBER.fullmatch(prev) and _starts_item(text, prev_start):
            return False  # "1. First item", "Steps: a. Open"
    if next_lower:
        return False  # '"Why?" he asked.', "etc. and so on", "Yahoo! is"
    return True


def _starts_item(text: str, token_start: int) -> bool:
    """Whether the token at ``token_start`` opens the text or follows a sentence or a colon."""
    before = text[:token_start].rstrip()
    if not before:
        return True
    if before[-1] not in ".:;!?" + _CJK_ENDERS:
        return False
    last = before.rsplit(" ", 1)[-1].rstrip(".").lower()
    return last not in BEFORE_NUMBER  # "see p. 12. The" is a page number, not an item


def _cap_length(sentence: str) -> list[str]:
    if len(sentence) <= MAX_SENTENCE_CHARS and sentence.count(" ") < MAX_SENTENCE_WORDS:
        return [sentence]
    pieces = []
    words = sentence.split(" ")
    for i in range(0, len(words), MAX_SENTENCE_WORDS):
        piece = " ".join(words[i : i + MAX_SENTENCE_WORDS])
        for j in range(0, len(piece), MAX_SENTENCE_CHARS):
            chunk = piece[j : j + MAX_SENTENCE_CHARS].strip()
            if chunk:
                pieces.append(chunk)
    return pieces
