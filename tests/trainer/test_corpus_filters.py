"""Gopher's quality and repetition rules and FineWeb's rules (trainer.prep.filters).

Every rule gets a document that passes and one that fails it, built so that the arithmetic can
be checked by hand (the comments give it); where the threshold is a boundary, one document sits
exactly on it and one just past it. The documents are made of distinct consonant-only "words"
(``word(i, size)``), so no word is an English stop word and nothing repeats unless a test says so.
"""

import pytest

from trainer.prep.filters import REASONS, FineWebQuality, GopherQuality, GopherRepetition

LETTERS = "bcdfghjklmnpqrstvwxz"  # 20 consonants


def word(i: int, size: int = 5) -> str:
    """The i-th word of `size` consonants: distinct i give distinct words."""
    out = []
    for _ in range(size):
        i, r = divmod(i, len(LETTERS))
        out.append(LETTERS[r])
    assert i == 0, "not enough words of this size"
    return "".join(reversed(out))


def words(n: int, size: int = 5, start: int = 0) -> list[str]:
    return [word(start + k, size) for k in range(n)]


def sentence(length: int, start: int) -> str:
    """A line of exactly `length` characters: distinct 5-letter words (numbers start, start+1, ...)
    with the last word cut or padded to fit, and a final "."."""
    ws, used = [], 0
    while used + 6 < length - 1:
        ws.append(word(start + len(ws)))
        used += 6
    last = length - 1 - used  # characters left for the last word (before the ".")
    ws.append(word(start + len(ws), 5)[:last] if last <= 5 else word(start + len(ws), last))
    line = " ".join(ws) + "."
    assert len(line) == length
    return line


STOP = ["the", "and"]
GQ, GR, FW = GopherQuality(), GopherRepetition(), FineWebQuality()


# ------------------------------------------------------------------------------ GopherQuality

def test_ordinary_prose_passes_all_three():
    text = (
        "The committee met on Tuesday to discuss the new library. Members agreed that the\n"
        "building should have more light, with larger windows facing the park. A local architect\n"
        "presented three designs and answered questions from residents about cost and timing.\n"
        "Most people preferred the second design, which keeps the old facade and adds a reading\n"
        "room on the roof. The final decision will be made next month after a public survey."
    )
    assert GQ(text) is None
    assert GR(text) is None
    assert FW(text) is None


def test_word_count_50_to_100000():
    # 2 stop words + 48 five-letter words = 50 words (mean (3+3+48*5)/50 = 4.92): kept.
    assert GQ(" ".join(STOP + words(48))) is None
    # 49 words: removed.
    assert GQ(" ".join(STOP + words(47))) == "gopher_word_count"
    # Tokens that are only punctuation are not words: still 49 (51 tokens).
    assert GQ(" ".join(STOP + words(47) + ["—", "-"])) == "gopher_word_count"
    # 2 + 99,998 = 100,000 words: kept; one more: removed.
    assert GQ(" ".join(STOP + ["bcdfg"] * 99_998)) is None
    assert GQ(" ".join(STOP + ["bcdfg"] * 99_999)) == "gopher_word_count"


def test_mean_word_length_3_to_10():
    # (3 + 3 + 48*3) / 50 = 150/50 = 3.0: kept (the rule is "under 3").
    assert GQ(" ".join(STOP + words(48, size=3))) is None
    # (3 + 3 + 47*3 + 2) / 50 = 149/50 = 2.98: removed.
    assert GQ(" ".join(STOP + words(47, size=3) + [word(0, 2)])) == "gopher_mean_word_length"
    # (3 + 3 + 34*10 + 14*11) / 50 = 500/50 = 10.0: kept (the rule is "over 10").
    at_ten = STOP + words(34, size=10) + words(14, size=11)
    assert GQ(" ".join(at_ten)) is None
    # (3 + 3 + 33*10 + 15*11) / 50 = 501/50 = 10.02: removed.
    assert GQ(" ".join(STOP + words(33, size=10) + words(15, size=11))) == "gopher_mean_word_length"
    # Punctuation at the ends of a word is not counted: with a "." after every word the mean is
    # still 10.0 (it would be 11.0 with the dots).
    assert GQ(" ".join(w + "." for w in at_ten)) is None


