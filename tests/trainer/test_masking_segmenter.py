"""Chinese whole-word masking: jieba word boundaries for a tokenizer that splits CJK characters."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.objectives.masking import IGNORE_INDEX
from trainer.objectives.examples import SpecialIds
from trainer.objectives import build_collator
from trainer.config import RunConfig
from trainer.prep.segmenter import TokenWordStarts, refine_word_starts, segment, word_starts_for

SENTENCES = [
    "我喜欢吃苹果。", "自然语言处理是人工智能的一个重要方向。", "他们在北京大学学习计算机科学。",
    "今天天气很好，我们去公园散步吧。", "妈妈喜欢喝绿茶，爸爸喜欢喝咖啡。", "这本书介绍了机器学习的基本方法。",
    "我们明天早上坐火车去上海。", "苹果和香蕉都是很好吃的水果。", "学生们在图书馆里认真地看书。",
    "中国的历史非常悠久。",
]


@pytest.fixture(scope="module")
def chinese_tokenizer(tmp_path_factory) -> Path:
    """A WordPiece tokenizer (CJK characters split apart, as BERT does) with shards."""
    from trainer.prep.shards import encode_corpus
    from tests.tokenizer_store import stored_tokenizer

    base = tmp_path_factory.mktemp("zh")
    corpus, tok = base / "corpus", base / "tok"
    corpus.mkdir()
    rng = np.random.default_rng(0)
    docs = ["\n".join(SENTENCES[i] for i in rng.permutation(len(SENTENCES))[:4]) for _ in range(120)]
    (corpus / "train.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (corpus / "valid.txt").write_text("\n\n".join(docs[:20]) + "\n", encoding="utf-8")
    stored_tokenizer(corpus, tok, algorithm="wordpiece", vocab_size=300)
    encode_corpus(corpus, tok)
    return tok


def test_jieba_finds_multi_character_words():
    assert segment("我喜欢吃苹果") == ["我", "喜欢", "吃", "苹果"]


def test_word_starts_follow_jieba_inside_cjk_runs(chinese_tokenizer):
    from trainer.prep.tokenization import load_tokenizer

    bundle = load_tokenizer(chinese_tokenizer)
    text = "我喜欢吃苹果, ok"
    enc = bundle.tok.encode(text, add_special_tokens=False)
    assert enc.tokens[:6] == list("我喜欢吃苹果")  # the tokenizer alone: one word per character
    flags = word_starts_for(text, enc.offsets)
    assert flags[:6].tolist() == [1, 1, 0, 1, 1, 0]  # 我 / 喜欢 / 吃 / 苹果
    assert (flags[6:] == 1).all()  # outside CJK the base flags are kept
    # The same from token ids alone (collate time), and over a batch (what shards.py would call).
    assert TokenWordStarts.from_tokenizer(bundle)(np.asarray(enc.ids[:6])).tolist() == [1, 1, 0, 1, 1, 0]
    encs = bundle.tok.encode_batch(["ok", text], add_special_tokens=False)
    starts = np.ones(sum(len(e.ids) for e in encs), dtype=np.uint8)
    assert refine_word_starts(["ok", text], encs, starts)[1:7].tolist() == [1, 1, 0, 1, 1, 0]


def test_whole_word_masking_masks_both_characters_of_a_chinese_word(chinese_tokenizer):
    from trainer.training.data import _tokenizer_if_needed, make_collator, make_source, open_split
    from trainer.prep.tokenization import load_tokenizer

    bundle = load_tokenizer(chinese_tokenizer)
    special = SpecialIds.from_tokenizer(bundle)
    xi, huan = bundle.token_to_id("喜"), bundle.token_to_id("欢")
    config = RunConfig(objectives=["mlm"], seq_len=64, seed=0)
    config.masking_unit = "word"  # the field the lead adds to RunConfig
    tokenizer = _tokenizer_if_needed(config, chinese_tokenizer)
    collator = make_collator(config, special, tokenizer)
    index = open_split(chinese_tokenizer, "train")
    source = make_source(config, index, special, collator, static=False, tokenizer=tokenizer)
    table = source.instances(0)
    together = 0
    for variant in range(12):
        examples = [source.example(table, uid, variant) for uid in range(len(table))]
        batch = collator(examples)
        ids = np.stack([np.pad(ex.a, (1, 64 - 1 - len(ex.a)))[:batch.input_ids.shape[1]] for ex in examples])
        labels = batch.mlm_labels.numpy()
        pairs = np.argwhere((ids[:, :-1] == xi) & (ids[:, 1:] == huan))
        a, b = labels[pairs[:, 0], pairs[:, 1]] != IGNORE_INDEX, labels[pairs[:, 0], pairs[:, 1] + 1] != IGNORE_INDEX
        assert (a == b).all()  # 喜欢 is masked as one word
        together += int(a.sum())
    assert together > 20

    # Without jieba (the tokenizer's own flags: every CJK character a word) they come apart.
    # The shards store jieba's boundaries, so stand in the per-character flags here.
    plain = build_collator(["mlm"], special=special, seq_len=64, masking_unit="word")
    source.refine = lambda ids, stored: np.ones_like(stored)
    examples = [source.example(table, uid, 0) for uid in range(len(table))]
    labels = plain(examples).mlm_labels.numpy()
    ids = np.stack([np.pad(ex.a, (1, 64 - 1 - len(ex.a)))[:labels.shape[1]] for ex in examples])
    pairs = np.argwhere((ids[:, :-1] == xi) & (ids[:, 1:] == huan))
    a, b = labels[pairs[:, 0], pairs[:, 1]] != IGNORE_INDEX, labels[pairs[:, 0], pairs[:, 1] + 1] != IGNORE_INDEX
    assert (a != b).any()


def test_segmenter_prints_nothing():
    code = "from trainer.prep.segmenter import segment; print('/'.join(segment('我喜欢吃苹果')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "我/喜欢/吃/苹果" and done.stderr == ""
