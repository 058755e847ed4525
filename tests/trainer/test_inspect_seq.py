"""The masking inspector on the objectives without MLM labels: T5's denoising objectives show
the encoder input next to the decoder target; GPT's and ELMo's LM batches say what is predicted."""
from __future__ import annotations

from trainer.inference.inspection import sample_batch


def test_span_corruption_shows_sentinels_in_the_input_and_their_spans_in_the_target(
        sentinel_tokenizer_dir, make_family_config):
    config = make_family_config("t5", model_overrides={}, objectives=["span_corruption"]).to_dict()
    examples = sample_batch(config, sentinel_tokenizer_dir, n_examples=3, seed=0)
    for ex in examples:
        inputs = [t["token"] for t in ex["tokens"] if t["role"] == "sentinel"]
        target = [t["token"] for t in ex["target"]["tokens"] if t["role"] == "sentinel"]
        assert inputs and inputs == [f"<extra_id_{i}>" for i in range(len(inputs))]  # in order, once each
        assert target[: len(inputs)] == inputs and len(target) == len(inputs) + 1  # plus the closing one
        assert ex["counts"]["target"] == len(ex["target"]["tokens"]) and ex["note"] is None
        assert any(t["role"] == "target" for t in ex["target"]["tokens"])
        assert sum(v for k, v in ex["counts"].items() if k != "target") == len(ex["tokens"])


def test_text_infilling_marks_the_mask_tokens(sentinel_tokenizer_dir, make_family_config):
    config = make_family_config("t5", model_overrides={}, objectives=["text_infilling"]).to_dict()
    ex = sample_batch(config, sentinel_tokenizer_dir, n_examples=2, seed=0)[0]
    assert ex["counts"].get("masked", 0) > 0 and "sentinel" not in ex["counts"]
    assert all(t["role"] != "masked" for t in ex["target"]["tokens"])  # the target is the original text


def test_causal_lm_rows_have_no_target_and_a_note(bpe_tokenizer_dir, make_family_config):
    config = make_family_config("gpt", model_overrides={}).to_dict()
    ex = sample_batch(config, bpe_tokenizer_dir, n_examples=2, seed=0)[0]
    assert ex["target"] is None and "every token is predicted" in ex["note"]
    assert set(ex["counts"]) <= {"none", "special"} and len(ex["tokens"]) == config["seq_len"]
