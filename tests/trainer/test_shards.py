"""Encoding a prepared corpus into memory-mapped token shards, and reading them back."""

import json
import random

import numpy as np
import pytest

from trainer.prep import shards
from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
from trainer.errors import CorpusError, TokenizerError
from trainer.prep.shards import encode_corpus, open_shards, token_dtype
from trainer.prep.tokenization import load_tokenizer, train_tokenizer

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def write_split(path, docs):
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")


def make_corpus(folder, n_train=30, n_valid=4, seed=0):
    rng = random.Random(seed)

    def doc():
        return [
            " ".join(rng.choice(WORDS) + rng.choice(["", "", "s", "ing", ","]) for _ in range(rng.randint(1, 9))) + "."
            for _ in range(rng.randint(1, 6))
        ]

    folder.mkdir(parents=True, exist_ok=True)
    docs = {"train": [doc() for _ in range(n_train)], "valid": [doc() for _ in range(n_valid)]}
    for split, split_docs in docs.items():
        write_split(folder / f"{split}.txt", split_docs)
    return docs


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    docs = make_corpus(root / "corpus")
    train_tokenizer(root / "corpus", root / "tok", vocab_size=120)
    stats = encode_corpus(root / "corpus", root / "tok")
    return root, docs, stats


@pytest.mark.parametrize("split", ["train", "valid"])
def test_shards_round_trip_the_corpus(encoded, split):
    root, docs, _ = encoded
    bundle = load_tokenizer(root / "tok")
    data = open_shards(root / "tok", split)
    assert data.n_documents == len(docs[split])
    assert data.n_sentences == sum(len(d) for d in docs[split])
    for d, sentences in enumerate(docs[split]):
        got = data.document(d)
        assert len(got) == len(sentences)
        for arr, text in zip(got, sentences):
            assert arr.tolist() == bundle.encode(text)  # no special tokens
            assert bundle.decode(arr) == bundle.decode(bundle.encode(text))
    assert data.n_tokens == len(data.tokens) == int(data.sentence_offsets[-1])


def test_shard_files_and_metadata(encoded):
    root, docs, stats = encoded
    folder = root / "tok" / "shards" / "train"
    assert sorted(p.name for p in folder.iterdir()) == [
        "documents.npy", "sentences.npy", "shard.json", "tokens.bin", "word_starts.bin"
    ]  # fmt: skip
    meta = json.loads((folder / "shard.json").read_text())
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == load_tokenizer(root / "tok").vocab_size
    assert {k: meta[k] for k in ("n_tokens", "n_sentences", "n_documents")} == {
        k: stats["train"][k] for k in ("n_tokens", "n_sentences", "n_documents")
    }
    sentences = np.load(folder / "sentences.npy")
    documents = np.load(folder / "documents.npy")
    assert sentences.dtype == documents.dtype == np.int64
    assert len(sentences) == meta["n_sentences"] + 1 and len(documents) == meta["n_documents"] + 1
    assert documents[0] == 0 and documents[-1] == meta["n_sentences"] and np.all(np.diff(documents) > 0)
    assert (folder / "tokens.bin").stat().st_size == 2 * meta["n_tokens"]
    assert stats["n_tokens"] == stats["train"]["n_tokens"] + stats["valid"]["n_tokens"]
    assert stats["dtype"] == "uint16"
    assert [p.name for p in (root / "tok").iterdir() if p.name.startswith(".")] == []


def test_word_starts_mark_the_first_piece_of_each_word(encoded):
    root, docs, _ = encoded
    bundle = load_tokenizer(root / "tok")
    data = open_shards(root / "tok", "train")
    assert data.word_starts is not None and len(data.word_starts) == data.n_tokens
    for i in range(data.n_sentences):
        tokens = [bundle.id_to_token(t) for t in data.sentence(i)]
        assert data.sentence_word_starts(i).tolist() == [int(not t.startswith("##")) for t in tokens]


def test_the_token_dtype_depends_on_the_vocabulary_size():
    assert token_dtype(8000) == np.uint16
    assert token_dtype(65536) == np.uint16  # ids 0..65535
    assert token_dtype(65537) == np.uint32


