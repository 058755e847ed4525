"""trainer.inference (generate, attention, similarity) for T5, GPT, UniLM and ELMo: generation (all at once and streamed), span
filling, attention maps, ELMo word similarity, decoding mistakes, and imported T5 / GPT-2 models
generating what transformers generates."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from trainer.inference import attention, generate as generation, masked, similarity
from trainer.errors import InferenceError

from .inference_generate_helpers import (
    make_checkpoint, make_tokenizer, tiny_model, write_tiny_hf_gpt2, write_tiny_hf_t5,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generate")


@pytest.fixture(scope="module")
def tok_dir(base) -> Path:
    return make_tokenizer(base / "tokenizer")


@pytest.fixture(scope="module")
def ckpts(base, tok_dir) -> dict[str, Path]:
    return {family: make_checkpoint(family, base / family, tok_dir) for family in ("t5", "gpt", "elmo", "bert")}


def drain(gen):
    """(pieces, return value) of a stream_generate generator."""
    pieces = []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as end:
            return pieces, end.value


# ---------------------------------------------------------------------------- decoding fields
@pytest.mark.parametrize("fields, message", [
    ({"max_new_tokens": 0}, "max_new_tokens must be between 1 and 256"),
    ({"max_new_tokens": 257}, "max_new_tokens must be between 1 and 256"),
    ({"max_new_tokens": "ten"}, "max_new_tokens must be a whole number"),
    ({"num_beams": 9, "strategy": "beam"}, "num_beams must be between 1 and 8"),
    ({"temperature": 0, "strategy": "sample"}, "temperature must be greater than 0"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"top_p": 0}, "top_p must be greater than 0 and at most 1"),
    ({"top_p": 1.5}, "top_p must be greater than 0 and at most 1"),
    ({"top_k": -1}, "top_k must be at least 0"),
    ({"strategy": "nucleus"}, "strategy must be greedy, beam or sample"),
    ({"beams": 3}, "Unknown decoding field(s): beams"),
])
def test_bad_decoding_fields_are_refused_with_a_sentence(ckpts, fields, message):
    with pytest.raises(InferenceError) as e:
        generation.generate(ckpts["gpt"], "the cat", **fields)
    assert message in str(e.value)


def test_a_sample_without_a_seed_gets_one_that_draws_it_again(ckpts):
    first = generation.generate(ckpts["gpt"], "the cat", strategy="sample", max_new_tokens=12)
    seed = first["decoding"]["seed"]
    assert isinstance(seed, int)
    again = generation.generate(ckpts["gpt"], "the cat", strategy="sample", max_new_tokens=12, seed=seed)
    assert again["ids"] == first["ids"]


# ---------------------------------------------------------------------------- T5 and GPT
def test_t5_text_to_text_answers_with_its_greedy_decoding(ckpts, tok_dir):
    out = generation.generate(ckpts["t5"], "summarize: the cat sat on the mat", max_new_tokens=6)
    assert out["family"] == "t5" and out["decoding"] == {"strategy": "greedy", "max_new_tokens": 6}
    assert len(out["ids"]) == len(out["tokens"]) <= 6 and out["stopped"] in ("end", "length")
    # The same tokens as models_lib's generate on "text EOS", after the decoder start token.
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tok_dir)
    model = tiny_model("t5", tok_dir)
    ids = tok.tok.encode("summarize: the cat sat on the mat", add_special_tokens=False).ids + [tok.sep_id]
    assert out["prompt_tokens"] == len(ids)
    expected = model.generate(torch.tensor([ids]), max_new_tokens=6, eos_token_id=tok.sep_id)[0, 1:].tolist()
    if tok.sep_id in expected:
        expected = expected[: expected.index(tok.sep_id)]
    assert out["ids"] == expected


def test_gpt_beam_search_is_models_libs(ckpts, tok_dir):
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tok_dir)
    out = generation.generate(ckpts["gpt"], "the dog ran", strategy="beam", num_beams=3, max_new_tokens=8)
    ids = tok.tok.encode("the dog ran", add_special_tokens=False).ids
    expected = tiny_model("gpt", tok_dir).generate(torch.tensor([ids]), num_beams=3, max_new_tokens=8,
                                                   eos_token_id=tok.sep_id)[0, len(ids):].tolist()
    if tok.sep_id in expected:
        expected = expected[: expected.index(tok.sep_id)]
    assert out["ids"] == expected and out["decoding"]["num_beams"] == 3


@pytest.mark.parametrize("fields", [{"strategy": "greedy"}, {"strategy": "sample", "seed": 7, "top_k": 20,
                                                             "top_p": 0.9, "temperature": 0.7}])
def test_streamed_tokens_are_the_generated_ones(ckpts, fields):
    whole = generation.generate(ckpts["gpt"], "the cat sat", max_new_tokens=16, **fields)
    pieces, answer = drain(generation.stream_generate(ckpts["gpt"], "the cat sat", max_new_tokens=16, **fields))
    assert answer["ids"] == whole["ids"] and answer["text"] == whole["text"]
    assert "".join(pieces) == whole["text"] and len(pieces) >= 1


def test_t5_streams_and_beam_search_yields_once(ckpts):
    pieces, answer = drain(generation.stream_generate(ckpts["t5"], "translate English to German: the house",
                                                     max_new_tokens=5))
    assert answer == generation.generate(ckpts["t5"], "translate English to German: the house", max_new_tokens=5)
    pieces, answer = drain(generation.stream_generate(ckpts["gpt"], "the cat", strategy="beam", max_new_tokens=5))
    assert pieces == ([answer["text"]] if answer["text"] else [])


def test_stream_generate_checks_the_request_before_the_first_token(ckpts):
    with pytest.raises(InferenceError, match="max_new_tokens"):
        generation.stream_generate(ckpts["gpt"], "the cat", max_new_tokens=0)  # no next() needed
    with pytest.raises(InferenceError, match="does not generate text"):
        generation.stream_generate(ckpts["bert"], "the cat")


def test_gpt_prompts_must_leave_room_and_encoders_do_not_generate(ckpts):
    with pytest.raises(InferenceError, match="leaves no room to generate"):
        generation.generate(ckpts["gpt"], "the cat " * 32)  # 64 tokens, 64 positions
    out = generation.generate(ckpts["gpt"], "the cat " * 30, max_new_tokens=256)  # 60 tokens: 4 left
    assert len(out["ids"]) <= 4
    with pytest.raises(InferenceError, match="does not generate text"):
        generation.generate(ckpts["bert"], "the cat")
    with pytest.raises(InferenceError, match="Type a prompt"):
        generation.generate(ckpts["t5"], "   ")


def test_encoder_questions_are_refused_for_decoders_and_elmo(ckpts):
    with pytest.raises(InferenceError, match="GPT predicts the next token, so it cannot fill in"):
        masked.fill_mask(ckpts["gpt"], "the [MASK] sat.")
    with pytest.raises(InferenceError, match="cannot judge sentence pairs"):
        masked.next_sentence(ckpts["t5"], "One.", "Two.")
    with pytest.raises(InferenceError, match="Use word similarity"):
        masked.sentence_order(ckpts["elmo"], "One.", "Two.")


def test_unilm_generates_through_the_same_function(base, tok_dir):
    from models_lib.checkpoint import save_model
    from models_lib.core.config import EncoderConfig
    from models_lib.families.unilm import UniLMForPreTraining
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tok_dir)
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset("unilm-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_heads=2,
                                    intermediate_size=64, num_layers=2, max_position_embeddings=64)
    folder = save_model(UniLMForPreTraining(cfg).eval(), base / "unilm")
    for name in ("tokenizer.json", "tokenizer_meta.json"):
        shutil.copy(tok_dir / name, folder / name)
    out = generation.generate(folder, "a short title", max_new_tokens=5)
    old = generation.generate_seq2seq(folder, "a short title", max_new_tokens=5)
    assert out["family"] == "unilm" and out["ids"] == old["ids"] and out["text"] == old["text"]
    sample = {"strategy": "sample", "seed": 3, "top_k": 50, "max_new_tokens": 6}
    pieces, streamed = drain(generation.stream_generate(folder, "a short title", **sample))
    assert streamed["ids"] == generation.generate(folder, "a short title", **sample)["ids"]
    assert "".join(pieces) == streamed["text"]


# ---------------------------------------------------------------------------- span filling
def test_fill_spans_gives_each_sentinel_its_span(ckpts, tok_dir, monkeypatch):
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tok_dir)
    s0, s1, s2 = tok.sentinel_ids[:3]
    cat, sat, dog = (tok.tok.token_to_id(w) for w in ("cat", "sat", "dog"))
    # The model's output: <extra_id_0> cat sat <extra_id_1> dog (span corruption's target shape).
    monkeypatch.setattr(generation, "run", lambda loaded, p, opts: ([s0, cat, sat, s1, dog], True))
    out = generation.fill_spans(ckpts["t5"], "the <extra_id_0> on the mat and the <extra_id_1> ran <extra_id_2>.")
    assert [(s["sentinel"], s["text"], s["found"]) for s in out["spans"]] == [
        ("<extra_id_0>", "cat sat", True), ("<extra_id_1>", "dog", True), ("<extra_id_2>", "", False)]
    assert out["filled"] == "the cat sat on the mat and the dog ran <extra_id_2>."
    assert out["output"] == "<extra_id_0> cat sat <extra_id_1> dog" and out["stopped"] == "end"
    assert s2 not in [tok.tok.token_to_id(t) for s in out["spans"] for t in s["tokens"]]


def test_fill_spans_runs_the_real_model(ckpts):
    out = generation.fill_spans(ckpts["t5"], "the cat <extra_id_0> the mat.", max_new_tokens=8)
    assert [s["sentinel"] for s in out["spans"]] == ["<extra_id_0>"] and out["decoding"]["max_new_tokens"] == 8


def test_fill_spans_mistakes(ckpts, base):
    with pytest.raises(InferenceError, match="has no sentinel: write <extra_id_0>"):
        generation.fill_spans(ckpts["t5"], "the cat sat on the mat.")
    with pytest.raises(InferenceError, match="has 8 sentinel tokens, <extra_id_0> to <extra_id_7>; <extra_id_12>"):
        generation.fill_spans(ckpts["t5"], "the cat <extra_id_12> the mat.")
    with pytest.raises(InferenceError, match="needs a T5 checkpoint"):
        generation.fill_spans(ckpts["gpt"], "the cat <extra_id_0> the mat.")
    plain_tok = make_tokenizer(base / "tokenizer-plain", extra_ids=0)
    plain = make_checkpoint("t5", base / "t5-plain", plain_tok)
    with pytest.raises(InferenceError, match="tokenizer has no sentinel tokens"):
        generation.fill_spans(plain, "the cat <extra_id_0> the mat.")


# ---------------------------------------------------------------------------- attention
def _rows_sum_to_one(maps):
    for layer in maps:
        for head in layer:
            for row in head:
                assert abs(sum(row) - 1) < 2e-3


def test_encoder_attention_has_every_layer_and_head(ckpts):
    out = attention.attention_maps(ckpts["bert"], "the cat sat on the mat")
    assert out["stacks"] == ["encoder"] and out["layers"] == 2 and out["heads"] == 2 and out["layer"] is None
    assert out["tokens"][0] == "[CLS]" and out["tokens"][-1] == "[SEP]" and out["tokens"] == out["key_tokens"]
    T = len(out["tokens"])
    assert len(out["maps"]) == 2 and all(len(h) == T and len(h[0]) == T for layer in out["maps"] for h in layer)
    _rows_sum_to_one(out["maps"])
    one = attention.attention_maps(ckpts["bert"], "the cat sat on the mat", layer=1)
    assert one["layer"] == 1 and one["maps"] == [out["maps"][1]]


def test_gpt_attention_is_causal(ckpts):
    out = attention.attention_maps(ckpts["gpt"], "the cat sat on the mat")
    assert out["stacks"] == ["decoder"] and out["stack"] == "decoder"
    _rows_sum_to_one(out["maps"])
    for layer in out["maps"]:
        for head in layer:
            assert all(head[i][j] == 0 for i in range(len(head)) for j in range(i + 1, len(head)))


def test_t5_has_three_stacks_and_reads_a_target(ckpts):
    enc = attention.attention_maps(ckpts["t5"], "the cat sat")
    assert enc["stacks"] == ["encoder", "decoder", "cross"] and enc["stack"] == "encoder" and enc["target"] is None
    assert enc["tokens"][-1] == "[SEP]" and len(enc["maps"]) == 2
    cross = attention.attention_maps(ckpts["t5"], "the cat sat", stack="cross", target="the dog")
    assert cross["tokens"] == ["[PAD]", "the", "dog"] and cross["key_tokens"] == enc["tokens"]
    assert cross["target"] == "the dog" and len(cross["maps"][0][0]) == 3 and len(cross["maps"][0][0][0]) == 4
    _rows_sum_to_one(cross["maps"])
    dec = attention.attention_maps(ckpts["t5"], "the cat sat", stack="decoder", target="the dog", layer=0)
    assert dec["key_tokens"] == dec["tokens"] and dec["maps"][0][0][0][1:] == [0, 0]  # causal
    greedy = attention.attention_maps(ckpts["t5"], "the cat sat", stack="cross")
    assert isinstance(greedy["target"], str) and len(greedy["tokens"]) >= 1


def test_albert_shared_layers_give_one_map_per_layer(base, tok_dir):
    from models_lib.families.albert import AlbertForPreTraining
    from models_lib.checkpoint import save_model
    from models_lib.core.config import EncoderConfig
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tok_dir)
    cfg = EncoderConfig.from_preset("albert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_heads=2,
                                    intermediate_size=64, num_layers=3, max_position_embeddings=64)
    torch.manual_seed(0)
    folder = save_model(AlbertForPreTraining(cfg).eval(), base / "albert")
    for name in ("tokenizer.json", "tokenizer_meta.json"):
        shutil.copy(tok_dir / name, folder / name)
    out = attention.attention_maps(folder, "the cat sat on the mat")
    assert out["layers"] == 3 and out["maps"][0] != out["maps"][1]  # one module, three calls, three maps


def test_attention_mistakes(ckpts):
    with pytest.raises(InferenceError, match="has no attention to show"):
        attention.attention_maps(ckpts["elmo"], "the cat sat")
    with pytest.raises(InferenceError, match="has no 'cross' attention; choose encoder"):
        attention.attention_maps(ckpts["bert"], "the cat sat", stack="cross")
    with pytest.raises(InferenceError, match="the attention viewer shows at most 128 tokens"):
        attention.attention_maps(ckpts["t5"], "cat " * 200)
    with pytest.raises(InferenceError, match="layer must be between 0 and 1"):
        attention.attention_maps(ckpts["gpt"], "the cat", layer=2)


# ---------------------------------------------------------------------------- ELMo
def test_elmo_compares_a_word_across_contexts_layer_by_layer(ckpts):
    out = similarity.word_similarity(ckpts["elmo"], "我今天吃了一个苹果", "我买了一部苹果手机", "苹果")
    assert [layer["layer"] for layer in out["layers"]] == [0, 1, 2]
    assert out["layers"][0]["name"] == "token representation"
    # Layer 0 does not see the context: the same two tokens give the same vector.
    assert out["layers"][0]["cosine"] == pytest.approx(1.0, abs=1e-5)
    assert all(layer["cosine"] < 0.9999 for layer in out["layers"][1:])  # the biLSTMs do see it
    assert [out["tokens_a"][i] for i in out["positions_a"]] == ["苹", "果"]
    assert [out["tokens_b"][i] for i in out["positions_b"]] == ["苹", "果"]
    same = similarity.word_similarity(ckpts["elmo"], "The cat sat.", "the CAT sat.", "Cat")
    assert all(layer["cosine"] == pytest.approx(1.0, abs=1e-5) for layer in same["layers"])  # same context


def test_word_similarity_mistakes(ckpts):
    with pytest.raises(InferenceError, match="“香蕉” is not in sentence A"):
        similarity.word_similarity(ckpts["elmo"], "我今天吃了一个苹果", "我买了一部苹果手机", "香蕉")
    with pytest.raises(InferenceError, match="Type the word"):
        similarity.word_similarity(ckpts["elmo"], "a", "b", " ")
    with pytest.raises(InferenceError, match="needs an ELMo checkpoint"):
        similarity.word_similarity(ckpts["bert"], "the cat", "a cat", "cat")


# ---------------------------------------------------------------------------- imported T5 and GPT-2
def _hf_generate(kind: str, folder: Path, prompt: str, **kw) -> list[int]:
    import transformers
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(prompt).ids
    if kind == "t5":
        model = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
        out, eos = model.generate(torch.tensor([ids]), do_sample=False, **kw)[0, 1:].tolist(), 1
    else:
        model = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
        out, eos = model.generate(torch.tensor([ids]), do_sample=False, pad_token_id=0, **kw)[0, len(ids):].tolist(), 0
    return out[: out.index(eos)] if eos in out else out


@pytest.mark.parametrize("kind, prompt", [("t5", "summarize: the cat sat on the mat"), ("gpt2", "The cat sat on")])
def test_imported_t5_and_gpt2_generate_what_transformers_generates(base, kind, prompt):
    from trainer.inference.importing import import_hf_directory

    src = (write_tiny_hf_t5 if kind == "t5" else write_tiny_hf_gpt2)(base / f"hf-{kind}")
    info = import_hf_directory(src, base / f"imported-{kind}")
    assert info["family"] == ("t5" if kind == "t5" else "gpt")
    assert info["objectives"] == (["span_corruption"] if kind == "t5" else ["clm"])
    folder = base / f"imported-{kind}"
    greedy = generation.generate(folder, prompt, max_new_tokens=10)
    assert greedy["ids"] == _hf_generate(kind, src, prompt, max_new_tokens=10, num_beams=1)
    beam = generation.generate(folder, prompt, max_new_tokens=10, strategy="beam", num_beams=3)
    assert beam["ids"] == _hf_generate(kind, src, prompt, max_new_tokens=10, num_beams=3)
    if kind == "t5":  # its sentinels came along
        assert generation.fill_spans(folder, "the cat <extra_id_0> the mat")["spans"][0]["sentinel"] == "<extra_id_0>"