def test_hash_and_ellipsis_at_most_one_per_ten_words():
    base = STOP + words(48)  # 50 words
    def with_prefix(k, mark):
        return " ".join(base[:2] + [mark + w for w in base[2:2 + k]] + base[2 + k:])

    def with_suffix(marks):
        return " ".join(base[:2] + [w + m for w, m in zip(base[2:], marks)] + base[2 + len(marks):])

    # 5 "#" / 50 words = 0.1: kept (the rule is "over 0.1"); 6/50 = 0.12: removed.
    assert GQ(with_prefix(5, "#")) is None
    assert GQ(with_prefix(6, "#")) == "gopher_symbol_ratio"
    # The same for ellipses, "..." and "…" alike (none at the end of the line).
    assert GQ(with_suffix(["..."] * 5)) is None
    assert GQ(with_suffix(["...", "…"] * 3)) == "gopher_symbol_ratio"


def _ten_lines(prefixes=("",) * 10, suffixes=("",) * 10) -> str:
    """10 lines of 5 words (50 words, the first line with 'the and'), with a prefix and suffix each."""
    ws = STOP + words(48)
    return "\n".join(p + " ".join(ws[5 * i:5 * i + 5]) + s for i, (p, s) in enumerate(zip(prefixes, suffixes)))


def test_at_most_90_percent_bullet_lines():
    bullets = ["• ", "- ", "* ", "•", "-"]
    # 9 of 10 lines start with a bullet: 0.9, kept (the rule is "over 0.9"). The bullets are not
    # words (still 50 words); 6 stand alone, so 50 of the 56 tokens have a letter (0.89 >= 0.8).
    nine = [bullets[i % 5] for i in range(9)] + [""]
    assert GQ(_ten_lines(prefixes=nine)) is None
    # 10 of 10: removed. Leading spaces before the bullet do not matter.
    ten = ["  " + bullets[i % 5] for i in range(10)]
    assert GQ(_ten_lines(prefixes=ten)) == "gopher_bullet_lines"


def test_at_most_30_percent_lines_ending_with_an_ellipsis():
    # 3 of 10 lines end with an ellipsis: 0.3, kept (the rule is "over 0.3"); 3 ellipses per
    # 50 words is under the symbol rule's 0.1.
    three = ["...", "…", "...  "] + [""] * 7  # trailing spaces do not hide it
    assert GQ(_ten_lines(suffixes=three)) is None
    # 4 of 10: 0.4, removed (4/50 = 0.08 ellipses per word: the symbol rule still passes).
    four = ["...", "…", "...  ", "…"] + [""] * 6
    assert GQ(_ten_lines(suffixes=four)) == "gopher_ellipsis_lines"


def test_at_least_80_percent_of_words_contain_a_letter():
    # 2 + 38 words with letters, 10 numbers: 40/50 = 0.8, kept (the rule is "under 0.8");
    # mean length (6 + 38*5 + 10*5)/50 = 4.92.
    assert GQ(" ".join(STOP + words(38) + ["12345"] * 10)) is None
    # 2 + 37 with letters, 11 numbers: 39/50 = 0.78, removed.
    assert GQ(" ".join(STOP + words(37) + ["12345"] * 11)) == "gopher_alphabetic_words"
    # A letter anywhere counts: "4x4" and "don't" have one, so 2 + 36 + 2 = 40 of 50 again, kept.
    assert GQ(" ".join(STOP + words(36) + ["4x4", "don't"] + ["12345"] * 10)) is None


def test_at_least_two_stop_words():
    # "the" and "and": 2, kept.
    assert GQ(" ".join(STOP + words(48))) is None
    # Only "the": 1, removed.
    assert GQ(" ".join(["the"] + words(49))) == "gopher_stop_words"
    # "theme" is not "the".
    assert GQ(" ".join(["theme", "and"] + words(48))) == "gopher_stop_words"
    # Case and punctuation around the word do not matter, and occurrences are counted
    # (as datatrove does): "The," + "WITH." = 2, "the" + "the" = 2.
    assert GQ(" ".join(["The,", "WITH."] + words(48))) is None
    assert GQ(" ".join(["the"] + words(48) + ["the"])) is None


