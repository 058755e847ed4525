"""T5 sentinel tokens on trained tokenizers: <extra_id_0>... after the vocabulary, contiguous and
in order, never split, special everywhere, recorded in tokenizer_meta.json (old folders: 0)."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from trainer.objectives.examples import SpecialIds
from trainer.errors import TokenizerError
from trainer.prep.tokenization import load_tokenizer, sentinel_token, tokenize_preview, train_tokenizer

WORDS = ("the a model token train language run walk house kind happy play player playing display "
         "talk talked running runner houses").split()


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("corpus")
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "." for _ in range(400)]
    docs = ["\n".join(lines[i:i + 5]) for i in range(0, len(lines), 5)]
    (folder / "train.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (folder / "valid.txt").write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def with_sentinels(corpus_dir, tmp_path_factory):
    out = {}
    for algorithm, size in (("unigram", 150), ("bpe", 320), ("wordpiece", 150)):
        folder = tmp_path_factory.mktemp(f"{algorithm}-sentinels")
        stats = train_tokenizer(corpus_dir, folder, algorithm=algorithm, vocab_size=size, extra_ids=100)
        out[algorithm] = (folder, stats)
    return out


@pytest.mark.parametrize("algorithm", ["unigram", "bpe", "wordpiece"])
def test_sentinel_ids_are_contiguous_in_order_after_the_vocabulary(with_sentinels, algorithm):
    folder, stats = with_sentinels[algorithm]
    bundle = load_tokenizer(folder)
    ids = bundle.sentinel_ids
    assert len(ids) == 100 and bundle.extra_ids == 100 and stats["extra_ids"] == 100
    assert ids == list(range(ids[0], ids[0] + 100))  # contiguous, <extra_id_0> first
    assert ids[-1] == bundle.vocab_size - 1  # on top of the learned vocabulary, as in T5
    assert [bundle.id_to_token(i) for i in ids[:3]] == ["<extra_id_0>", "<extra_id_1>", "<extra_id_2>"]
    assert set(ids) <= bundle.special_ids
    assert bundle.special_ids >= {bundle.pad_id, bundle.unk_id, bundle.cls_id, bundle.sep_id, bundle.mask_id}
    # encoding keeps a sentinel as one token, wherever it stands
    enc = bundle.tok.encode("a <extra_id_0> b<extra_id_17>c", add_special_tokens=False)
    assert enc.ids.count(ids[0]) == 1 and enc.ids.count(ids[17]) == 1
    assert "<extra_id_0>" in enc.tokens and not any("extra" in t for t in enc.tokens if not t.startswith("<extra"))
    # decoding: hidden by default, visible when asked for (the explorer shows them)
    assert "extra_id" not in bundle.decode(enc.ids)
    shown = bundle.decode(enc.ids, skip_special_tokens=False)
    assert "<extra_id_0>" in shown and "<extra_id_17>" in shown
    preview = tokenize_preview(folder, "run <extra_id_3> walk")
    assert {"token": "<extra_id_3>", "id": ids[3]} in preview


def test_meta_records_the_sentinels_and_reads_back(with_sentinels):
    folder, _ = with_sentinels["unigram"]
    meta = json.loads((folder / "tokenizer_meta.json").read_text())
    bundle = load_tokenizer(folder)
    assert meta["extra_ids"] == 100 and bundle.meta["extra_ids"] == 100
    assert meta["sentinel_id_range"] == [bundle.sentinel_ids[0], bundle.sentinel_ids[-1]]
    assert meta["vocab_size"] == bundle.vocab_size
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["additional_special_tokens"] == [sentinel_token(i) for i in range(100)]


def test_sentinels_are_special_for_the_collators(with_sentinels):
    bundle = load_tokenizer(with_sentinels["bpe"][0])
    special = SpecialIds.from_tokenizer(bundle)
    assert special.sentinels == tuple(bundle.sentinel_ids)
    assert special.eos == bundle.token_to_id("</s>")
    assert special.is_special(np.asarray(bundle.sentinel_ids)).all()
    assert not set(bundle.sentinel_ids) & set(special.replacement_ids.tolist())  # never a random replacement


def test_tokenizers_without_sentinels_read_as_zero(corpus_dir, tmp_path):
    folder = tmp_path / "plain"
    train_tokenizer(corpus_dir, folder, algorithm="unigram", vocab_size=150)
    bundle = load_tokenizer(folder)
    assert bundle.sentinel_ids == [] and bundle.extra_ids == 0 and bundle.meta["extra_ids"] == 0
    assert SpecialIds.from_tokenizer(bundle).sentinels == ()
    enc = bundle.tok.encode("a <extra_id_0> b", add_special_tokens=False)
    assert len(enc.ids) > 3  # no sentinel: the text is split like any other
    # a folder written before sentinels existed has no "extra_ids" key at all
    meta_path = folder / "tokenizer_meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["extra_ids"]
    meta_path.write_text(json.dumps(meta))
    old = load_tokenizer(folder)
    assert old.sentinel_ids == [] and old.meta["extra_ids"] == 0


def test_hf_folders_without_our_meta_find_their_sentinels(with_sentinels, tmp_path):
    src, _ = with_sentinels["unigram"]
    (tmp_path / "tokenizer.json").write_text((src / "tokenizer.json").read_text())
    bundle = load_tokenizer(tmp_path)
    assert bundle.meta.get("inferred") and len(bundle.sentinel_ids) == 100


@pytest.mark.parametrize("bad,message", [(-1, "between 0 and 1,000"), (1001, "between 0 and 1,000"),
                                         ("many", "whole number"), (2.5, "whole number")])
def test_bad_sentinel_counts_are_refused(corpus_dir, tmp_path, bad, message):
    with pytest.raises(TokenizerError, match=message):
        train_tokenizer(corpus_dir, tmp_path / "t", algorithm="unigram", vocab_size=150, extra_ids=bad)


def test_a_meta_that_lists_missing_sentinels_is_a_clear_error(corpus_dir, tmp_path):
    folder = tmp_path / "broken"
    train_tokenizer(corpus_dir, folder, algorithm="wordpiece", vocab_size=150, extra_ids=2)
    meta = json.loads((folder / "tokenizer_meta.json").read_text())
    meta["extra_ids"] = 5
    (folder / "tokenizer_meta.json").write_text(json.dumps(meta))
    with pytest.raises(TokenizerError, match="lists 5 T5 sentinel tokens, but <extra_id_2> is not in the vocabulary"):
        load_tokenizer(folder)
