"""The tests' stored tokenizers (tests/tokenizer_store.py): every file train_tokenizer writes is
stored, an entry is found again by its settings and corpus, and a miss trains and stores."""
from __future__ import annotations

import json

import pytest

from tests import tokenizer_store
from trainer.prep.tokenization import load_tokenizer, train_tokenizer


def corpus(folder, text: str):
    folder.mkdir(parents=True)
    (folder / "train.txt").write_text(text, encoding="utf-8")
    (folder / "valid.txt").write_text(text[:200], encoding="utf-8")
    return folder


TEXT = "\n\n".join(f"Sentence number {i} says the quick brown fox jumps over the lazy dog {i % 7}." for i in range(300))


def test_the_store_keeps_every_file_train_tokenizer_writes(tmp_path):
    train_tokenizer(corpus(tmp_path / "c", TEXT), tmp_path / "t", algorithm="wordpiece", vocab_size=150)
    written = {p.name for p in (tmp_path / "t").iterdir()}
    assert written <= set(tokenizer_store.FILES), written - set(tokenizer_store.FILES)


def test_a_miss_trains_and_stores_and_a_hit_gives_the_same_files(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenizer_store, "STORE", tmp_path / "store")
    monkeypatch.delenv(tokenizer_store.STRICT_ENV, raising=False)
    source = corpus(tmp_path / "c", TEXT)
    stats = tokenizer_store.stored_tokenizer(source, tmp_path / "a", vocab_size=150)
    [entry] = list((tmp_path / "store").iterdir())
    assert entry.name == tokenizer_store.store_key(source, vocab_size=150)
    (entry / "tokenizer.json").write_text((tmp_path / "a" / "tokenizer.json").read_text())  # as stored
    again = tokenizer_store.stored_tokenizer(source, tmp_path / "b", vocab_size=150)
    assert again == stats and len(list((tmp_path / "store").iterdir())) == 1  # found, not trained again
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert load_tokenizer(tmp_path / "b").vocab_size == json.loads((entry / "tokenizer_meta.json").read_text())["vocab_size"]
    # another setting or another text is another entry
    assert tokenizer_store.store_key(source, vocab_size=151) != entry.name
    other = corpus(tmp_path / "d", TEXT + "\n\nOne more line.")
    assert tokenizer_store.store_key(other, vocab_size=150) != entry.name


def test_in_ci_a_miss_fails_and_says_why_instead_of_training(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenizer_store, "STORE", tmp_path / "store")
    monkeypatch.setenv(tokenizer_store.STRICT_ENV, "1")
    source = corpus(tmp_path / "c", TEXT)
    with pytest.raises(LookupError, match="no stored tokenizer wordpiece-150-0-lower-.*commit tests/data/tokenizers/"):
        tokenizer_store.stored_tokenizer(source, tmp_path / "a", vocab_size=150)
    assert not (tmp_path / "store").exists() and not (tmp_path / "a").exists()  # nothing trained