def test_a_rule_set_to_none_is_off():
    assert GopherQuality(min_stop_words=None)(" ".join(["the"] + words(49))) is None
    assert GopherQuality(min_words=None)(" ".join(STOP + words(8))) is None
    assert GopherQuality(min_words=None)("") == "gopher_word_count"  # no words at all: no mean length


# ------------------------------------------------------------------------------ GopherRepetition

def _distinct_paragraph(start: int) -> str:
    return " ".join(words(8, start=start)) + "."  # 8*5 + 7 + 1 = 48 characters


def test_at_most_30_percent_repeated_paragraphs():
    u = [_distinct_paragraph(8 * i) for i in range(6)]
    # U1 M U2 M U3 M U4 M U5 U6: 10 paragraphs, "Menu." 4 times = 3 repeats: 3/10 = 0.3, kept
    # (the rule is "over 0.3"). Characters: 3*5 = 15 of 6*48 + 4*5 + 9*2 = 326 (0.05); the same
    # holds for lines; each "Menu." has other neighbours, so no 2-gram repeats.
    kept = [u[0], "Menu.", u[1], "Menu.", u[2], "Menu.", u[3], "Menu.", u[4], u[5]]
    assert GR("\n\n".join(kept)) is None
    # One "Menu." more: 11 paragraphs, 4 repeats: 4/11 = 0.36, removed.
    removed = kept[:9] + ["Menu.", u[5]]
    assert GR("\n\n".join(removed)) == "gopher_repeated_paragraphs"
    # Blank lines made of spaces separate paragraphs too.
    assert GR("\n  \n".join(removed)) == "gopher_repeated_paragraphs"


def test_at_most_20_percent_of_characters_in_repeated_paragraphs():
    r = word(0, 20)
    # R(20) U1(27) R(20) U2(27), joined by "\n\n": 20+27+20+27 + 3*2 = 100 characters. 1 repeat of
    # 4 paragraphs (0.25) holding 20/100 = 0.2 of the characters: kept (the rule is "over 0.2").
    # Lines: the same 0.25 and 0.2; four one-word paragraphs: no 2-gram repeats.
    text = "\n\n".join([r, word(1, 27), r, word(2, 27)])
    assert len(text) == 100 and GR(text) is None
    # U2 of 26: 99 characters, 20/99 = 0.202, removed.
    text = "\n\n".join([r, word(1, 27), r, word(2, 26)])
    assert len(text) == 99 and GR(text) == "gopher_repeated_paragraph_chars"


def test_at_most_30_percent_repeated_lines():
    u = [_distinct_paragraph(8 * i) for i in range(6)]
    # As for paragraphs, but one paragraph of lines: 3 of 10 lines repeat "Menu.": 0.3, kept.
    kept = [u[0], "Menu.", u[1], "Menu.", u[2], "Menu.", u[3], "Menu.", u[4], u[5]]
    assert GR("\n".join(kept)) is None
    # 4 of 11: 0.36, removed.
    assert GR("\n".join(kept[:9] + ["Menu.", u[5]])) == "gopher_repeated_lines"


def test_at_most_20_percent_of_characters_in_repeated_lines():
    r = word(0, 20)
    # R(20) U1(28) R(20) U2(29), joined by "\n": 20+28+20+29 + 3 = 100 characters; 1 of 4 lines
    # repeats (0.25), holding 20/100 = 0.2 of the characters: kept.
    text = "\n".join([r, word(1, 28), r, word(2, 29)])
    assert len(text) == 100 and GR(text) is None
    # U2 of 28: 20/99 = 0.202, removed.
    text = "\n".join([r, word(1, 28), r, word(2, 28)])
    assert len(text) == 99 and GR(text) == "gopher_repeated_line_chars"


