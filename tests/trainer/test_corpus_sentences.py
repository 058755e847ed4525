"""The rule-based sentence splitter and word counter used by corpus preparation."""

import pytest

from trainer.prep.sentences import MAX_SENTENCE_WORDS, count_words, split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One sentence. Another one! A question? Yes.", ["One sentence.", "Another one!", "A question?", "Yes."]),
        ("No final punctuation here", ["No final punctuation here"]),
        ("", []),
        ("   \n\t ", []),
        # line breaks and runs of whitespace are spaces
        ("First line\ncontinues here. Second\n\nsentence.", ["First line continues here.", "Second sentence."]),
    ],
)
def test_it_splits_on_terminal_punctuation(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Dr. Smith met Mr. Jones. They talked.", ["Dr. Smith met Mr. Jones.", "They talked."]),
        ("Use a list, e.g. Python lists. Or not.", ["Use a list, e.g. Python lists.", "Or not."]),
        ("That is, i.e. The thing. Done.", ["That is, i.e. The thing.", "Done."]),
        ("Apples, pears, etc. and more. Etc. The end.", ["Apples, pears, etc. and more.", "Etc.", "The end."]),
        ("I like fruit etc. The rest is fine.", ["I like fruit etc.", "The rest is fine."]),
        ("See No. 5 and Fig. 3 on p. 12. The end.", ["See No. 5 and Fig. 3 on p. 12.", "The end."]),
        ("I said no. Then I left.", ["I said no.", "Then I left."]),
        ("J. R. R. Tolkien wrote books. He died.", ["J. R. R. Tolkien wrote books.", "He died."]),
        ("Prof. Brown vs. Dr. White. A match.", ["Prof. Brown vs. Dr. White.", "A match."]),
    ],
)
def test_it_does_not_split_after_abbreviations(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Pi is 3.14 roughly. It is 2.5 times more.", ["Pi is 3.14 roughly.", "It is 2.5 times more."]),
        ("Version 3.11.4 is out. Get it.", ["Version 3.11.4 is out.", "Get it."]),
        ("Visit example.com today. Thanks.", ["Visit example.com today.", "Thanks."]),
        ("It costs $1,000.50 now. Cheap.", ["It costs $1,000.50 now.", "Cheap."]),
    ],
)
def test_it_does_not_split_numbers_or_dotted_names(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ('"Why?" she asked. He shrugged.', ['"Why?" she asked.', "He shrugged."]),
        ("(See above.) Then continue.", ["(See above.)", "Then continue."]),
        ("It works!) Next one.", ["It works!)", "Next one."]),
        ("Really?! Yes... Maybe.", ["Really?!", "Yes...", "Maybe."]),
        ("Wait... what happened?", ["Wait... what happened?"]),
        ("He said ‘done.’ She agreed.", ["He said ‘done.’", "She agreed."]),
    ],
)
def test_it_keeps_closing_quotes_and_brackets_with_the_sentence(text, expected):
    assert split_sentences(text) == expected


def test_it_treats_list_numbers_as_part_of_the_item():
    assert split_sentences("Steps: 1. Open the box. 2. Close it.") == ["Steps: 1. Open the box.", "2. Close it."]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("今天天气很好。我们去公园吧！你去吗？好的。", ["今天天气很好。", "我们去公园吧！", "你去吗？", "好的。"]),
        ("她说：“你好。”然后走了。", ["她说：“你好。”", "然后走了。"]),
        ("日本語の文です。もう一つ。", ["日本語の文です。", "もう一つ。"]),
        ("Mixed English. 中文句子。 More English.", ["Mixed English.", "中文句子。", "More English."]),
    ],
)
def test_it_splits_cjk_text_without_spaces(text, expected):
    assert split_sentences(text) == expected


def test_lowercase_text_is_still_split():
    # all-lowercase corpora give no capitalisation signal: every ". " ends a sentence
    assert split_sentences("this is one. this is two. and three") == ["this is one.", "this is two.", "and three"]


def test_overlong_sentences_are_cut():
    text = " ".join(f"w{i}" for i in range(MAX_SENTENCE_WORDS * 2 + 5))
    pieces = split_sentences(text)
    assert [len(p.split()) for p in pieces] == [MAX_SENTENCE_WORDS, MAX_SENTENCE_WORDS, 5]
    assert " ".join(pieces) == text


@pytest.mark.parametrize(
    "text, n",
    [
        ("Hello, world.", 2),
        ("  spaced   out\twords ", 3),
        ("你好，世界。", 4),
        ("hello 你好 world", 4),
        ("Café au lait.", 3),
        ("", 0),
    ],
)
def test_count_words(text, n):
    assert count_words(text) == n