def test_a_large_vocabulary_is_stored_as_uint32(tmp_path):
    # a BERT vocab.txt with 70,000 entries (loaded without tokenizer.json)
    tok = tmp_path / "tok"
    tok.mkdir()
    words = [f"w{i}" for i in range(70_000)]
    (tok / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    write_split(tmp_path / "train.txt", [["w1 w69999 w3.", "w65600"], ["w5"]])
    write_split(tmp_path / "valid.txt", [["w69998"]])
    stats = encode_corpus(tmp_path, tok)
    data = open_shards(tok, "train")
    assert stats["dtype"] == "uint32" and data.tokens.dtype == np.uint32
    assert data.sentence(0).tolist() == [6, 70_004, 8, 1]  # "." is not in this vocabulary
    assert data.sentence(1).tolist() == [65_605] and data.document(1)[0].tolist() == [10]


def test_sentences_without_tokens_are_skipped_and_empty_documents_dropped(tmp_path):
    make_corpus(tmp_path / "corpus")
    train_tokenizer(tmp_path / "corpus", tmp_path / "tok", vocab_size=120)
    write_split(tmp_path / "corpus" / "train.txt", [["alpha beta.", "\x07\x07", "gamma."], ["\x07"], ["delta."]])
    stats = encode_corpus(tmp_path / "corpus", tmp_path / "tok")
    assert stats["train"] == {"n_tokens": 7, "n_sentences": 3, "n_documents": 2, "skipped_sentences": 2}
    data = open_shards(tmp_path / "tok", "train")
    assert data.document_offsets.tolist() == [0, 2, 3]
    assert len(data.document(0)) == 2 and len(data.document(1)) == 1


def test_encoding_again_replaces_the_shards_and_reports_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "CHUNK_SENTENCES", 8)
    make_corpus(tmp_path / "corpus", n_train=60)
    train_tokenizer(tmp_path / "corpus", tmp_path / "tok", vocab_size=120)
    encode_corpus(tmp_path / "corpus", tmp_path / "tok")
    write_split(tmp_path / "corpus" / "valid.txt", [["alpha."]])
    calls = []
    encode_corpus(tmp_path / "corpus", tmp_path / "tok", progress=calls.append)
    assert calls[0] == 0 and calls[-1] == 100 and calls == sorted(set(calls)) and len(calls) > 5
    assert open_shards(tmp_path / "tok", "valid").n_sentences == 1
    assert sorted(p.name for p in (tmp_path / "tok").iterdir() if p.is_dir()) == ["shards"]


def test_missing_inputs_give_clear_errors(tmp_path):
    with pytest.raises(TokenizerError, match="train the tokenizer"):
        open_shards(tmp_path, "train")
    with pytest.raises(ValueError):
        open_shards(tmp_path, "test")
    with pytest.raises(CorpusError, match="train.txt"):
        encode_corpus(tmp_path, tmp_path)
    write_split(tmp_path / "train.txt", [["a."]])
    write_split(tmp_path / "valid.txt", [["a."]])
    with pytest.raises(TokenizerError, match="train the tokenizer"):
        encode_corpus(tmp_path, tmp_path / "no-tokenizer")


def test_damaged_shards_are_reported(encoded, tmp_path):
    root, _, _ = encoded
    import shutil

    shutil.copytree(root / "tok", tmp_path / "tok")
    tokens = tmp_path / "tok" / "shards" / "valid" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:-2])
    with pytest.raises(TokenizerError, match="damaged"):
        open_shards(tmp_path / "tok", "valid")


def test_the_demo_corpus_end_to_end(tmp_path):
    """write_demo_corpus -> ingest -> an 8000-token WordPiece vocabulary -> shards."""
    demo = write_demo_corpus(tmp_path / "demo.txt")
    corpus = ingest(demo, tmp_path / "corpus", original_filename="demo.txt", options=CleaningOptions())
    train_tokenizer(tmp_path / "corpus", tmp_path / "tok", vocab_size=8000)
    stats = encode_corpus(tmp_path / "corpus", tmp_path / "tok")
    for split in ("train", "valid"):
        assert stats[split]["n_sentences"] == corpus.stats[split]["sentences"]
        assert stats[split]["n_documents"] == corpus.stats[split]["documents"]
    assert stats["n_tokens"] > 100_000
    bundle = load_tokenizer(tmp_path / "tok")
    data = open_shards(tmp_path / "tok", "valid")
    first_doc = (tmp_path / "corpus" / "valid.txt").read_text(encoding="utf-8").split("\n\n")[0].split("\n")
    assert [a.tolist() for a in data.document(0)] == [bundle.encode(s) for s in first_doc]


def test_the_word_segmenter_recorded_is_the_one_used(encoded, tmp_path):
    """An English corpus's shards say no segmenter gave their word starts; a corpus with Chinese
    text says jieba did (issue 46: shards of English text were labelled jieba)."""
    root, _, _ = encoded
    for split in ("train", "valid"):
        meta = json.loads((root / "tok" / "shards" / split / "shard.json").read_text())
        assert meta["word_segmenter"] == "none"
    corpus = tmp_path / "corpus"
    make_corpus(corpus)
    with (corpus / "train.txt").open("a", encoding="utf-8") as f:
        f.write("\n我今天吃了一个苹果。我买了一部苹果手机。\n")
    train_tokenizer(corpus, tmp_path / "tok", vocab_size=160)
    encode_corpus(corpus, tmp_path / "tok")
    segmenters = {split: json.loads((tmp_path / "tok" / "shards" / split / "shard.json").read_text())["word_segmenter"]
                  for split in ("train", "valid")}
    assert segmenters == {"train": "jieba", "valid": "none"}