def _twice(phrase: str, total: int) -> str:
    """'P F1 P F2' with two distinct one-word fillers that make the text `total` characters long."""
    room = total - 2 * len(phrase) - 3  # characters for F1 + F2
    text = " ".join([phrase, word(1, room // 2), phrase, word(2, room - room // 2)])
    assert len(text) == total
    return text


@pytest.mark.parametrize(
    "phrase, threshold",
    [
        # The phrase is the most frequent n-gram (2 occurrences, the earliest of those): 2 * its
        # length = 20, 18, 16 characters (spaces inside it included).
        ("abcd efghi", 0.20),  # 10 characters
        ("ab cd efg", 0.18),  # 9; its 2-gram "ab cd": 2*5/100 = 0.10 <= 0.20
        ("ab c d e", 0.16),  # 8; "ab c": 0.08 <= 0.20, "ab c d": 0.12 <= 0.18
    ],
)
def test_top_2_3_4_gram_character_fractions(phrase, threshold):
    n = len(phrase.split())
    # 2*len/100 is the threshold itself: kept (the rule is "over"); 2*len/99 is over it: removed.
    assert 2 * len(phrase) / 100 == threshold
    assert GR(_twice(phrase, 100)) is None
    assert GR(_twice(phrase, 99)) == "gopher_top_ngram"
    # It is the n-gram rule that fires: with only the n-gram's own rule on, it still does.
    only_n = GopherRepetition(top_ngrams=((n, threshold),), duplicate_ngrams=())
    assert only_n(_twice(phrase, 99)) == "gopher_top_ngram"


def test_an_ngram_that_occurs_once_is_not_repetition():
    # Every 2-gram here occurs once; "aa bb" is 5 of 14 characters (datatrove would remove it).
    assert GR("aa bb cc dd ee") is None


@pytest.mark.parametrize("n, threshold", [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)])
def test_duplicate_5_to_10_gram_character_fractions(n, threshold):
    letters = round(threshold * 100)  # 15, 14, ..., 10 letters in the phrase
    # n-1 one-letter words and one word for the rest: "a b c d kkkkkkkkkkk" for n = 5 (4 + 11 = 15).
    phrase = " ".join(list("abcdefghi"[:n - 1]) + ["k" * (letters - (n - 1))])
    # In 'P F1 P F2' the second P's n words are covered by repeated n-grams: `letters` characters
    # (spaces not counted) of 100 = the threshold, kept; of 99, removed. Shorter m-grams cover the
    # same words, under their larger thresholds; no (n+1)-gram repeats; the top 2/3/4-grams
    # "a b", "a b c", "a b c d" hold 6, 10, 14 of 100 characters (<= 0.20, 0.18, 0.16).
    assert GR(_twice(phrase, 100)) is None
    assert GR(_twice(phrase, 99)) == "gopher_duplicate_ngrams"
    # Exactly the n-gram rule: alone it fires; all the other duplicate rules alone do not.
    alone = GopherRepetition(duplicate_ngrams=((n, threshold),))
    assert alone(_twice(phrase, 99)) == "gopher_duplicate_ngrams"
    others = tuple(rule for rule in GR.duplicate_ngrams if rule[0] != n)
    assert GopherRepetition(duplicate_ngrams=others)(_twice(phrase, 99)) is None


def test_overlapping_duplicate_ngrams_count_each_word_once():
    # "x1 ... x6" (six 3-letter words, 23 characters) twice, with distinct fillers of 40 and 31:
    # 23+40+23+31 + 3 = 120 characters. The second copy's 6 words are covered by its two repeated
    # 5-grams, which overlap in 4 words: 6*3 = 18 letters, 18/120 = 0.15, kept. Counting each
    # 5-gram's 15 letters (30/120 = 0.25) or the first copy too (36/120 = 0.3) would remove it.
    phrase = " ".join(words(6, size=3))
    text = " ".join([phrase, word(1, 40), phrase, word(2, 31)])
    assert len(text) == 120
    only5 = GopherRepetition(top_ngrams=(), duplicate_ngrams=((5, 0.15),))  # its 4-grams: 0.25
    assert only5(text) is None
    # A filler one shorter: 18/119 = 0.151, removed.
    assert only5(" ".join([phrase, word(1, 40), phrase, word(2, 30)])) == "gopher_duplicate_ngrams"


def test_empty_and_one_word_documents_are_not_repetitive():
    assert GR("") is None
    assert GR("word") is None


# ------------------------------------------------------------------------------ FineWebQuality

def test_more_than_12_percent_of_lines_end_in_punctuation():
    lines = [sentence(40, 10 * i)[:-1] + "," for i in range(25)]  # 25 distinct lines of 40, ending ","
    # 4 of 25 lines end in . ? " ! : 4/25 = 0.16, kept.
    kept = list(lines)
    for i, end in enumerate([".", "?", '"', "!"]):
        kept[i] = kept[i][:-1] + end
    assert FW("\n".join(kept)) is None
    # 3 of 25 ("'" counts too): 3/25 = 0.12, removed (the rule is "at most 0.12").
    removed = list(lines)
    for i, end in enumerate([".", "'", "!"]):
        removed[i] = removed[i][:-1] + end
    assert FW("\n".join(removed)) == "fineweb_line_punctuation"


def test_short_lines_are_30_characters_or_fewer():
    # 3 distinct lines of 31 characters: none short, kept; of 30: 3/3 short, removed.
    assert FW("\n".join(sentence(31, 10 * i) for i in range(3))) is None
    assert FW("\n".join(sentence(30, 10 * i) for i in range(3))) == "fineweb_short_lines"


def test_fewer_than_67_percent_short_lines():
    # 66 lines of 20 characters and 34 of 40: 66/100 = 0.66, kept.
    kept = [sentence(20, 10 * i) for i in range(66)] + [sentence(40, 10 * i) for i in range(66, 100)]
    assert FW("\n".join(kept)) is None
    # 67 of 100: 0.67, removed (the rule is "0.67 or more").
    removed = [sentence(20, 10 * i) for i in range(67)] + [sentence(40, 10 * i) for i in range(67, 100)]
    assert FW("\n".join(removed)) == "fineweb_short_lines"


def test_under_10_percent_of_characters_in_duplicated_lines():
    r = sentence(10, 0)
    # R(10) L1(40) R(10) L2(41): 101 characters without the newlines, 10 in the repeated line:
    # 10/101 = 0.099, kept; 2 of 4 lines are short (0.5) and all end in ".".
    assert FW("\n".join([r, sentence(40, 10), r, sentence(41, 20)])) is None
    # L2 of 40: 10/100 = 0.1, removed (the rule is "0.1 or more").
    assert FW("\n".join([r, sentence(40, 10), r, sentence(40, 20)])) == "fineweb_duplicate_lines"
    # Blank lines are not duplicates: two lines of 3 spaces added, 101 + 6 = 107 characters and
    # still 10 repeated (0.093), kept; counted, 13/107 = 0.12 would remove it. (Short lines:
    # R, R and the two blank ones, 4/6 = 0.667 < 0.67; punctuation: 4/6.)
    assert FW("\n".join([r, sentence(40, 10), "   ", r, "   ", sentence(41, 20)])) is None


def test_fineweb_empty_document_has_no_punctuated_line():
    assert FW("") == "fineweb_line_punctuation"


# ------------------------------------------------------------------------------ reasons

def test_every_reason_has_a_sentence():
    keys = {
        "gopher_word_count", "gopher_mean_word_length", "gopher_symbol_ratio", "gopher_bullet_lines",
        "gopher_ellipsis_lines", "gopher_alphabetic_words", "gopher_stop_words",
        "gopher_repeated_paragraphs", "gopher_repeated_paragraph_chars", "gopher_repeated_lines",
        "gopher_repeated_line_chars", "gopher_top_ngram", "gopher_duplicate_ngrams",
        "fineweb_line_punctuation", "fineweb_short_lines", "fineweb_duplicate_lines",
    }
    assert set(REASONS) == keys
    for sentence_ in REASONS.values():
        assert sentence_[0].isupper() and sentence_.endswith(".") and "\n" not in sentence_
