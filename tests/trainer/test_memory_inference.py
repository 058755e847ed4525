"""The explorer's answers for Transformer-XL (generation, causal attention over its segment) and
XLNet (fill-in by permutation in the user's order, the attention of both streams)."""
from __future__ import annotations

import pytest

from trainer.errors import InferenceError
from trainer.inference import attention, generate, permutation
from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer", extra_ids=0)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tok_dir):
    root = tmp_path_factory.mktemp("ckpts")
    return {f: make_checkpoint(f, root / f, tok_dir) for f in ("transfo_xl", "xlnet", "gpt")}


def test_transfo_xl_generates_and_shows_causal_attention(ckpts):
    out = generate.generate(ckpts["transfo_xl"], "the cat sat on the", max_new_tokens=6)
    assert out["family"] == "transfo_xl" and 1 <= len(out["ids"]) <= 6
    stream = generate.stream_generate(ckpts["transfo_xl"], "the cat sat on the", max_new_tokens=6)
    pieces = []
    try:
        while True:
            pieces.append(next(stream))
    except StopIteration as done:
        assert done.value["ids"] == out["ids"] and "".join(pieces).strip() == done.value["text"].strip()
    beams = generate.generate(ckpts["transfo_xl"], "the cat sat on the", max_new_tokens=4, strategy="beam",
                              num_beams=3)
    assert 1 <= len(beams["ids"]) <= 4  # beam search reorders the memory of each hypothesis
    maps = attention.attention_maps(ckpts["transfo_xl"], "the cat sat on the mat")
    assert maps["stacks"] == ["decoder"] and maps["layers"] == 2 and maps["heads"] == 2
    grid = maps["maps"][0][0]
    for i, row in enumerate(grid):
        assert sum(row[i + 1:]) == 0 and abs(sum(row) - 1) < 1e-3


def test_xlnet_attention_has_both_streams(ckpts):
    content = attention.attention_maps(ckpts["xlnet"], "the cat sat on the mat", stack="content")
    query = attention.attention_maps(ckpts["xlnet"], "the cat sat on the mat", stack="query")
    assert content["stacks"] == query["stacks"] == ["content", "query"]
    assert query["layers"] == content["layers"] == 2
    assert content["tokens"][-2:] == ["[SEP]", "[CLS]"]
    for layer in query["maps"]:
        for head in layer:
            assert all(row[i] == 0 for i, row in enumerate(head))  # a query never sees its own token
    assert any(head[i][i] > 0 for layer in content["maps"] for head in layer for i in range(len(head)))


def test_fill_by_permutation_predicts_in_the_given_order_without_seeing_the_targets(ckpts):
    folder = ckpts["xlnet"]
    a = permutation.fill_by_permutation(folder, "the cat sat on the mat", [1, 4], top_k=3)
    assert [s["position"] for s in a["steps"]] == [1, 4] and a["order"] == [1, 4]
    assert a["steps"][0]["original"] == "cat" and len(a["steps"][0]["predictions"]) == 3
    probs = [p["prob"] for p in a["steps"][0]["predictions"]]
    assert probs == sorted(probs, reverse=True)
    assert a["filled"][1] == a["steps"][0]["chosen"] and a["filled"][0] == "the"
    # the text's tokens at the targets never reach the model: another word there changes nothing
    b = permutation.fill_by_permutation(folder, "the dog sat on a mat", [1, 4], top_k=3)
    assert b["steps"] == [{**s, "original": o} for s, o in zip(a["steps"], ("dog", "a"))]
    # the order matters: position 4 predicted first sees no filled-in position 1
    c = permutation.fill_by_permutation(folder, "the cat sat on the mat", [4, 1], top_k=3)
    assert [s["position"] for s in c["steps"]] == [4, 1]


@pytest.mark.parametrize("order,message", [([], "at least one"), ([1, 1], "twice"), ([99], "token numbers"),
                                           ([0, 1, 2, 3, 4, 5], "Leave at least one")])
def test_fill_by_permutation_refuses_with_a_sentence(ckpts, order, message):
    with pytest.raises(InferenceError, match=message):
        permutation.fill_by_permutation(ckpts["xlnet"], "the cat sat on the mat", order)


def test_fill_by_permutation_is_xlnets(ckpts):
    with pytest.raises(InferenceError, match="XLNet's; this is a GPT checkpoint"):
        permutation.fill_by_permutation(ckpts["gpt"], "the cat", [0])


def test_a_hugging_face_xlnet_folder_imports_and_fills_by_permutation(tmp_path):
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tests.trainer.inference_generate_helpers import TEXT
    from trainer.inference import importing
    from trainer.inference.loading import load

    src = tmp_path / "hf"
    src.mkdir()
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>"]  # XLNet's ids 0..6
    tok.train_from_iterator(TEXT.splitlines() * 20, trainers.UnigramTrainer(vocab_size=150, special_tokens=specials,
                                                                            unk_token="<unk>"))
    tok.save(str(src / "tokenizer.json"))
    torch.manual_seed(0)
    theirs = transformers.XLNetLMHeadModel(transformers.XLNetConfig(
        vocab_size=tok.get_vocab_size(), d_model=32, n_layer=2, n_head=2, d_inner=64, pad_token_id=5,
        eos_token_id=2, bos_token_id=1)).eval()
    theirs.save_pretrained(src)
    info = importing.import_hf_directory(src, tmp_path / "ckpt")
    assert info["family"] == "xlnet" and info["objectives"] == ["plm"] and info["missing_keys"] == []
    loaded = load(tmp_path / "ckpt")
    assert (loaded.tokenizer.sep_id, loaded.tokenizer.cls_id) == (4, 3)
    ids = loaded.family.prompt_ids(loaded.tokenizer, "the cat sat on the mat")
    assert ids[-2:] == [4, 3]
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(torch.tensor([ids])).logits,
                                   theirs(torch.tensor([ids]), use_mems=False).logits, atol=1e-4, rtol=0)
    out = permutation.fill_by_permutation(tmp_path / "ckpt", "the cat sat on the mat", [1, 0])
    assert [s["position"] for s in out["steps"]] == [1, 0]
