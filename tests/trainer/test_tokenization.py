"""Tokenizer training, loading and previews (WordPiece as in BERT; BPE and Unigram too)."""

import json
import random

import pytest

from trainer.errors import TokenizerError, UserError
from trainer.prep.tokenization import ALGORITHMS, ROLES, load_tokenizer, tokenize_preview, train_tokenizer

WORDS = (
    "play playing played player players replay display run running runner runs walk walking "
    "walked walker talk talking talked house houses housing the a an of to and in is was it "
    "for on with as by at from this that model models modelling token tokens tokenizer train "
    "training trained language languages happy unhappy happiness kind unkind kindness race "
    "café"
).split()
PUNCT = [",", "!", "?", ";", ":", "'s", "(", ")"]
CJK = "你好世界中文字符测试句子"


def write_corpus(folder, *, n_train=400, valid_lines=None, seed=0, cased=False):
    rng = random.Random(seed)

    def line():
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
        words = [w + rng.choice(PUNCT) if rng.random() < 0.2 else w for w in words]
        if cased:
            words = [w.capitalize() if rng.random() < 0.5 else w for w in words]
        cjk = "".join(rng.choice(CJK) for _ in range(rng.randint(0, 4)))
        return " ".join(words) + (" " + cjk if cjk else "") + "."

    folder.mkdir(parents=True, exist_ok=True)
    train = [line() for _ in range(n_train)]
    docs = ["\n".join(train[i : i + 5]) for i in range(0, len(train), 5)]
    (folder / "train.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    valid = valid_lines if valid_lines is not None else [line() for _ in range(20)]
    (folder / "valid.txt").write_text("\n".join(valid) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def wordpiece(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("wordpiece")
    stats = train_tokenizer(corpus_dir, out, vocab_size=200)
    return out, stats


def test_wordpiece_special_tokens_have_fixed_ids(wordpiece):
    folder, _ = wordpiece
    bundle = load_tokenizer(folder)
    assert [bundle.tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (bundle.pad_id, bundle.unk_id, bundle.cls_id, bundle.sep_id, bundle.mask_id) == (0, 1, 2, 3, 4)
    assert bundle.special_ids == {0, 1, 2, 3, 4}
    meta = json.loads((folder / "tokenizer_meta.json").read_text())
    assert meta["algorithm"] == "wordpiece" and meta["lowercase"] is True
    assert meta["special_tokens"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert meta["vocab_size"] == bundle.vocab_size


def test_wordpiece_writes_the_bert_post_processor_and_vocab_txt(wordpiece):
    folder, _ = wordpiece
    bundle = load_tokenizer(folder)
    enc = bundle.tok.encode("the model", "a token")
    assert enc.tokens[0] == "[CLS]" and enc.tokens.count("[SEP]") == 2 and enc.tokens[-1] == "[SEP]"
    first_sep = enc.tokens.index("[SEP]")
    assert enc.type_ids == [0] * (first_sep + 1) + [1] * (len(enc.ids) - first_sep - 1)
    assert bundle.tok.encode("the model").tokens == ["[CLS]", "the", "model", "[SEP]"]
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == bundle.vocab_size
    assert all(bundle.tok.token_to_id(token) == i for i, token in enumerate(vocab))


def test_wordpiece_continues_words_with_double_hash(wordpiece):
    folder, _ = wordpiece
    tokens = [t["token"] for t in tokenize_preview(folder, "unhappiness")]
    assert len(tokens) > 1
    assert not tokens[0].startswith("##") and all(t.startswith("##") for t in tokens[1:])
    assert "".join(t.removeprefix("##") for t in tokens) == "unhappiness"
    assert load_tokenizer(folder).decode(load_tokenizer(folder).encode("unhappiness")) == "unhappiness"


def test_wordpiece_splits_cjk_into_single_characters(wordpiece):
    folder, _ = wordpiece
    assert [t["token"] for t in tokenize_preview(folder, "你好世界")] == ["你", "好", "世", "界"]
    assert [t["token"] for t in tokenize_preview(folder, "play你好")] == ["play", "你", "好"]


def test_tokenize_preview_gives_tokens_and_ids_without_special_tokens(wordpiece):
    folder, _ = wordpiece
    preview = tokenize_preview(folder, "The Model!")
    bundle = load_tokenizer(folder)
    assert preview == [{"token": t, "id": bundle.tok.token_to_id(t)} for t in ["the", "model", "!"]]


def test_lowercase_option(corpus_dir, tmp_path):
    cased_corpus = write_corpus(tmp_path / "cased", cased=True)
    train_tokenizer(cased_corpus, tmp_path / "lower", vocab_size=200, lowercase=True)
    train_tokenizer(cased_corpus, tmp_path / "cased_tok", vocab_size=200, lowercase=False)
    lower = [t["token"] for t in tokenize_preview(tmp_path / "lower", "Playing Ráce")]
    cased = [t["token"] for t in tokenize_preview(tmp_path / "cased_tok", "Playing")]
    assert "".join(lower).replace("#", "") == "playingrace"  # lowercased, accent stripped
    assert cased[0].startswith("P") and "".join(cased).replace("#", "") == "Playing"
    assert json.loads((tmp_path / "cased_tok" / "tokenizer_meta.json").read_text())["lowercase"] is False
    vocab = (tmp_path / "lower" / "vocab.txt").read_text(encoding="utf-8").splitlines()[5:]
    assert vocab == [token.lower() for token in vocab]


@pytest.mark.parametrize("vocab_size", [120, 300])
def test_the_vocabulary_size_is_an_upper_bound(corpus_dir, tmp_path, vocab_size):
    stats = train_tokenizer(corpus_dir, tmp_path, vocab_size=vocab_size)
    assert stats["requested_vocab_size"] == vocab_size
    assert stats["vocab_size"] == load_tokenizer(tmp_path).vocab_size <= vocab_size
    if vocab_size == 120:
        assert stats["vocab_size"] >= 100  # the corpus has enough distinct text to fill it


def test_unk_rate_and_tokens_per_word_are_measured_on_the_validation_split(tmp_path):
    corpus = write_corpus(tmp_path / "c", valid_lines=["play ☃ run ☃", "the model"])
    stats = train_tokenizer(corpus, tmp_path / "t", vocab_size=300)
    # play [UNK] run [UNK] | the model: 2 of 6 tokens unknown, 6 tokens for 6 words
    assert stats["unk_rate"] == pytest.approx(2 / 6, abs=1e-5)
    assert stats["tokens_per_word"] == pytest.approx(1.0)
    assert stats["evaluated_on"] == "valid" and stats["evaluated_sentences"] == 2


def test_training_reports_stats_examples_and_progress(corpus_dir, tmp_path):
    calls = []
    stats = train_tokenizer(corpus_dir, tmp_path, vocab_size=200, progress=calls.append)
    assert calls[0] == 0 and calls[-1] == 100 and calls == sorted(set(calls))
    assert stats["unk_rate"] == 0 and 1 <= stats["tokens_per_word"] < 3
    assert stats["examples"] and all(set(e) == {"text", "tokens"} for e in stats["examples"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tokenizer.json", "tokenizer_config.json", "tokenizer_meta.json", "vocab.txt"
    ]  # fmt: skip


def test_encode_words_marks_word_starts(wordpiece):
    bundle = load_tokenizer(wordpiece[0])
    [(ids, starts)] = bundle.encode_words(["the unhappiness, 你好"])
    tokens = [bundle.id_to_token(i) for i in ids]
    assert starts == [not t.startswith("##") for t in tokens]
    assert tokens[0] == "the" and tokens[-3:] == [",", "你", "好"]


@pytest.mark.parametrize("vocab_size", [5, 99, 200_001, "many", 1000.5])
def test_it_rejects_impossible_vocabulary_sizes(corpus_dir, tmp_path, vocab_size):
    with pytest.raises(TokenizerError, match="vocabulary size"):
        train_tokenizer(corpus_dir, tmp_path, vocab_size=vocab_size)
    assert list(tmp_path.iterdir()) == []


def test_it_rejects_unknown_algorithms_and_missing_corpora(corpus_dir, tmp_path):
    with pytest.raises(TokenizerError, match="wordpiece"):
        train_tokenizer(corpus_dir, tmp_path, algorithm="sentencepiece-v9")
    with pytest.raises(TokenizerError, match="train.txt"):
        train_tokenizer(tmp_path / "nowhere", tmp_path / "out")
    assert issubclass(TokenizerError, UserError)


def test_load_tokenizer_explains_missing_files(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot be read"):
        load_tokenizer(tmp_path)


def test_a_bert_vocab_txt_alone_can_be_loaded(wordpiece, tmp_path):
    folder, _ = wordpiece
    (tmp_path / "vocab.txt").write_bytes((folder / "vocab.txt").read_bytes())
    bundle = load_tokenizer(tmp_path)
    original = load_tokenizer(folder)
    text = "The unhappy player, 你好!"
    assert bundle.encode(text, add_special_tokens=True) == original.encode(text, add_special_tokens=True)
    assert bundle.meta["special_tokens"] == original.meta["special_tokens"]


def test_wordpiece_matches_transformers_bert_tokenizer(wordpiece):
    transformers = pytest.importorskip("transformers")
    folder, _ = wordpiece
    ours = load_tokenizer(folder)
    try:  # transformers 5 keeps the original pure-Python implementation under this name
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as PythonBert
    except ImportError:
        PythonBert = transformers.BertTokenizer
    slow = PythonBert(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    for text in ["The Playing Model's tokens: unhappiness!", "Ráce café 你好世界", "kindness\tand  \u00a0 runs", "a" * 150]:
        expected = slow(text)["input_ids"]
        assert ours.encode(text, add_special_tokens=True) == expected
    pair = slow("the model", "a token", return_token_type_ids=True)
    enc = ours.tok.encode("the model", "a token")
    assert enc.ids == pair["input_ids"] and enc.type_ids == pair["token_type_ids"]


@pytest.mark.parametrize("algorithm", ["bpe", "unigram"])
def test_other_algorithms_share_the_contract(corpus_dir, tmp_path, algorithm):
    stats = train_tokenizer(corpus_dir, tmp_path, algorithm=algorithm, vocab_size=400)
    bundle = load_tokenizer(tmp_path)
    assert stats["vocab_size"] == bundle.vocab_size <= 400
    assert [bundle.id_to_token(i) for i in range(5)] == list(ALGORITHMS[algorithm].special_tokens)
    assert bundle.meta["special_tokens"] == {role: i for i, role in enumerate(ROLES)}
    ids = bundle.encode("the playing model", add_special_tokens=True)
    assert ids[0] == bundle.cls_id and ids[-1] == bundle.sep_id
    assert bundle.decode(bundle.encode("the playing model")).strip() == "the playing model"
    assert not (tmp_path / "vocab.txt").exists()
